//! Fused optimizer updates: one pass over a parameter, its gradient and its state slots,
//! in place, threaded for large parameters. Each optimizer supplies the per-element rule.

use rayon::prelude::*;

use super::{Float, PAR_CHUNK, PAR_THRESHOLD};

/// For every element: `(w, slots) = rule(w, g, slots)`, where `slots` holds the element's
/// optimizer state (momentum, second moment, ...), `K` values per element.
pub fn update<T: Float, const K: usize>(
    w: &mut [T],
    g: &[T],
    slots: [&mut [T]; K],
    rule: impl Fn(T, T, [T; K]) -> (T, [T; K]) + Sync,
) {
    assert!(
        g.len() == w.len() && slots.iter().all(|s| s.len() == w.len()),
        "optimizer update: parameter, gradient and state lengths differ"
    );
    let run = |(w, g, mut s): (&mut [T], &[T], [&mut [T]; K])| {
        for i in 0..w.len() {
            let state = std::array::from_fn(|k| s[k][i]);
            let (nw, ns) = rule(w[i], g[i], state);
            w[i] = nw;
            for (slot, v) in s.iter_mut().zip(ns) {
                slot[i] = v;
            }
        }
    };
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
    tasks.into_par_iter().for_each(run);
}

/// Σ g² over a gradient (for clipping by global norm), accumulated in f64.
pub fn sum_squares<T: Float>(g: &[T]) -> f64 {
    if g.len() >= PAR_THRESHOLD {
        g.par_chunks(PAR_CHUNK)
            .map(|c| c.iter().map(|v| v.as_f64() * v.as_f64()).sum::<f64>())
            .sum()
    } else {
        g.iter().map(|v| v.as_f64() * v.as_f64()).sum()
    }
}
