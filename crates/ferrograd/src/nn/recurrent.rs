//! Recurrent layers with PyTorch's equations, gate orders, parameter names and layouts
//! (batch-first by default, `[T, N, F]` with `batch_first(false)`, PyTorch's default): `Rnn`
//! (tanh, or ReLU), `Lstm` (gates i, f, g, o), `Gru` (gates r, z, n); stacked, bidirectional,
//! without biases and with dropout between layers as PyTorch's `num_layers`,
//! `bidirectional`, `bias` and `dropout`. Each direction of each layer is one fused op over
//! the whole sequence (the ReLU RNN a loop of primitives), differentiable to any order.

use super::{expect_input, Dropout, Layer, Mode, Module, RngStream};
use crate::autograd::Param;
use crate::init;
use crate::tensor::{with_default_rng, DType, Tensor};
use crate::RecurrentWeights;

/// Which cell a [`Recurrent`] stack runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Tanh,
    Relu,
    Lstm,
    Gru,
}

impl Cell {
    /// Rows of the gate matrices per hidden unit.
    fn gates(self) -> usize {
        match self {
            Cell::Tanh | Cell::Relu => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Tanh | Cell::Relu => "Rnn",
            Cell::Lstm => "Lstm",
            Cell::Gru => "Gru",
        }
    }
}

/// One direction of one layer: `weight_ih` `[G·H, in]`, `weight_hh` `[G·H, H]`, biases
/// `[G·H]` unless the stack has none.
struct LayerWeights {
    w_ih: Param,
    w_hh: Param,
    biases: Option<(Param, Param)>,
}

/// The settings a stack's weights are drawn for.
#[derive(Clone, Copy)]
struct Shape {
    cell: Cell,
    input: usize,
    hidden: usize,
    num_layers: usize,
    bidirectional: bool,
    bias: bool,
}

impl Shape {
    fn directions(&self) -> usize {
        1 + usize::from(self.bidirectional)
    }
}

/// A stack of recurrent layers; `Rnn`, `Lstm` and `Gru` wrap it.
struct Recurrent {
    shape: Shape,
    /// `layers[k][d]`: layer `k`, direction `d` (0 forward, 1 backward in time).
    layers: Vec<Vec<LayerWeights>>,
    /// Inputs and outputs `[N, T, F]` (else `[T, N, F]`); states are `[L·D, N, H]` either way.
    batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (made only when
    /// asked for: its generator is seeded from the default one).
    dropout: Option<Dropout>,
}

impl Recurrent {
    /// The layers drawn as PyTorch draws them: every weight and bias U(±1/√H), in the order
    /// of [`Recurrent::params`].
    fn new(shape: Shape) -> Recurrent {
        let Shape {
            cell,
            input,
            hidden,
            num_layers,
            ..
        } = shape;
        assert!(
            input > 0 && hidden > 0 && num_layers > 0,
            "{}: input size, hidden size and layer count must be positive",
            cell.name()
        );
        let bound = 1.0 / (hidden as f64).sqrt();
        let rows = cell.gates() * hidden;
        let draw = |shape: &[usize]| {
            Param::new(with_default_rng(|rng| {
                init::uniform(shape, -bound, bound, DType::F32, rng)
            }))
        };
        let width = hidden * shape.directions();
        let layers = (0..num_layers)
            .map(|k| {
                (0..shape.directions())
                    .map(|_| LayerWeights {
                        w_ih: draw(&[rows, if k == 0 { input } else { width }]),
                        w_hh: draw(&[rows, hidden]),
                        biases: shape.bias.then(|| (draw(&[rows]), draw(&[rows]))),
                    })
                    .collect()
            })
            .collect();
        Recurrent {
            shape,
            layers,
            batch_first: true,
            dropout: None,
        }
    }

    /// The same stack drawn again for `shape`, keeping the layout and dropout.
    fn reshaped(self, shape: Shape) -> Recurrent {
        Recurrent {
            batch_first: self.batch_first,
            dropout: self.dropout,
            ..Recurrent::new(shape)
        }
    }

