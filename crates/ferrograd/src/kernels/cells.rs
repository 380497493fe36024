//! The element-wise part of one recurrent step, fused: the gate activations and the state
//! update of an LSTM or GRU cell in one pass over `[N, G·H]` gate pre-activations, where the
//! composite ops take a dozen passes and buffers per time step. The input projections
//! (`gi = x·W_ihᵀ + b_ih`, `gh = h·W_hhᵀ + b_hh`) stay matrix products.

use super::Float;

fn sigmoid<T: Float>(v: T) -> T {
    if v >= T::zero() {
        T::one() / (T::one() + (-v).exp())
    } else {
        let e = v.exp();
        e / (T::one() + e)
    }
}

/// The activated LSTM gates `[i, f, g, o]` at row offset `at` (gates `h` apart).
fn lstm_gates<T: Float>(gi: &[T], gh: &[T], at: usize, h: usize) -> [T; 4] {
    let pre = |k: usize| gi[at + k * h] + gh[at + k * h];
    [
        sigmoid(pre(0)),
        sigmoid(pre(1)),
        pre(2).tanh_fast(),
        sigmoid(pre(3)),
    ]
}

/// Rows of `[N, G·H]` gates and `[N, H]` states: (row offset in the gates, in the state).
fn cells(n: usize, h: usize, gates: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |r| (0..h).map(move |j| (r * gates * h + j, r * h + j)))
}

/// How many `[N, H]` planes `lstm_forward` writes: `h'`, `c'`, then what the derivative reads
/// (the activated gates i, f, g, o and tanh c').
pub const LSTM_PLANES: usize = 7;

/// LSTM step (PyTorch's gate order i, f, g, o): `c' = f·c + i·g`, `h' = o·tanh(c')`, written to
/// `out` as `LSTM_PLANES` planes of `[N, H]`.
pub fn lstm_forward<T: Float>(gi: &[T], gh: &[T], c: &[T], h: usize, out: &mut [T]) {
    let len = c.len();
    let mut planes = out.chunks_mut(len.max(1));
    let mut plane = || planes.next().unwrap_or_default();
    let [out_h, out_c, act_i, act_f, act_g, act_o, tanh_c] = std::array::from_fn(|_| plane());
    for (g, s) in cells(len / h.max(1), h, 4) {
        let [i, f, cand, o] = lstm_gates(gi, gh, g, h);
        let c_new = f * c[s] + i * cand;
        let tc = c_new.tanh_fast();
        (out_h[s], out_c[s], tanh_c[s]) = (o * tc, c_new, tc);
        (act_i[s], act_f[s], act_g[s], act_o[s]) = (i, f, cand, o);
    }
}

/// The LSTM step's derivative from the upstream `[dh' | dc']` and the planes `lstm_forward`
/// wrote: the gradient of the gate pre-activations (`[N, 4H]`, the same for `gi` and `gh`)
/// and of the previous cell state.
pub fn lstm_backward<T: Float>(
    saved: &[T],
    c: &[T],
    up: &[T],
    h: usize,
    dgates: &mut [T],
    dc: &mut [T],
) {
    let len = c.len();
    let plane = |k: usize| &saved[k * len..][..len];
    let [i, f, cand, o, tc] = [2, 3, 4, 5, 6].map(plane);
    let (up_h, up_c) = (&up[..len], &up[len..][..len]);
    let one = T::one();
    for (g, s) in cells(len / h.max(1), h, 4) {
        let dct = up_c[s] + up_h[s] * o[s] * (one - tc[s] * tc[s]);
        dgates[g] = dct * cand[s] * i[s] * (one - i[s]);
        dgates[g + h] = dct * c[s] * f[s] * (one - f[s]);
        dgates[g + 2 * h] = dct * i[s] * (one - cand[s] * cand[s]);
        dgates[g + 3 * h] = up_h[s] * tc[s] * o[s] * (one - o[s]);
        dc[s] = dct * f[s];
    }
}

/// The GRU's gates `[r, z, n]` at row offset `at`.
fn gru_gates<T: Float>(gi: &[T], gh: &[T], at: usize, h: usize) -> [T; 3] {
    let r = sigmoid(gi[at] + gh[at]);
    let z = sigmoid(gi[at + h] + gh[at + h]);
    [r, z, (gi[at + 2 * h] + r * gh[at + 2 * h]).tanh_fast()]
}

/// How many `[N, H]` planes `gru_forward` writes: `h'`, then the activated gates r, z, n that
/// the derivative reads.
pub const GRU_PLANES: usize = 4;

/// GRU step (PyTorch's gates r, z, n): `n = tanh(gi_n + r·gh_n)`, `h' = n + z·(h − n)`, written
/// to `out` as `GRU_PLANES` planes of `[N, H]`.
pub fn gru_forward<T: Float>(gi: &[T], gh: &[T], state: &[T], h: usize, out: &mut [T]) {
    let len = state.len();
    let mut planes = out.chunks_mut(len.max(1));
    let mut plane = || planes.next().unwrap_or_default();
    let [out_h, act_r, act_z, act_n] = std::array::from_fn(|_| plane());
    for (g, s) in cells(len / h.max(1), h, 3) {
        let [r, z, cand] = gru_gates(gi, gh, g, h);
        out_h[s] = cand + z * (state[s] - cand);
        (act_r[s], act_z[s], act_n[s]) = (r, z, cand);
    }
}

/// The GRU step's derivative from the upstream `dh'`, the planes `gru_forward` wrote and the
/// hidden projection `gh`: gradients of `gi` and `gh` (`[N, 3H]` each; they differ in the
/// candidate's part) and of the previous state.
pub fn gru_backward<T: Float>(
    [saved, gh, state]: [&[T]; 3],
    up: &[T],
    h: usize,
    [dgi, dgh, dstate]: [&mut [T]; 3],
) {
    let len = state.len();
    let plane = |k: usize| &saved[k * len..][..len];
    let [r, z, cand] = [1, 2, 3].map(plane);
    let one = T::one();
    for (g, s) in cells(len / h.max(1), h, 3) {
        let dn = up[s] * (one - z[s]) * (one - cand[s] * cand[s]);
        let dr = dn * gh[g + 2 * h] * r[s] * (one - r[s]);
        let dz = up[s] * (state[s] - cand[s]) * z[s] * (one - z[s]);
        (dgi[g], dgi[g + h], dgi[g + 2 * h]) = (dr, dz, dn);
        (dgh[g], dgh[g + h], dgh[g + 2 * h]) = (dr, dz, dn * r[s]);
        dstate[s] = up[s] * z[s];
    }
}
