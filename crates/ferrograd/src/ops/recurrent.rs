//! Recurrent cells and whole recurrent layers, fused (`kernels/cells.rs`): one op per step, or
//! one op per layer and sequence, instead of a dozen composite ops per step.
//!
//! As for batch normalisation, each rule runs the fused kernel in an ordinary backward and the
//! same derivative in tensor ops when a graph is being built, so that second derivatives work.

use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use crate::kernels::cells::{Cell, GruCell, LstmCell, StepGrads, StepIn, TanhCell};
use crate::tensor::{is_grad_enabled, record, with_dtype, DType, FloatElement, Tensor};

/// Panics naming `op` unless `gi` and `gh` are `[N, gates·H]` and `state` is `[N, H]`, one
/// dtype; returns `H`.
fn check_step(op: &str, gates: usize, gi: &Tensor, gh: &Tensor, state: &Tensor) -> usize {
    let s = state.shape();
    let ok = s.len() == 2
        && gi.shape() == [s[0], gates * s[1]]
        && gh.shape() == gi.shape()
        && gi.dtype() == state.dtype()
        && gh.dtype() == state.dtype();
    assert!(
        ok,
        "{op}: expected gates [N, {gates}·H] twice and a state [N, H] of one dtype, got {:?}, \
         {:?} and {:?} ({:?}, {:?}, {:?})",
        gi.shape(),
        gh.shape(),
        s,
        gi.dtype(),
        gh.dtype(),
        state.dtype()
    );
    s[1]
}

/// Gate `k` (of width `h`) of `[N, G·H]` pre-activations.
fn gate(t: &Tensor, k: usize, h: usize) -> Tensor {
    t.narrow(1, k * h, h)
}

impl Tensor {
    /// Plane `k` of a `[P, ...]` tensor: a view.
    fn plane(&self, k: usize) -> Tensor {
        self.narrow(0, k, 1).squeeze(0)
    }
}

/// A step's inputs with the one state the single-step ops take: `c` for the LSTM (which reads
/// no `h`), `h` otherwise.
fn step_in<'a, C: Cell, T>(gi: &'a [T], gh: &'a [T], state: &'a [T]) -> StepIn<'a, T> {
    let (h, c): (&[T], &[T]) = if C::HAS_C { (&[], state) } else { (state, &[]) };
    StepIn {
        len: state.len(),
        gi,
        gh,
        h,
        c,
    }
}

/// One step of cell `C` as one op: the output is `[2 + SAVED, N, H]` planes (`h'`, `c'` or
/// zeros, then what the fused rule reads); `state` is `c` for the LSTM, `h` otherwise.
fn fused_step<C: Cell, T: FloatElement>(gi: &Tensor, gh: &Tensor, state: &Tensor) -> Tensor {
    let (len, n, hid) = (state.numel(), state.shape()[0], state.shape()[1]);
    let [gi, gh, state] = [gi, gh, state].map(|t| t.contiguous_data::<T>());
    let mut out = vec![T::zero(); (2 + C::SAVED) * len];
    let (new, saved) = out.split_at_mut(2 * len);
    let (h_new, c_new) = new.split_at_mut(len);
    let x = step_in::<C, T>(&gi, &gh, &state);
    C::forward(
        x,
        hid,
        [h_new, if C::HAS_C { c_new } else { &mut [] }],
        saved,
    );
    Tensor::from_data(out, &[2 + C::SAVED, n, hid])
}

/// The fused rule of [`fused_step`]: gradients of `gi`, `gh` and the state.
fn fused_step_backward<C: Cell, T: FloatElement>(
    packed: &Tensor,
    state: &Tensor,
    up: &Tensor,
) -> [Tensor; 3] {
    let (len, shape) = (state.numel(), state.shape().to_vec());
    let [packed, state, up] = [packed, state, up].map(|t| t.contiguous_data::<T>());
    let (mut dgi, mut dgh) = (
        vec![T::zero(); C::GATES * len],
        vec![T::zero(); if C::SUMS_GATES { 0 } else { C::GATES * len }],
    );
    let (mut dh, mut dc) = (vec![T::zero(); len], vec![T::zero(); len]);
    let x = step_in::<C, T>(&[], &[], &state);
    let grads = StepGrads {
        dgi: &mut dgi,
        dgh: &mut dgh,
        dh: &mut dh,
        dc: &mut dc,
    };
    C::backward(
        x,
        shape[1],
        &packed[2 * len..],
        [&up[..len], &up[len..2 * len]],
        grads,
    );
    let gates = [shape[0], C::GATES * shape[1]];
    let dstate = if C::HAS_C { dc } else { dh };
    let dgi = Tensor::from_data(dgi, &gates);
    let dgh = if C::SUMS_GATES {
        dgi.clone()
    } else {
        Tensor::from_data(dgh, &gates)
    };
    [dgi, dgh, Tensor::from_data(dstate, &shape)]
}

