//! Fused optimizer updates: one pass over a parameter, its gradient and its state slots,
//! in place, threaded for large parameters. Each optimizer supplies the per-element rule.

use super::parallel::run_tasks;
use super::reduce::lanes;
use ferrograd_derive::isa_dispatch;

use super::{Float, PAR_CHUNK, PAR_THRESHOLD};

/// What every optimizer does to the gradient and the weight before its own rule, fused into
/// the same pass: scale (clipping by global norm), clamp (clipping by value), L2 decay
/// (g + l2·w), and decoupled decay (w·keep).
#[derive(Clone, Copy, Debug)]
pub struct Prep<T> {
    /// Factor on the gradient (1 without clipping by global norm).
    pub scale: T,
    /// Bound on each gradient element's magnitude, applied after `scale`; `None` for no
    /// clipping by value.
    pub clamp: Option<T>,
    /// L2 penalty: `l2 · w` is added to the gradient (0 for none).
    pub l2: T,
    /// Factor on the weight before the rule, for decoupled weight decay (1 for none).
    pub keep: T,
    /// Whether the rule squares the gradient (Adam, RMSProp, Adagrad, ...): then gradient
    /// elements whose square would be subnormal count as zero.
    pub squares: bool,
}

impl<T: Float> Prep<T> {
    #[inline(always)]
    fn apply(&self, w: T, g: T) -> (T, T) {
        let g = g * self.scale;
        let g = self.clamp.map_or(g, |c| g.max(-c).min(c));
        (w * self.keep, g + self.l2 * w)
    }
}

/// For every element: `(w, slots) = rule(w, g, slots)` after `prep`, where `slots` holds the
/// element's optimizer state (momentum, second moment, ...), `K` values per element.
pub fn update<T: Float, const K: usize>(
    w: &mut [T],
    g: &[T],
    prep: Prep<T>,
    slots: [&mut [T]; K],
    rule: impl Fn(T, T, [T; K]) -> (T, [T; K]) + Sync,
) {
    assert!(
        g.len() == w.len() && slots.iter().all(|s| s.len() == w.len()),
        "optimizer update: parameter, gradient and state lengths differ"
    );
    let run = |(w, g, s): (&mut [T], &[T], [&mut [T]; K])| update_chunk(w, g, prep, s, &rule);
    if w.len() < PAR_THRESHOLD {
        run((w, g, slots));
        return;
    }
    // Cut every buffer at the same chunk boundaries, then run the chunks in parallel.
    let mut slot_chunks = slots.map(|s| s.chunks_mut(PAR_CHUNK));
    let tasks: Vec<_> = w
        .chunks_mut(PAR_CHUNK)
        .zip(g.chunks(PAR_CHUNK))
        .map(|(wc, gc)| {
            (
                wc,
                gc,
                std::array::from_fn(|k| slot_chunks[k].next().expect("same length")),
            )
        })
        .collect();
    run_tasks(tasks, run);
}

/// One chunk of `update`. A function of its own so that the slices arrive as distinct
/// (non-aliasing) arguments: the rule's constants then stay in registers and the loop
/// vectorises, compiled for each instruction set and chosen at run time.
#[isa_dispatch]
fn update_chunk<T: Float, const K: usize>(
    w: &mut [T],
    g: &[T],
    prep: Prep<T>,
    s: [&mut [T]; K],
    rule: &(impl Fn(T, T, [T; K]) -> (T, [T; K]) + Sync),
) {
    // Subnormal arithmetic is many times slower on x86, and optimizer state drifts there: a
    // moment that decays geometrically (Adam's m for a weight whose gradient stays zero), or
    // the scaled square of a tiny gradient. Both are cut off in software, on every
    // architecture (the CPU's flush-to-zero mode is not ours to change under compiled Rust):
    // stored state below the smallest normal becomes zero, and for rules that square the
    // gradient so does a gradient element whose square, times a decay factor down to 2^-16,
    // would be subnormal. Those rules divide by √v + ε, so such an element would have moved
    // its weight by less than lr · 3e-7 (f32; far less in f64).
    let tiny = T::min_positive_value();
    let negligible = if prep.squares {
        tiny.sqrt() * T::from_f64(256.0)
    } else {
        T::zero()
    };
    // Every slice cut to one length, so the indexing below needs no bounds checks.
    let n = w.len();
    let g = &g[..n];
    let s = s.map(|x| &mut x[..n]);
    for i in 0..n {
        let state = std::array::from_fn(|k| s[k][i]);
        let (wi, gi) = prep.apply(w[i], g[i]);
        let gi = if gi.abs() < negligible { T::zero() } else { gi };
        let (nw, ns) = rule(wi, gi, state);
        w[i] = nw;
        for k in 0..K {
            s[k][i] = if ns[k].abs() < tiny { T::zero() } else { ns[k] };
        }
    }
}

/// Σ g² over a gradient (for clipping by global norm), accumulated in f64.
pub fn sum_squares<T: Float>(g: &[T]) -> f64 {
    if g.len() >= PAR_THRESHOLD {
        // The chunks' sums added in chunk order: a parallel `sum` would combine them in an
        // order that depends on the scheduling, and the norm must be the same bits every run.
        let parts: Vec<f64> = run_tasks(g.chunks(PAR_CHUNK).collect(), sum_squares_serial);
        parts.iter().sum()
    } else {
        sum_squares_serial(g)
    }
}

/// [`sum_squares`] on one thread, in [`LANES`] running sums: a single sum is one chain of
/// dependent additions, each waiting for the last, where independent sums fill the vector
/// lanes. The order is fixed, so the result is the same bits every run.
#[isa_dispatch]
fn sum_squares_serial<T: Float>(g: &[T]) -> f64 {
    let square = |s: f64, v: T| s + v.as_f64() * v.as_f64();
    let (sums, rest) = lanes::<T, f64, LANES>(g, 0.0, square);
    let tail: f64 = rest.iter().map(|v| v.as_f64() * v.as_f64()).sum();
    sums.iter().sum::<f64>() + tail
}

/// Running sums of [`sum_squares_serial`]: two AVX-512 vectors of f64.
const LANES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_squares_is_the_plain_sum_at_every_length() {
        // Lengths around the lanes and the threading threshold; integers, so every order of
        // summation gives the same exact value.
        for len in [0, 1, 15, 16, 17, 33, PAR_THRESHOLD - 1, PAR_THRESHOLD + 5] {
            let g: Vec<f32> = (0..len).map(|i| (i % 7) as f32 - 3.0).collect();
            let want: f64 = g.iter().map(|&v| f64::from(v * v)).sum();
            assert_eq!(sum_squares(&g), want, "length {len}");
            let g64: Vec<f64> = g.iter().map(|&v| f64::from(v)).collect();
            assert_eq!(sum_squares(&g64), want, "f64, length {len}");
        }
        // Every run the same bits, whatever the threads did.
        let g: Vec<f32> = (0..PAR_THRESHOLD * 3)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        assert_eq!(sum_squares(&g).to_bits(), sum_squares(&g).to_bits());
    }
}
