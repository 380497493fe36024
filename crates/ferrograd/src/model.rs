//! `Net` (ordered layers) and `Model` (net + loss + optimizer), the seed's pipeline.

use std::collections::HashMap;

use crate::autograd::{no_grad, Gradients, Param};
use crate::error::{Error, Result};
use crate::loss::Loss;
use crate::nn::{Layer, Mode, RngStream};
use crate::optim::Optimizer;
use crate::tensor::Tensor;

/// Layers applied in order. Parameters are named `"{index}.{name}"` (`"0.w"`, `"0.b"`, ...).
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

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.layers
            .iter()
            .fold(x.clone(), |h, layer| layer.forward(&h, self.mode))
    }

    pub fn train(&mut self) {
        self.mode = Mode::Train;
    }

    pub fn eval(&mut self) {
        self.mode = Mode::Eval;
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn layers(&self) -> &[Box<dyn Layer>] {
        &self.layers
    }

    /// Trainable parameters, named by layer index.
    pub fn params(&self) -> Vec<(String, Param)> {
        self.named(|l| l.params())
    }

    /// Saved but untrained state (BatchNorm running statistics).
    pub fn buffers(&self) -> Vec<(String, Param)> {
        self.named(|l| l.buffers())
    }

    /// The random streams of every layer that draws in training, named by layer index.
    pub fn rng_streams(&self) -> Vec<(String, RngStream)> {
        self.named(|l| l.rng_streams())
    }

    fn named<V>(&self, of: impl Fn(&dyn Layer) -> Vec<(String, V)>) -> Vec<(String, V)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                of(l.as_ref())
                    .into_iter()
                    .map(move |(n, p)| (format!("{i}.{n}"), p))
            })
            .collect()
    }

    /// Every parameter and buffer value by name.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        self.params()
            .into_iter()
            .chain(self.buffers())
            .map(|(n, p)| (n, p.tensor().detach()))
            .collect()
    }

    /// Sets every parameter and buffer from `state`. Checks names, shapes and dtypes first and
    /// reports every mismatch at once; nothing is changed when there is one.
    pub fn load_state(&self, state: &HashMap<String, Tensor>) -> Result<()> {
        self.check_state(state)?;
        for (name, p) in self.params().into_iter().chain(self.buffers()) {
            p.set(&state[&name]);
        }
        Ok(())
    }

    /// Whether `state` fits this network (every name present, same shapes and dtypes, nothing
    /// extra); the error lists every mismatch.
    pub fn check_state(&self, state: &HashMap<String, Tensor>) -> Result<()> {
        let slots: Vec<(String, Param)> = self.params().into_iter().chain(self.buffers()).collect();
        let mut problems = Vec::new();
        for (name, p) in &slots {
            match state.get(name) {
                None => problems.push(format!("{name}: missing")),
                Some(t) if t.shape() != p.shape().as_slice() || t.dtype() != p.dtype() => problems
                    .push(format!(
                        "{name}: expected {:?} {}, found {:?} {}",
                        p.shape(),
                        p.dtype(),
                        t.shape(),
                        t.dtype()
                    )),
                Some(_) => {}
            }
        }
        let known: std::collections::HashSet<&str> =
            slots.iter().map(|(n, _)| n.as_str()).collect();
        let mut extra: Vec<&String> = state
            .keys()
            .filter(|k| !known.contains(k.as_str()))
            .collect();
        extra.sort();
        problems.extend(
            extra
                .into_iter()
                .map(|k| format!("{k}: not a parameter of this network")),
        );
        if !problems.is_empty() {
            return Err(Error::Shape(format!(
                "state does not fit the network: {}",
                problems.join("; ")
            )));
        }
        Ok(())
    }

    /// One line per layer with its parameter count.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let mut total = 0;
        for (i, l) in self.layers.iter().enumerate() {
            let n: usize = l.params().iter().map(|(_, p)| p.numel()).sum();
            total += n;
            out.push_str(&format!("{i:>3} {:<24} {n:>10}\n", l.name()));
        }
        out.push_str(&format!("    {:<24} {total:>10}\n", "total parameters"));
        out
    }
}

/// A network trained with a loss and an optimizer.
pub struct Model {
    net: Net,
    loss: Box<dyn Loss>,
    optimizer: Box<dyn Optimizer>,
}

impl Model {
    pub fn new(net: Net, loss: impl Loss + 'static, optimizer: impl Optimizer + 'static) -> Model {
        Model {
            net,
            loss: Box::new(loss),
            optimizer: Box::new(optimizer),
        }
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
        let loss = self.loss.loss(pred, target);
        let grads = loss.backward();
        (loss.item() as f32, grads)
    }

    /// One optimizer step with `grads`.
    pub fn apply_grads(&mut self, grads: &Gradients) {
        let params = self.net.params();
        self.optimizer.step(&params, grads);
    }

    /// Forward, backward and update on one batch; returns the loss. The graph is released
    /// before the update, so the optimizer updates parameters in place.
    pub fn train_step(&mut self, x: &Tensor, target: &Tensor) -> f32 {
        let (loss, grads) = {
            let pred = self.forward(x);
            self.backward(&pred, target)
        };
        self.apply_grads(&grads);
        loss
    }

    /// The output in evaluation mode, without recording.
    pub fn predict(&mut self, x: &Tensor) -> Tensor {
        let mode = self.net.mode();
        self.net.eval();
        let out = no_grad(|| self.net.forward(x));
        self.net.mode = mode;
        out
    }

    pub fn net(&self) -> &Net {
        &self.net
    }

    pub fn net_mut(&mut self) -> &mut Net {
        &mut self.net
    }

    pub fn optimizer(&self) -> &dyn Optimizer {
        self.optimizer.as_ref()
    }

    pub fn optimizer_mut(&mut self) -> &mut dyn Optimizer {
        self.optimizer.as_mut()
    }
}
