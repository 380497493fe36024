//! Recurrent layers with PyTorch's equations, gate orders, parameter names and layouts
//! (batch-first by default, `[T, N, F]` with `batch_first(false)`, PyTorch's default): `Rnn`
//! (tanh), `Lstm` (gates i, f, g, o), `Gru` (gates r, z, n). Each layer of a stack is one fused
//! op over the whole sequence, differentiable to any order.

use super::{expect_input, Layer, Mode, Module};
use crate::autograd::Param;
use crate::init;
use crate::tensor::{with_default_rng, DType, Tensor};
use crate::RecurrentWeights;

/// Which cell a [`Recurrent`] stack runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Tanh,
    Lstm,
    Gru,
}

impl Cell {
    /// Rows of the gate matrices per hidden unit.
    fn gates(self) -> usize {
        match self {
            Cell::Tanh => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Tanh => "Rnn",
            Cell::Lstm => "Lstm",
            Cell::Gru => "Gru",
        }
    }
}

/// One layer's weights: `weight_ih` `[G·H, in]`, `weight_hh` `[G·H, H]`, biases `[G·H]`.
struct LayerWeights {
    w_ih: Param,
    w_hh: Param,
    b_ih: Param,
    b_hh: Param,
}

/// A stack of recurrent layers; `Rnn`, `Lstm` and `Gru` wrap it.
struct Recurrent {
    cell: Cell,
    input: usize,
    hidden: usize,
    layers: Vec<LayerWeights>,
    /// Inputs and outputs `[N, T, F]` (else `[T, N, F]`); states are `[L, N, H]` either way.
    batch_first: bool,
}

impl Recurrent {
    /// `num_layers` layers drawn as PyTorch draws them: every weight and bias U(±1/√H).
    fn new(cell: Cell, input: usize, hidden: usize, num_layers: usize) -> Recurrent {
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
        let layers = (0..num_layers)
            .map(|k| LayerWeights {
                w_ih: draw(&[rows, if k == 0 { input } else { hidden }]),
                w_hh: draw(&[rows, hidden]),
                b_ih: draw(&[rows]),
                b_hh: draw(&[rows]),
            })
            .collect();
        Recurrent {
            cell,
            input,
            hidden,
            layers,
            batch_first: true,
        }
    }

    fn params(&self) -> Vec<(String, Param)> {
        let mut out = Vec::new();
        for (k, l) in self.layers.iter().enumerate() {
            out.push((format!("weight_ih_l{k}"), l.w_ih.clone()));
            out.push((format!("weight_hh_l{k}"), l.w_hh.clone()));
            out.push((format!("bias_ih_l{k}"), l.b_ih.clone()));
            out.push((format!("bias_hh_l{k}"), l.b_hh.clone()));
        }
        out
    }

    fn name(&self) -> String {
        format!(
            "{}({}, {}, num_layers={})",
            self.cell.name(),
            self.input,
            self.hidden,
            self.layers.len()
        )
    }

    /// `x` in the layer's layout as `[N, T, F]`, or the outputs `[N, T, H]` back in it.
    fn batch_major(&self, x: &Tensor) -> Tensor {
        if self.batch_first {
            x.clone()
        } else {
            x.transpose(0, 1)
        }
    }

    /// Checks `x` (`[N, T, input]`, or `[T, N, input]` time first) and a state `[L, N, H]`,
    /// naming the layer.
    fn check(&self, x: &Tensor, states: &[&Tensor]) {
        let fits = x.ndim() == 3 && x.shape()[2] == self.input;
        let expected = match self.batch_first {
            true => format!("[N, T, {}] (batch first)", self.input),
            false => format!("[T, N, {}] (time first)", self.input),
        };
        expect_input(&self.name(), fits, &expected, x);
        let batch = x.shape()[usize::from(!self.batch_first)];
        let want = [self.layers.len(), batch, self.hidden];
        for s in states {
            assert!(
                s.shape() == want,
                "{}: expected an initial state {want:?}, got {:?}",
                self.name(),
                s.shape()
            );
        }
    }

