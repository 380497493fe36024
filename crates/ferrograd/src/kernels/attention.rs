//! Fused scaled dot-product attention: `softmax(q kᵀ · scale + mask) v` for many heads at
//! once. The forward uses an online softmax over blocks of keys: a thread holds one block of
//! scores for the query row it computes, never the row's whole `S` scores nor the `[L, S]`
//! matrix; the running maximum and sum rescale what is accumulated so far when a block raises
//! the maximum. The backward recomputes one row of probabilities at a time instead of storing
//! them.

use rayon::prelude::*;

use ferrograd_derive::isa_dispatch;

use super::gemv::{axpy_inline as axpy, dot_inline as dot};
use super::Float;

/// Keys scored per block: the scores one thread holds at a time.
const KEY_BLOCK: usize = 64;

/// One attention problem: `heads` independent heads, each with `l` queries and `s` keys of
/// width `e`, and values of width `ev`.
#[derive(Clone, Copy, Debug)]
pub struct AttentionDims {
    pub heads: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
}

/// The inputs of one forward pass, contiguous: `q` `[heads, l, e]`, `k` `[heads, s, e]`, `v`
/// `[heads, s, ev]`, an additive `mask` `[heads, l, s]` if any.
pub struct AttentionInputs<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub mask: Option<&'a [T]>,
}

/// Writes `out` `[heads, l, ev]`. With `causal`, query `i` sees keys `0..=i` (PyTorch's
/// top-left `is_causal`). A row whose every score is −∞ gets NaN, as the softmax of its
/// definition does; with no keys at all (`s` = 0) the output is 0.
pub fn attention_forward<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    scale: T,
    causal: bool,
    out: &mut [T],
) {
    assert_eq!(x.q.len(), d.heads * d.l * d.e, "attention: q size");
    assert_eq!(x.k.len(), d.heads * d.s * d.e, "attention: k size");
    assert_eq!(x.v.len(), d.heads * d.s * d.ev, "attention: v size");
    assert_eq!(out.len(), d.heads * d.l * d.ev, "attention: output size");
    if let Some(m) = x.mask {
        assert_eq!(m.len(), d.heads * d.l * d.s, "attention: mask size");
    }
    if d.ev == 0 {
        return;
    }
    out.par_chunks_mut(d.ev).enumerate().for_each_init(
        || vec![T::zero(); KEY_BLOCK],
        |scores, (row, o)| attend_row(x, d, scale, causal, row, scores, o),
    );
}

/// One query row: `row` counts rows over all heads.
#[isa_dispatch]
fn attend_row<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    scale: T,
    causal: bool,
    row: usize,
    scores: &mut [T],
    out: &mut [T],
) {
    let (head, i) = (row / d.l, row % d.l);
    let q = &x.q[row * d.e..][..d.e];
    let keys = &x.k[head * d.s * d.e..][..d.s * d.e];
    let values = &x.v[head * d.s * d.ev..][..d.s * d.ev];
    let mask = x.mask.map(|m| &m[row * d.s..][..d.s]);
    let end = if causal { d.s.min(i + 1) } else { d.s };
    out.iter_mut().for_each(|o| *o = T::zero());
    let (mut max, mut sum) = (T::neg_infinity(), T::zero());
    for j0 in (0..end).step_by(KEY_BLOCK) {
        let block = &mut scores[..KEY_BLOCK.min(end - j0)];
        let mut block_max = T::neg_infinity();
        for (jj, sc) in block.iter_mut().enumerate() {
            let j = j0 + jj;
            let mut v = dot(q, &keys[j * d.e..][..d.e]) * scale;
            if let Some(m) = mask {
                v += m[j];
            }
            *sc = v;
            block_max = block_max.max(v);
        }
        if block_max == T::neg_infinity() {
            continue; // every key of the block masked out: it adds nothing
        }
        let new_max = max.max(block_max);
        if new_max > max {
            // Rescales what the earlier blocks accumulated to the new maximum (0 at first).
            let shrink = (max - new_max).exp();
            sum = sum * shrink;
            out.iter_mut().for_each(|o| *o = *o * shrink);
            max = new_max;
        }
        for (jj, &sc) in block.iter().enumerate() {
            let p = (sc - max).exp();
            sum += p;
            axpy(out, p, &values[(j0 + jj) * d.ev..][..d.ev]);
        }
    }
    if end == 0 {
        return; // no key at all: the empty sum is 0, as `[L, 0] @ [0, Ev]` is
    }
    let inv = T::one() / sum;
    out.iter_mut().for_each(|o| *o = *o * inv);
}

