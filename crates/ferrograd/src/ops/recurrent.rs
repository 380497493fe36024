//! One step of an LSTM or GRU cell after its matrix products, fused (`kernels/cells.rs`): the
//! gate activations and the state update as one op with one rule.
//!
//! As for batch normalisation, the rule runs the fused kernel in an ordinary backward and the
//! same derivative in tensor ops when a graph is being built, so that second derivatives work.

use smallvec::smallvec;

use crate::kernels::cells as kc;
use crate::tensor::{is_grad_enabled, record, with_dtype, FloatElement, Tensor};

/// Panics naming `op` unless `gi` and `gh` are `[N, gates·H]` and `state` is `[N, H]`, one
/// dtype; returns `H`.
fn check(op: &str, gates: usize, gi: &Tensor, gh: &Tensor, state: &Tensor) -> usize {
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

fn lstm_fused<T: FloatElement>(gi: &Tensor, gh: &Tensor, c: &Tensor, h: usize) -> Tensor {
    let mut out = vec![T::zero(); kc::LSTM_PLANES * c.numel()];
    let [gi, gh, c] = [gi, gh, c].map(|t| t.contiguous_data::<T>());
    kc::lstm_forward(&gi, &gh, &c, h, &mut out);
    Tensor::from_data(out, &[kc::LSTM_PLANES, c.len() / h.max(1), h])
}

fn lstm_fused_backward<T: FloatElement>(saved: &Tensor, c: &Tensor, up: &Tensor) -> [Tensor; 2] {
    let h = c.shape()[1];
    let [saved, c, up] = [saved, c, up].map(|t| t.contiguous_data::<T>());
    let mut dgates = vec![T::zero(); 4 * c.len()];
    let mut dc = vec![T::zero(); c.len()];
    kc::lstm_backward(&saved, &c, &up, h, &mut dgates, &mut dc);
    let n = c.len() / h.max(1);
    [
        Tensor::from_data(dgates, &[n, 4 * h]),
        Tensor::from_data(dc, &[n, h]),
    ]
}

/// The LSTM step's derivative in tensor ops on the (tracked) inputs.
fn lstm_composite_backward(gi: &Tensor, gh: &Tensor, c: &Tensor, up: &Tensor) -> [Tensor; 2] {
    let h = c.shape()[1];
    let g = gi + gh;
    let (i, f) = (gate(&g, 0, h).sigmoid(), gate(&g, 1, h).sigmoid());
    let (cand, o) = (gate(&g, 2, h).tanh(), gate(&g, 3, h).sigmoid());
    let tc = (&(&f * c) + &(&i * &cand)).tanh();
    let (up_h, up_c) = (up.select_plane(0), up.select_plane(1));
    let dct = &up_c + &(&(&up_h * &o) * &(1.0 - &tc.square()));
    let dsig = |s: &Tensor| s * &(1.0 - s);
    let parts = [
        &(&dct * &cand) * &dsig(&i),
        &(&dct * c) * &dsig(&f),
        &(&dct * &i) * &(1.0 - &cand.square()),
        &(&up_h * &tc) * &dsig(&o),
    ];
    [Tensor::cat(&parts.iter().collect::<Vec<_>>(), 1), &dct * &f]
}

fn gru_fused<T: FloatElement>(gi: &Tensor, gh: &Tensor, state: &Tensor, h: usize) -> Tensor {
    let mut out = vec![T::zero(); kc::GRU_PLANES * state.numel()];
    let [gi, gh, s] = [gi, gh, state].map(|t| t.contiguous_data::<T>());
    kc::gru_forward(&gi, &gh, &s, h, &mut out);
    Tensor::from_data(out, &[kc::GRU_PLANES, s.len() / h.max(1), h])
}

fn gru_fused_backward<T: FloatElement>(ins: [&Tensor; 3], up: &Tensor) -> [Tensor; 3] {
    let h = ins[2].shape()[1];
    let [saved, gh, s] = ins.map(|t| t.contiguous_data::<T>());
    let (mut dgi, mut dgh) = (vec![T::zero(); gh.len()], vec![T::zero(); gh.len()]);
    let mut ds = vec![T::zero(); s.len()];
    let up = up.select_plane(0).contiguous_data::<T>().into_owned();
    kc::gru_backward([&saved, &gh, &s], &up, h, [&mut dgi, &mut dgh, &mut ds]);
    let n = s.len() / h.max(1);
    [
        Tensor::from_data(dgi, &[n, 3 * h]),
        Tensor::from_data(dgh, &[n, 3 * h]),
        Tensor::from_data(ds, &[n, h]),
    ]
}

/// The GRU step's derivative in tensor ops on the (tracked) inputs.
fn gru_composite_backward(gi: &Tensor, gh: &Tensor, state: &Tensor, up: &Tensor) -> [Tensor; 3] {
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
    [cat([&dr, &dz, &dn]), cat([&dr, &dz, &dgh_n]), up * &z]
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
        let h = check("lstm_cell", 4, gi, gh, c);
        let out = with_dtype!(c.dtype(), T => lstm_fused::<T>(gi, gh, c, h));
        let packed = record("lstm_cell", out, &[gi, gh, c], move |ctx, up| {
            let [gi, gh, c] = [0, 1, 2].map(|i| ctx.input(i));
            let [dg, dc] = if is_grad_enabled() {
                lstm_composite_backward(gi, gh, c, up)
            } else {
                with_dtype!(c.dtype(), T => lstm_fused_backward::<T>(ctx.out(), c, up))
            };
            let dg_h = ctx.needs(1).then(|| dg.clone());
            smallvec![ctx.needs(0).then_some(dg), dg_h, ctx.needs(2).then_some(dc)]
        });
        (packed.select_plane(0), packed.select_plane(1))
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
        let hid = check("gru_cell", 3, gi, gh, h);
        let out = with_dtype!(h.dtype(), T => gru_fused::<T>(gi, gh, h, hid));
        let packed = record("gru_cell", out, &[gi, gh, h], move |ctx, up| {
            let [gi, gh, h] = [0, 1, 2].map(|i| ctx.input(i));
            let [dgi, dgh, dh] = if is_grad_enabled() {
                gru_composite_backward(gi, gh, h, &up.select_plane(0))
            } else {
                with_dtype!(h.dtype(), T => gru_fused_backward::<T>([ctx.out(), gh, h], up))
            };
            smallvec![
                ctx.needs(0).then_some(dgi),
                ctx.needs(1).then_some(dgh),
                ctx.needs(2).then_some(dh)
            ]
        });
        packed.select_plane(0)
    }
}

impl Tensor {
    /// Plane `k` of a `[P, N, H]` tensor: a view.
    fn select_plane(&self, k: usize) -> Tensor {
        self.narrow(0, k, 1).squeeze(0)
    }
}