    /// Runs every layer over the sequence: the last layer's outputs `[N, T, H]` and each
    /// layer's final states (`h`, and `c` for the LSTM), `[L, N, H]` each. Each layer is one
    /// fused op (`Tensor::lstm`, `gru`, `rnn_tanh`).
    fn run(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let zeros = Tensor::zeros(&[x.shape()[0], self.hidden], x.dtype());
        let initial = |s: Option<&Tensor>, k: usize| {
            s.map_or(zeros.clone(), |s| s.narrow(0, k, 1).squeeze(0))
        };
        let mut seq = x.clone();
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        for (k, l) in self.layers.iter().enumerate() {
            // Parameters in another dtype than the input follow the input's.
            let [w_ih, w_hh, b_ih, b_hh] =
                [&l.w_ih, &l.w_hh, &l.b_ih, &l.b_hh].map(|p| p.tensor().to_dtype(x.dtype()));
            let w = RecurrentWeights {
                w_ih: &w_ih,
                w_hh: &w_hh,
                b_ih: &b_ih,
                b_hh: &b_hh,
            };
            let h = initial(h0, k);
            let (out, h) = match self.cell {
                Cell::Tanh => seq.rnn_tanh(&h, w),
                Cell::Gru => seq.gru(&h, w),
                Cell::Lstm => {
                    let (out, h, c) = seq.lstm(&h, &initial(c0, k), w);
                    cs.push(c);
                    (out, h)
                }
            };
            seq = out;
            hs.push(h);
        }
        let stack = |v: &[Tensor]| Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
        let c = (self.cell == Cell::Lstm).then(|| stack(&cs));
        (seq, stack(&hs), c)
    }
}

macro_rules! recurrent_layer {
    ($(#[$doc:meta])* $name:ident, $cell:expr) => {
        $(#[$doc])*
        pub struct $name(Recurrent);

        impl $name {
            /// One layer from `input_size` features to `hidden_size` units.
            pub fn new(input_size: usize, hidden_size: usize) -> Self {
                $name(Recurrent::new($cell, input_size, hidden_size, 1))
            }

            /// `layers` stacked layers (the weights are drawn again).
            pub fn num_layers(self, layers: usize) -> Self {
                let batch_first = self.0.batch_first;
                $name(Recurrent::new($cell, self.0.input, self.0.hidden, layers)).batch_first(batch_first)
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
        }

        impl Layer for $name {
            /// The outputs `[N, T, H]` (or `[T, N, H]`), from a zero initial state.
            fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
                self.forward_seq(x, None).0
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
            /// Outputs `[N, T, H]` (`[T, N, H]` time first) and the final hidden state
            /// `[L, N, H]`; `h0` `[L, N, H]` or zeros.
            pub fn forward_seq(&self, x: &Tensor, h0: Option<Tensor>) -> (Tensor, Tensor) {
                self.0.check(x, &h0.iter().collect::<Vec<_>>());
                let (out, h, _) = self.0.run(&self.0.batch_major(x), h0.as_ref(), None);
                (self.0.batch_major(&out), h)
            }
        }
    )*};
}

hidden_state_forward!(Rnn, Gru);

impl Lstm {
    /// Outputs `[N, T, H]` (`[T, N, H]` time first) and the final `(h, c)`, `[L, N, H]`
    /// each; the initial state `(h0, c0)` or zeros.
    pub fn forward_seq(
        &self,
        x: &Tensor,
        state: Option<(Tensor, Tensor)>,
    ) -> (Tensor, (Tensor, Tensor)) {
        let (h0, c0) = match &state {
            Some((h, c)) => (Some(h), Some(c)),
            None => (None, None),
        };
        self.0
            .check(x, &h0.iter().chain(c0.iter()).copied().collect::<Vec<_>>());
        let (out, h, c) = self.0.run(&self.0.batch_major(x), h0, c0);
        let c = c.expect("an LSTM keeps its cell state");
        (self.0.batch_major(&out), (h, c))
    }
}