    /// PyTorch's names and order: per layer, per direction (`_reverse` for the backward
    /// one), `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`.
    fn params(&self) -> Vec<(String, Param)> {
        let mut out = Vec::new();
        for (k, directions) in self.layers.iter().enumerate() {
            for (d, l) in directions.iter().enumerate() {
                let tail = format!("l{k}{}", if d == 1 { "_reverse" } else { "" });
                out.push((format!("weight_ih_{tail}"), l.w_ih.clone()));
                out.push((format!("weight_hh_{tail}"), l.w_hh.clone()));
                if let Some((b_ih, b_hh)) = &l.biases {
                    out.push((format!("bias_ih_{tail}"), b_ih.clone()));
                    out.push((format!("bias_hh_{tail}"), b_hh.clone()));
                }
            }
        }
        out
    }

    fn name(&self) -> String {
        let s = &self.shape;
        let mut name = format!(
            "{}({}, {}, num_layers={}",
            s.cell.name(),
            s.input,
            s.hidden,
            s.num_layers
        );
        for (on, text) in [
            (s.cell == Cell::Relu, ", nonlinearity=relu".to_string()),
            (!s.bias, ", bias=false".to_string()),
            (
                self.dropout.is_some(),
                format!(
                    ", dropout={}",
                    self.dropout.as_ref().map_or(0.0, Dropout::p)
                ),
            ),
            (s.bidirectional, ", bidirectional".to_string()),
        ] {
            if on {
                name.push_str(&text);
            }
        }
        name + ")"
    }

    /// `x` in the layer's layout as `[N, T, F]`, or the outputs `[N, T, D·H]` back in it.
    fn batch_major(&self, x: &Tensor) -> Tensor {
        if self.batch_first {
            x.clone()
        } else {
            x.transpose(0, 1)
        }
    }

    /// Checks `x` (`[N, T, input]`, or `[T, N, input]` time first) and a state `[L·D, N, H]`,
    /// naming the layer.
    fn check(&self, x: &Tensor, states: &[&Tensor]) {
        let input = self.shape.input;
        let fits = x.ndim() == 3 && x.shape()[2] == input;
        let expected = match self.batch_first {
            true => format!("[N, T, {input}] (batch first)"),
            false => format!("[T, N, {input}] (time first)"),
        };
        expect_input(&self.name(), fits, &expected, x);
        let batch = x.shape()[usize::from(!self.batch_first)];
        let want = [
            self.shape.num_layers * self.shape.directions(),
            batch,
            self.shape.hidden,
        ];
        for s in states {
            assert!(
                s.shape() == want,
                "{}: expected an initial state {want:?}, got {:?}",
                self.name(),
                s.shape()
            );
        }
    }

    /// Runs every layer over the sequence: the last layer's outputs `[N, T, D·H]` and the
    /// final states of every layer and direction (`h`, and `c` for the LSTM), `[L·D, N, H]`
    /// each. The backward direction reads the sequence from its end; its outputs are put back
    /// in time order and follow the forward direction's along the features.
    fn run(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
        mode: Mode,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let zeros = Tensor::zeros(&[x.shape()[0], self.shape.hidden], x.dtype());
        let initial = |s: Option<&Tensor>, i: usize| {
            s.map_or(zeros.clone(), |s| s.narrow(0, i, 1).squeeze(0))
        };
        let mut seq = x.clone();
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        let last = self.layers.len() - 1;
        for (k, directions) in self.layers.iter().enumerate() {
            let mut outs = Vec::new();
            for (d, l) in directions.iter().enumerate() {
                let i = k * directions.len() + d;
                let input = if d == 1 { seq.flip(&[1]) } else { seq.clone() };
                let (out, h, c) = self.direction(&input, l, initial(h0, i), initial(c0, i));
                outs.push(if d == 1 { out.flip(&[1]) } else { out });
                hs.push(h);
                cs.extend(c);
            }
            seq = if outs.len() == 1 {
                outs.remove(0)
            } else {
                Tensor::cat(&outs.iter().collect::<Vec<_>>(), 2)
            };
            if let Some(dropout) = self.dropout.as_ref().filter(|_| k < last) {
                seq = Layer::forward(dropout, &seq, mode);
            }
        }
        let stack = |v: &[Tensor]| Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
        let c = (self.shape.cell == Cell::Lstm).then(|| stack(&cs));
        (seq, stack(&hs), c)
    }