/// Where [`attention_backward`] writes, zeroed by the caller: `dq` `[heads, l, e]`, `dk`
/// `[heads, s, e]`, `dv` `[heads, s, ev]`, and `dmask` `[heads, l, s]` when the mask's
/// gradient is wanted.
pub struct AttentionGrads<'a, T> {
    pub dq: &'a mut [T],
    pub dk: &'a mut [T],
    pub dv: &'a mut [T],
    pub dmask: Option<&'a mut [T]>,
}

/// The gradients of [`attention_forward`]'s inputs for the output gradient `up` `[heads, l,
/// ev]`. With `P = softmax(S)` recomputed row by row: `dv = Pᵀ up`, `dP = up vᵀ`,
/// `dS = P ⊙ (dP − rowsum(dP ⊙ P))`, `dq = dS k · scale`, `dk = dSᵀ q · scale`, `dmask = dS`.
/// Heads run in parallel; each is one thread's, so no two threads write the same gradient.
pub fn attention_backward<T: Float>(
    x: &AttentionInputs<'_, T>,
    up: &[T],
    d: AttentionDims,
    scale: T,
    causal: bool,
    g: AttentionGrads<'_, T>,
) {
    assert!(
        d.l * d.s * d.e * d.ev > 0,
        "attention backward: empty axes take the general path"
    );
    assert_eq!(up.len(), d.heads * d.l * d.ev, "attention: gradient size");
    assert_eq!(g.dq.len(), x.q.len(), "attention: dq size");
    assert_eq!(g.dk.len(), x.k.len(), "attention: dk size");
    assert_eq!(g.dv.len(), x.v.len(), "attention: dv size");
    let dmask: Vec<Option<&mut [T]>> = match g.dmask {
        Some(m) => {
            assert_eq!(m.len(), d.heads * d.l * d.s, "attention: dmask size");
            m.chunks_mut(d.l * d.s).map(Some).collect()
        }
        None => (0..d.heads).map(|_| None).collect(),
    };
    g.dq.par_chunks_mut(d.l * d.e)
        .zip(g.dk.par_chunks_mut(d.s * d.e))
        .zip(g.dv.par_chunks_mut(d.s * d.ev))
        .zip(dmask)
        .enumerate()
        .for_each(|(head, (((dq, dk), dv), dm))| {
            let grads = AttentionGrads {
                dq,
                dk,
                dv,
                dmask: dm,
            };
            backward_head(x, up, d, scale, causal, head, grads);
        });
}