/// A cell's derivative written in tensor ops on the (tracked) inputs: `(dgi, dgh, dh, dc)`
/// from the upstream `dh'`, `dc'`, where `dh` and `dc` are the gradients of the previous state
/// by every path but `gh` (`None` where there is none).
type Composite = fn(&Tensor, &Tensor, [&Tensor; 2], [&Tensor; 2]) -> [Option<Tensor>; 4];

fn tanh_composite(
    gi: &Tensor,
    gh: &Tensor,
    _: [&Tensor; 2],
    [up, _]: [&Tensor; 2],
) -> [Option<Tensor>; 4] {
    let y = (gi + gh).tanh();
    let d = up * &(1.0 - &y.square());
    [Some(d.clone()), Some(d), None, None]
}

fn lstm_composite(
    gi: &Tensor,
    gh: &Tensor,
    [_, c]: [&Tensor; 2],
    [up_h, up_c]: [&Tensor; 2],
) -> [Option<Tensor>; 4] {
    let h = c.shape()[1];
    let g = gi + gh;
    let (i, f) = (gate(&g, 0, h).sigmoid(), gate(&g, 1, h).sigmoid());
    let (cand, o) = (gate(&g, 2, h).tanh(), gate(&g, 3, h).sigmoid());
    let tc = (&(&f * c) + &(&i * &cand)).tanh();
    let dct = up_c + &(&(up_h * &o) * &(1.0 - &tc.square()));
    let dsig = |s: &Tensor| s * &(1.0 - s);
    let parts = [
        &(&dct * &cand) * &dsig(&i),
        &(&dct * c) * &dsig(&f),
        &(&dct * &i) * &(1.0 - &cand.square()),
        &(up_h * &tc) * &dsig(&o),
    ];
    let dg = Tensor::cat(&parts.iter().collect::<Vec<_>>(), 1);
    [Some(dg.clone()), Some(dg), None, Some(&dct * &f)]
}

fn gru_composite(
    gi: &Tensor,
    gh: &Tensor,
    [state, _]: [&Tensor; 2],
    [up, _]: [&Tensor; 2],
) -> [Option<Tensor>; 4] {
    let h = state.shape()[1];
    let r = (&gate(gi, 0, h) + &gate(gh, 0, h)).sigmoid();
    let z = (&gate(gi, 1, h) + &gate(gh, 1, h)).sigmoid();
    let gh_n = gate(gh, 2, h);
    let cand = (&gate(gi, 2, h) + &(&r * &gh_n)).tanh();
    let dn = &(up * &(1.0 - &z)) * &(1.0 - &cand.square());
    let dr = &(&dn * &gh_n) * &(&r * &(1.0 - &r));
    let dz = &(up * &(state - &cand)) * &(&z * &(1.0 - &z));
    let dgh_n = &dn * &r;
    let cat = |parts: [&Tensor; 3]| Tensor::cat(&parts, 1);
    [
        Some(cat([&dr, &dz, &dn])),
        Some(cat([&dr, &dz, &dgh_n])),
        Some(up * &z),
        None,
    ]
}

/// How each cell runs, by its type.
trait CellOps: Cell {
    const NAME: &'static str;
    const COMPOSITE: Composite;
}

impl CellOps for TanhCell {
    const NAME: &'static str = "rnn_tanh";
    const COMPOSITE: Composite = tanh_composite;
}

impl CellOps for LstmCell {
    const NAME: &'static str = "lstm";
    const COMPOSITE: Composite = lstm_composite;
}

impl CellOps for GruCell {
    const NAME: &'static str = "gru";
    const COMPOSITE: Composite = gru_composite;
}

