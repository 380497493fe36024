//! `Net` (layers in order, PyTorch's `nn.Sequential`) and `Model` (a net with its loss and
//! optimizer: forward, backward, update).

use crate::autograd::{no_grad, Gradients, Param};
use crate::loss::Loss;
use crate::nn::{distinct, indexed, Layer, Mode, Module, RngStream};
use crate::optim::{Optimizer, Schedule};
use crate::tensor::Tensor;

/// Layers applied in order (PyTorch's `nn.Sequential`). Itself a layer, so networks nest;
/// parameters are named `"{index}.{name}"` (`"0.weight"`, `"2.1.bias"`), as PyTorch names
/// them for the same structure.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let net = Net::new(vec![Box::new(Dense::new(4, 3)), Box::new(Relu::new())]);
/// let y = net.forward(&Tensor::ones(&[2, 4], DType::F32));
/// assert_eq!(y.shape(), &[2, 3]);
/// assert!(y.to_vec::<f32>().iter().all(|&v| v >= 0.0));
/// let names: Vec<String> = net.params().into_iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["0.weight", "0.bias"]);
/// ```
pub struct Net {
    layers: Vec<Box<dyn Layer>>,
    mode: Mode,
}

impl Net {
    /// A network in training mode.
    pub fn new(layers: Vec<Box<dyn Layer>>) -> Net {
        Net {
            layers,
            mode: Mode::Train,
        }
    }

    /// The output in this network's own mode (see [`Net::train`], [`Net::eval`]).
    ///
    /// To pass a mode, call the [`Layer`] form by its path: `Layer::forward(&net, &x,
    /// Mode::Train)`. (`net.forward(&x, Mode::Train)` does not compile: this one-argument
    /// method takes the name, and Rust does not choose methods by their argument count. The
    /// comment on the signature's line is there for the compiler's error, which quotes that
    /// line.)
    #[rustfmt::skip]
    pub fn forward(&self, x: &Tensor) -> Tensor { // with a mode: Layer::forward(&net, &x, mode)
        Layer::forward(self, x, self.mode)
    }

    /// Sets training mode (dropout active, batch statistics), used by [`Net::forward`].
    pub fn train(&mut self) {
        self.mode = Mode::Train;
    }

    /// Sets evaluation mode, used by [`Net::forward`]; as a layer inside another net, this
    /// net then stays in evaluation whatever mode it is called in.
    pub fn eval(&mut self) {
        self.mode = Mode::Eval;
    }

    /// The mode set by [`Net::train`] or [`Net::eval`] (training for a new net).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The layers, in the order they are applied.
    pub fn layers(&self) -> &[Box<dyn Layer>] {
        &self.layers
    }

    /// One line per layer with its parameter count.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (i, l) in self.layers.iter().enumerate() {
            out.push_str(&format!("{i:>3} {:<24} {:>10}\n", l.name(), l.num_params()));
        }
        out.push_str(&format!(
            "    {:<24} {:>10}\n",
            "total parameters",
            self.num_params()
        ));
        out
    }
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.layers.iter().map(|l| l.name()))
            .finish()
    }
}

impl Module for Net {
    fn params(&self) -> Vec<(String, Param)> {
        distinct(indexed(&self.layers, |l| l.params()))
    }

    fn buffers(&self) -> Vec<(String, Param)> {
        distinct(indexed(&self.layers, |l| l.buffers()))
    }

    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        indexed(&self.layers, |l| l.rng_streams())
    }

    fn state_params(&self) -> Vec<(String, Param)> {
        distinct(indexed(&self.layers, |l| l.state_params()))
    }

    fn name(&self) -> String {
        format!("Net({} layers)", self.layers.len())
    }
}

impl Layer for Net {
    /// Runs in `mode`, unless this net was set to [`Net::eval`]: then it stays in evaluation
    /// whatever its caller's mode (a frozen backbone keeps its running statistics, as a PyTorch
    /// sub-module after `.eval()`).
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        let mode = if self.mode == Mode::Eval {
            Mode::Eval
        } else {
            mode
        };
        self.layers
            .iter()
            .fold(x.clone(), |h, layer| layer.forward(&h, mode))
    }
}

/// A network trained with a loss and an optimizer.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let net = Net::new(vec![Box::new(Dense::new(4, 3))]);
/// let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Sgd::new(0.1));
/// let x = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], &[2, 4]);
/// let y = one_hot(&[0u8, 2], 3);
/// let (before, grads) = model.backward(&model.forward(&x), &y);
/// model.apply_grads(&grads);
/// let (after, _) = model.backward(&model.forward(&x), &y);
/// assert!(after < before);
/// ```
pub struct Model {
    net: Net,
    loss: Box<dyn Loss>,
    optimizer: Box<dyn Optimizer>,
    /// Sets the learning rate before every update, from the number of steps taken.
    schedule: Option<Box<dyn Schedule>>,
    /// How a compiled model computes a step's loss and gradients.
    compiled: Option<Box<dyn StepPlans>>,
}

