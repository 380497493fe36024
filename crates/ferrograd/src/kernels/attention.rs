//! Fused scaled dot-product attention, forward: `softmax(q kᵀ · scale + mask) v` for many
//! heads at once, with an online softmax over blocks of keys. A thread holds one block of
//! scores for the query row it computes, never the row's whole `S` scores nor the `[L, S]`
//! matrix: the running maximum and sum rescale what is accumulated so far when a block
//! raises the maximum.

use rayon::prelude::*;

use super::gemv::{axpy, dot};
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