/// One step of cell `C` recorded as one op; returns the packed planes.
fn step_op<C: CellOps>(name: &'static str, gi: &Tensor, gh: &Tensor, state: &Tensor) -> Tensor {
    check_step(name, C::GATES, gi, gh, state);
    let out = with_dtype!(state.dtype(), T => fused_step::<C, T>(gi, gh, state));
    record(name, out, &[gi, gh, state], move |ctx, up| {
        let [gi, gh, state] = [0, 1, 2].map(|i| ctx.input(i));
        let [dgi, dgh, dstate] = if is_grad_enabled() {
            // The state is `c` for the LSTM (which reads no `h`), `h` for the others.
            let ups = [&up.plane(0), &up.plane(1)];
            let [dgi, dgh, dh, dc] = (C::COMPOSITE)(gi, gh, [state, state], ups);
            let dstate = if C::HAS_C { dc } else { dh };
            [dgi, dgh, dstate]
                .map(|d| d.unwrap_or_else(|| Tensor::zeros(state.shape(), state.dtype())))
        } else {
            with_dtype!(state.dtype(), T => fused_step_backward::<C, T>(ctx.out(), state, up))
        };
        smallvec![
            ctx.needs(0).then_some(dgi),
            ctx.needs(1).then_some(dgh),
            ctx.needs(2).then_some(dstate)
        ]
    })
}

impl Tensor {
    /// One LSTM step after its matrix products: `gi = x·W_ihᵀ + b_ih` and `gh = h·W_hhᵀ + b_hh`
    /// (`[N, 4H]`, PyTorch's gate order i, f, g, o) and the cell state `c` (`[N, H]`) give
    /// `(h', c')` with `c' = σ(f)·c + σ(i)·tanh(g)` and `h' = σ(o)·tanh(c')`.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// let zeros = Tensor::zeros(&[1, 4], DType::F64);
    /// let c = Tensor::from_vec(vec![2.0f64], &[1, 1]);
    /// let (h, c) = Tensor::lstm_cell(&zeros, &zeros, &c);
    /// assert_eq!(c.item(), 1.0); // every gate at σ(0) = ½, the candidate at tanh(0) = 0
    /// assert_eq!(h.item(), 0.5 * 1f64.tanh());
    /// ```
    pub fn lstm_cell(gi: &Tensor, gh: &Tensor, c: &Tensor) -> (Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("lstm_cell");
        trace::op("LstmCell", attrs![], &[gi, gh, c], || {
            Tensor::lstm_cell_untraced(gi, gh, c)
        })
    }

    fn lstm_cell_untraced(gi: &Tensor, gh: &Tensor, c: &Tensor) -> (Tensor, Tensor) {
        let packed = step_op::<LstmCell>("lstm_cell", gi, gh, c);
        (packed.plane(0), packed.plane(1))
    }

    /// One GRU step after its matrix products: `gi = x·W_ihᵀ + b_ih` and `gh = h·W_hhᵀ + b_hh`
    /// (`[N, 3H]`, PyTorch's gate order r, z, n) and the state `h` (`[N, H]`) give
    /// `h' = (1 − z)·n + z·h` with `n = tanh(gi_n + r·gh_n)`.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// let zeros = Tensor::zeros(&[1, 3], DType::F64);
    /// let h = Tensor::from_vec(vec![2.0f64], &[1, 1]);
    /// assert_eq!(Tensor::gru_cell(&zeros, &zeros, &h).item(), 1.0); // z = ½, n = 0
    /// ```
    pub fn gru_cell(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("gru_cell");
        trace::op("GruCell", attrs![], &[gi, gh, h], || {
            Tensor::gru_cell_untraced(gi, gh, h)
        })
    }

    fn gru_cell_untraced(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Tensor {
        step_op::<GruCell>("gru_cell", gi, gh, h).plane(0)
    }
}

/// A recurrent layer's weights, PyTorch's layouts: `w_ih [G·H, in]`, `w_hh [G·H, H]`,
/// `b_ih [G·H]`, `b_hh [G·H]`; tensors, or a graph's nodes (`RecurrentWeights<Node>`).
pub struct RecurrentWeights<'a, T = Tensor> {
    /// Input projection, `[G·H, in]`.
    pub w_ih: &'a T,
    /// Hidden projection, `[G·H, H]`.
    pub w_hh: &'a T,
    /// Input bias, `[G·H]`.
    pub b_ih: &'a T,
    /// Hidden bias, `[G·H]`.
    pub b_hh: &'a T,
}

// Written out: a derive would ask `T: Clone` of the values behind the references.
impl<T> Clone for RecurrentWeights<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RecurrentWeights<'_, T> {}

impl<'a, T> RecurrentWeights<'a, T> {
    /// The four, in the order above.
    pub fn all(&self) -> [&'a T; 4] {
        [self.w_ih, self.w_hh, self.b_ih, self.b_hh]
    }
}

mod sequence;