/// A step's loss and gradients computed other than by the eager forward and backward (the
/// compiled plans of `Model::compile`, a layer above).
pub(crate) trait StepPlans: Send + Sync {
    fn loss_and_grads(
        &mut self,
        net: &Net,
        loss: &dyn Loss,
        x: &Tensor,
        target: &Tensor,
    ) -> (f32, Gradients);
}

impl Model {
    /// A model that trains `net` on `loss` with `optimizer`, at the optimizer's learning rate
    /// unless [`Model::with_schedule`] sets one.
    pub fn new(net: Net, loss: impl Loss + 'static, optimizer: impl Optimizer + 'static) -> Model {
        Model {
            net,
            loss: Box::new(loss),
            optimizer: Box::new(optimizer),
            schedule: None,
            compiled: None,
        }
    }

    /// The learning rate follows `schedule`, read at the number of optimizer steps taken
    /// before each update (step 0 first): no `set_lr` by hand in the training loop.
    pub fn with_schedule(mut self, schedule: impl Schedule + 'static) -> Model {
        self.schedule = Some(Box::new(schedule));
        self
    }

    /// The network's output (recorded for backward in training mode).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.net.forward(x)
    }

    /// The loss of `pred` against `target` and its gradients for every parameter.
    pub fn backward(&self, pred: &Tensor, target: &Tensor) -> (f32, Gradients) {
        assert!(
            pred.numel() > 0,
            "Model::backward: empty batch (predictions {:?}); the mean loss of no samples is \
             undefined and would write NaN into the weights",
            pred.shape()
        );
        let loss = self.loss(pred, target);
        let grads = loss.backward();
        (loss.item() as f32, grads)
    }

    /// The loss of `pred` against `target`, as a differentiable 0-d tensor: what
    /// [`Model::backward`] differentiates, for a caller that runs backward its own way
    /// (overlapping it with communication, say).
    pub fn loss(&self, pred: &Tensor, target: &Tensor) -> Tensor {
        self.loss.loss(pred, target)
    }

    /// One optimizer step with `grads`.
    pub fn apply_grads(&mut self, grads: &Gradients) {
        if let Some(s) = &self.schedule {
            self.optimizer.set_lr(s.lr(self.optimizer.steps()));
        }
        let params = self.net.params();
        self.optimizer.step(&params, grads);
    }

    /// [`Model::apply_grads`] under the Python binding's (and tinynn's) name.
    pub fn apply_grad(&mut self, grads: &Gradients) {
        self.apply_grads(grads);
    }

    /// This model with `plans` computing its steps' losses and gradients.
    pub(crate) fn with_step_plans(mut self, plans: Box<dyn StepPlans>) -> Model {
        self.compiled = Some(plans);
        self
    }

    /// Forward, backward and update on one batch; returns the loss. The graph is released
    /// before the update, so the optimizer updates parameters in place. A compiled model
    /// ([`Model::compile`]) runs its plan for the forward and backward.
    pub fn train_step(&mut self, x: &Tensor, target: &Tensor) -> f32 {
        let (loss, grads) = match &mut self.compiled {
            Some(plans) => plans.loss_and_grads(&self.net, self.loss.as_ref(), x, target),
            None => {
                let pred = self.forward(x);
                self.backward(&pred, target)
            }
        };
        self.apply_grads(&grads);
        loss
    }

    /// The output in evaluation mode, without recording. Takes `&self`: the mode is passed
    /// down, not set, so several threads can predict with one model.
    pub fn predict(&self, x: &Tensor) -> Tensor {
        no_grad(|| Layer::forward(&self.net, x, Mode::Eval))
    }

    /// The network.
    pub fn net(&self) -> &Net {
        &self.net
    }

    /// The network, to change its mode or parameters.
    pub fn net_mut(&mut self) -> &mut Net {
        &mut self.net
    }

    /// The optimizer (its learning rate, step count and state).
    pub fn optimizer(&self) -> &dyn Optimizer {
        self.optimizer.as_ref()
    }

    /// The optimizer, to set its learning rate or load its state.
    pub fn optimizer_mut(&mut self) -> &mut dyn Optimizer {
        self.optimizer.as_mut()
    }
}