    /// One direction of one layer over `x` `[N, T, F]`: outputs `[N, T, H]`, the final `h`
    /// and, for the LSTM, the final `c`.
    fn direction(
        &self,
        x: &Tensor,
        l: &LayerWeights,
        h: Tensor,
        c: Tensor,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        // Parameters in another dtype than the input follow the input's; a stack without
        // biases adds zeros.
        let dtype = x.dtype();
        let rows = l.w_hh.shape()[0];
        let [w_ih, w_hh] = [&l.w_ih, &l.w_hh].map(|p| p.tensor().to_dtype(dtype));
        let [b_ih, b_hh] = match &l.biases {
            Some((b_ih, b_hh)) => [b_ih, b_hh].map(|p| p.tensor().to_dtype(dtype)),
            None => [(), ()].map(|_| Tensor::zeros(&[rows], dtype)),
        };
        let w = RecurrentWeights {
            w_ih: &w_ih,
            w_hh: &w_hh,
            b_ih: &b_ih,
            b_hh: &b_hh,
        };
        match self.shape.cell {
            Cell::Tanh => {
                let (out, h) = x.rnn_tanh(&h, w);
                (out, h, None)
            }
            Cell::Relu => {
                let (out, h) = rnn_relu(x, h, w);
                (out, h, None)
            }
            Cell::Gru => {
                let (out, h) = x.gru(&h, w);
                (out, h, None)
            }
            Cell::Lstm => {
                let (out, h, c) = x.lstm(&h, &c, w);
                (out, h, Some(c))
            }
        }
    }
}

/// The ReLU RNN, `h' = relu(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)`, step by step from the
/// primitives (the input's product for every step at once).
fn rnn_relu(x: &Tensor, mut h: Tensor, w: RecurrentWeights<'_>) -> (Tensor, Tensor) {
    let steps = x.shape()[1];
    if steps == 0 {
        return (
            Tensor::zeros(&[x.shape()[0], 0, h.shape()[1]], x.dtype()),
            h,
        );
    }
    let from_input = &x.matmul(&w.w_ih.transpose(0, 1)) + w.b_ih;
    let w_hh = w.w_hh.transpose(0, 1);
    let mut outs = Vec::with_capacity(steps);
    for t in 0..steps {
        let step = from_input.narrow(1, t, 1).squeeze(1);
        h = (&(&step + &h.matmul(&w_hh)) + w.b_hh).relu();
        outs.push(h.clone());
    }
    (Tensor::stack(&outs.iter().collect::<Vec<_>>(), 1), h)
}

macro_rules! recurrent_layer {
    ($(#[$doc:meta])* $name:ident, $cell:expr) => {
        $(#[$doc])*
        pub struct $name(Recurrent);

        impl $name {
            /// One layer from `input_size` features to `hidden_size` units.
            pub fn new(input_size: usize, hidden_size: usize) -> Self {
                $name(Recurrent::new(Shape {
                    cell: $cell,
                    input: input_size,
                    hidden: hidden_size,
                    num_layers: 1,
                    bidirectional: false,
                    bias: true,
                }))
            }

            /// `layers` stacked layers (the weights are drawn again).
            pub fn num_layers(self, layers: usize) -> Self {
                let shape = Shape { num_layers: layers, ..self.0.shape };
                $name(self.0.reshaped(shape))
            }

            /// A second direction per layer that reads the sequence from its end (PyTorch's
            /// `bidirectional`): outputs `[.., 2·H]`, states `[2·L, N, H]`, parameters
            /// `*_reverse` beside each layer's (the weights are drawn again).
            pub fn bidirectional(self, on: bool) -> Self {
                let shape = Shape { bidirectional: on, ..self.0.shape };
                $name(self.0.reshaped(shape))
            }

            /// Without `bias_ih` and `bias_hh` (PyTorch's `bias=False`; the weights are drawn
            /// again).
            pub fn bias(self, on: bool) -> Self {
                let shape = Shape { bias: on, ..self.0.shape };
                $name(self.0.reshaped(shape))
            }

            /// Dropout with probability `p` on the outputs of every layer but the last, in
            /// training mode (PyTorch's `dropout`).
            pub fn dropout(self, p: f64) -> Self {
                let dropout = (p > 0.0).then(|| Dropout::new(p));
                $name(Recurrent { dropout, ..self.0 })
            }

            /// Inputs and outputs `[N, T, F]` (true, the default) or `[T, N, F]` (false,
            /// PyTorch's default); the states are `[L, N, H]` either way.
            pub fn batch_first(self, on: bool) -> Self {
                $name(Recurrent { batch_first: on, ..self.0 })
            }
        }

        impl Module for $name {
            fn params(&self) -> Vec<(String, Param)> {
                self.0.params()
            }

            fn name(&self) -> String {
                self.0.name()
            }

            fn rng_streams(&self) -> Vec<(String, RngStream)> {
                self.0.dropout.as_ref().map_or_else(Vec::new, Module::rng_streams)
            }
        }

        impl Layer for $name {
            /// The outputs `[N, T, D·H]` (or `[T, N, D·H]`), from a zero initial state.
            fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
                self.forward_seq_in(x, None, mode).0
            }
        }
    };
}

recurrent_layer!(
    /// Elman RNN with tanh (PyTorch's `nn.RNN`, `batch_first=True`):
    /// `h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)`.
    Rnn,
    Cell::Tanh
);
recurrent_layer!(
    /// LSTM (PyTorch's `nn.LSTM`, `batch_first=True`), gates i, f, g, o in that order.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let lstm = Lstm::new(10, 32).num_layers(2);
    /// let x = Tensor::zeros(&[4, 7, 10], DType::F32); // [N, T, features]
    /// let (out, (h, c)) = lstm.forward_seq(&x, None);
    /// assert_eq!(out.shape(), &[4, 7, 32]);
    /// assert_eq!(h.shape(), &[2, 4, 32]);
    /// assert_eq!(c.shape(), &[2, 4, 32]);
    /// assert_eq!(lstm.params()[0].0, "weight_ih_l0"); // [4·32, 10]
    /// ```
    Lstm,
    Cell::Lstm
);
recurrent_layer!(
    /// GRU (PyTorch's `nn.GRU`, `batch_first=True`), gates r, z, n in that order, with
    /// `n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))`.
    Gru,
    Cell::Gru
);

/// `forward_seq` of the layers whose state is one hidden tensor.
macro_rules! hidden_state_forward {
    ($($name:ident),*) => {$(
        impl $name {
            /// Outputs `[N, T, D·H]` (`[T, N, D·H]` time first) and the final hidden state
            /// `[L·D, N, H]` (D = 2 when bidirectional); `h0` of that shape or zeros. In
            /// training mode, as a layer called without a mode runs.
            pub fn forward_seq(&self, x: &Tensor, h0: Option<Tensor>) -> (Tensor, Tensor) {
                self.forward_seq_in(x, h0, Mode::Train)
            }

            /// [`Self::forward_seq`] in `mode` (dropout between layers only in training).
            pub fn forward_seq_in(
                &self,
                x: &Tensor,
                h0: Option<Tensor>,
                mode: Mode,
            ) -> (Tensor, Tensor) {
                self.0.check(x, &h0.iter().collect::<Vec<_>>());
                let (out, h, _) = self.0.run(&self.0.batch_major(x), h0.as_ref(), None, mode);
                (self.0.batch_major(&out), h)
            }
        }
    )*};
}

hidden_state_forward!(Rnn, Gru);

impl Rnn {
    /// ReLU instead of tanh (PyTorch's `nonlinearity='relu'`): `h' = relu(x W_ihᵀ + b_ih +
    /// h W_hhᵀ + b_hh)`; the weights stay.
    pub fn relu(self, on: bool) -> Self {
        let cell = if on { Cell::Relu } else { Cell::Tanh };
        let shape = Shape {
            cell,
            ..self.0.shape
        };
        Rnn(Recurrent { shape, ..self.0 })
    }
}

impl Lstm {
    /// Outputs `[N, T, D·H]` (`[T, N, D·H]` time first) and the final `(h, c)`, `[L·D, N,
    /// H]` each (D = 2 when bidirectional); the initial state `(h0, c0)` or zeros. In
    /// training mode, as a layer called without a mode runs.
    pub fn forward_seq(
        &self,
        x: &Tensor,
        state: Option<(Tensor, Tensor)>,
    ) -> (Tensor, (Tensor, Tensor)) {
        self.forward_seq_in(x, state, Mode::Train)
    }

    /// [`Lstm::forward_seq`] in `mode` (dropout between layers only in training).
    pub fn forward_seq_in(
        &self,
        x: &Tensor,
        state: Option<(Tensor, Tensor)>,
        mode: Mode,
    ) -> (Tensor, (Tensor, Tensor)) {
        let (h0, c0) = match &state {
            Some((h, c)) => (Some(h), Some(c)),
            None => (None, None),
        };
        self.0
            .check(x, &h0.iter().chain(c0.iter()).copied().collect::<Vec<_>>());
        let (out, h, c) = self.0.run(&self.0.batch_major(x), h0, c0, mode);
        let c = c.expect("an LSTM keeps its cell state");
        (self.0.batch_major(&out), (h, c))
    }
}
