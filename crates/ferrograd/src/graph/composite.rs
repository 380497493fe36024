//! Reference forms of the fused ops, written with ops that have tangent rules of their own:
//! the tangent rules of attention, the norms and the recurrent ops push tangents through
//! these (`tangent::via_composite`). Each computes what its fused op computes, to rounding.

use crate::ops::norm::standardized;
use crate::tensor::Tensor;

/// `softmax(q kᵀ · scale + mask) v`, with row `i` seeing columns `≤ i` when `causal`:
/// `a` is `[q, k, v]` and the additive mask, when there is one.
pub(super) fn attention(a: &[Tensor], causal: bool, scale: Option<f64>) -> Tensor {
    let (q, k, v) = (&a[0], &a[1], &a[2]);
    let rank = q.ndim();
    let (l, s) = (q.shape()[rank - 2], k.shape()[k.ndim() - 2]);
    let scale = scale.unwrap_or(1.0 / (q.shape()[rank - 1] as f64).sqrt());
    let mut scores = q.matmul(&k.transpose(k.ndim() - 2, k.ndim() - 1)) * scale;
    if let Some(mask) = a.get(3) {
        scores = &scores + mask;
    }
    if causal {
        let above = Tensor::ones(&[l, s], q.dtype()).triu(1);
        scores = scores.masked_fill(&above, f64::NEG_INFINITY);
    }
    // A row with every score −∞ attends to nothing: zeros, as the fused op gives (a softmax
    // alone would give 0/0).
    let dead = scores
        .detach()
        .max_axes(&[rank - 1], true)
        .eq_scalar(f64::NEG_INFINITY);
    scores.softmax(rank - 1).masked_fill(&dead, 0.0).matmul(v)
}

/// Layer normalisation over the last axis: `a` is `[x, weight, bias]`.
pub(super) fn layer_norm(a: &[Tensor], eps: f64) -> Tensor {
    let (xhat, _) = standardized(&a[0], &[a[0].ndim() - 1], eps);
    &(&xhat * &a[1]) + &a[2]
}

/// Batch normalisation with the batch's statistics over every axis but 1: `a` is
/// `[x, weight, bias]`.
pub(super) fn batch_norm(a: &[Tensor], eps: f64) -> Tensor {
    let x = &a[0];
    let axes: Vec<usize> = (0..x.ndim()).filter(|&i| i != 1).collect();
    let mut channel = vec![1; x.ndim()];
    channel[1] = x.shape()[1];
    let (xhat, _) = standardized(x, &axes, eps);
    &(&xhat * &a[1].reshape(&channel)) + &a[2].reshape(&channel)
}

/// Gate `k` of `g` (`[N, G·h]`).
fn gate(g: &Tensor, k: usize, h: usize) -> Tensor {
    g.narrow(1, k * h, h)
}

/// One LSTM step from `[gi, gh, c]`: `(h', c')`.
pub(super) fn lstm_cell(a: &[Tensor]) -> (Tensor, Tensor) {
    let h = a[2].shape()[1];
    let g = &a[0] + &a[1];
    let (i, f) = (gate(&g, 0, h).sigmoid(), gate(&g, 1, h).sigmoid());
    let (cand, o) = (gate(&g, 2, h).tanh(), gate(&g, 3, h).sigmoid());
    let c = &(&f * &a[2]) + &(&i * &cand);
    (&o * &c.tanh(), c)
}

/// One GRU step from `[gi, gh, h]`.
pub(super) fn gru_cell(a: &[Tensor]) -> Tensor {
    let (gi, gh, state) = (&a[0], &a[1], &a[2]);
    let h = state.shape()[1];
    let r = (&gate(gi, 0, h) + &gate(gh, 0, h)).sigmoid();
    let z = (&gate(gi, 1, h) + &gate(gh, 1, h)).sigmoid();
    let n = (&gate(gi, 2, h) + &(&r * &gate(gh, 2, h))).tanh();
    &(&(1.0 - &z) * &n) + &(&z * state)
}

/// Which recurrent layer a sequence runs.
#[derive(Clone, Copy)]
pub(super) enum Recurrence {
    Lstm,
    Gru,
    Tanh,
}

/// A recurrent layer over the batch-first sequence `a[0]` (`[N, T, in]`) step by step, with
/// the cells as ops: `a` is the sequence, the states (`h0`, and `c0` for the LSTM), then
/// `w_ih, w_hh, b_ih, b_hh`. The outputs `[N, T, H]`, then the last states.
pub(super) fn sequence(a: &[Tensor], cell: Recurrence) -> Vec<Tensor> {
    let states = match cell {
        Recurrence::Lstm => 2,
        _ => 1,
    };
    let (x, w) = (&a[0], &a[1 + states..]);
    let (mut h, mut c) = (a[1].clone(), a.get(2).cloned());
    let mut outs = Vec::with_capacity(x.shape()[1]);
    for step in 0..x.shape()[1] {
        let gi = x.narrow(1, step, 1).squeeze(1).linear(&w[0], Some(&w[2]));
        let gh = h.linear(&w[1], Some(&w[3]));
        h = match (cell, &c) {
            (Recurrence::Lstm, Some(state)) => {
                let (h2, c2) = Tensor::lstm_cell(&gi, &gh, state);
                c = Some(c2);
                h2
            }
            (Recurrence::Gru, _) => Tensor::gru_cell(&gi, &gh, &h),
            _ => (&gi + &gh).tanh(),
        };
        outs.push(h.clone());
    }
    let all = match outs.is_empty() {
        true => Tensor::zeros(&[x.shape()[0], 0, h.shape()[1]], x.dtype()),
        false => Tensor::stack(&outs.iter().collect::<Vec<_>>(), 1),
    };
    let mut result = vec![all, h];
    result.extend(c);
    result
}