/// One head of [`attention_backward`]: one query row at a time.
#[isa_dispatch]
fn backward_head<T: Float>(
    x: &AttentionInputs<'_, T>,
    up: &[T],
    d: AttentionDims,
    scale: T,
    causal: bool,
    head: usize,
    mut g: AttentionGrads<'_, T>,
) {
    let keys = &x.k[head * d.s * d.e..][..d.s * d.e];
    let values = &x.v[head * d.s * d.ev..][..d.s * d.ev];
    let (mut p, mut dp) = (vec![T::zero(); d.s], vec![T::zero(); d.s]);
    for i in 0..d.l {
        let row = head * d.l + i;
        let q = &x.q[row * d.e..][..d.e];
        let u = &up[row * d.ev..][..d.ev];
        let mask = x.mask.map(|m| &m[row * d.s..][..d.s]);
        let end = if causal { d.s.min(i + 1) } else { d.s };
        let mut max = T::neg_infinity();
        for j in 0..end {
            let mut v = dot(q, &keys[j * d.e..][..d.e]) * scale;
            if let Some(m) = mask {
                v += m[j];
            }
            p[j] = v;
            max = max.max(v);
        }
        // A row that sees no key is NaN throughout, as its forward value.
        let mut sum = T::zero();
        for pj in &mut p[..end] {
            *pj = (*pj - max).exp();
            sum += *pj;
        }
        let inv = T::one() / sum;
        let mut weighted = T::zero(); // rowsum(dP ⊙ P)
        for j in 0..end {
            p[j] = p[j] * inv;
            dp[j] = dot(u, &values[j * d.ev..][..d.ev]);
            weighted += p[j] * dp[j];
        }
        let dq = &mut g.dq[i * d.e..][..d.e];
        for j in 0..end {
            let ds = p[j] * (dp[j] - weighted);
            axpy(&mut g.dv[j * d.ev..][..d.ev], p[j], u);
            axpy(dq, ds * scale, &keys[j * d.e..][..d.e]);
            axpy(&mut g.dk[j * d.e..][..d.e], ds * scale, q);
            if let Some(dm) = g.dmask.as_deref_mut() {
                dm[i * d.s + j] = ds;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written out: scores, a softmax per row, a weighted sum of values.
    fn direct(
        x: &AttentionInputs<'_, f64>,
        d: AttentionDims,
        scale: f64,
        causal: bool,
    ) -> Vec<f64> {
        let mut out = vec![0.0; d.heads * d.l * d.ev];
        for h in 0..d.heads {
            for i in 0..d.l {
                let s: Vec<f64> = (0..d.s)
                    .map(|j| {
                        let qk: f64 = (0..d.e)
                            .map(|c| x.q[(h * d.l + i) * d.e + c] * x.k[(h * d.s + j) * d.e + c])
                            .sum();
                        let m = x.mask.map_or(0.0, |m| m[(h * d.l + i) * d.s + j]);
                        if causal && j > i {
                            f64::NEG_INFINITY
                        } else {
                            qk * scale + m
                        }
                    })
                    .collect();
                let top = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|v| (v - top).exp()).collect();
                let total: f64 = p.iter().sum();
                for c in 0..d.ev {
                    out[(h * d.l + i) * d.ev + c] = (0..d.s)
                        .map(|j| p[j] / total * x.v[(h * d.s + j) * d.ev + c])
                        .sum();
                }
            }
        }
        out
    }

    #[test]
    fn blocks_of_keys_give_the_softmax_of_the_whole_row() {
        // More keys than a block, a mask with −∞ entries, scores far apart.
        let d = AttentionDims {
            heads: 2,
            l: 5,
            s: 150,
            e: 3,
            ev: 4,
        };
        let f = |n: usize, a: f64| {
            (0..n)
                .map(|i| (a * i as f64).sin() * 3.0)
                .collect::<Vec<_>>()
        };
        let (q, k, v) = (f(30, 0.7), f(900, 0.3), f(1200, 0.11));
        let mut mask = f(1500, 0.05);
        mask[7] = f64::NEG_INFINITY;
        mask[200] = f64::NEG_INFINITY;
        for causal in [false, true] {
            for m in [None, Some(&mask[..])] {
                let x = AttentionInputs {
                    q: &q,
                    k: &k,
                    v: &v,
                    mask: m,
                };
                let mut out = vec![0.0; 40];
                attention_forward(&x, d, 0.4, causal, &mut out);
                for (a, b) in out.iter().zip(direct(&x, d, 0.4, causal)) {
                    assert!((a - b).abs() < 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
    }
}
