//! Gathers and scatters by index: rows of an `[outer, mid, inner]` buffer ([`Rows`]) selected along the
//! middle axis and added back, blocks joined along an axis, and the per-plane gather and
//! scatter of max pooling. Every index is bounds-checked by slice indexing.

use super::parallel::for_each_chunk;
use super::{Float, Rows};

/// Rows `indices` (in order, repeats allowed) of `x`, seen as `[outer, mid, inner]`:
/// an `[outer, indices.len(), inner]` buffer.
pub(crate) fn select<T: Copy>(x: &[T], rows: Rows, indices: &[usize]) -> Vec<T> {
    let Rows {
        outer,
        mid: d,
        inner,
    } = rows;
    let mut out = Vec::with_capacity(outer * indices.len() * inner);
    for o in 0..outer {
        for &i in indices {
            out.extend_from_slice(&x[(o * d + i) * inner..][..inner]);
        }
    }
    out
}

/// Adds `src` (`[outer, indices.len(), inner]`) into `out` (`[outer, mid, inner]`) at rows
/// `indices`; repeated indices add up.
pub(crate) fn add_at<T: Float>(out: &mut [T], src: &[T], rows: Rows, indices: &[usize]) {
    let Rows {
        outer,
        mid: d,
        inner,
    } = rows;
    for o in 0..outer {
        for (j, &i) in indices.iter().enumerate() {
            let s = &src[(o * indices.len() + j) * inner..][..inner];
            for (v, &a) in out[(o * d + i) * inner..][..inner].iter_mut().zip(s) {
                *v += a;
            }
        }
    }
}

/// `parts`, each `[outer, runs[i]]`, joined into `[outer, Σ runs]`.
pub(crate) fn concat<T: Copy>(parts: &[&[T]], runs: &[usize], outer: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * runs.iter().sum::<usize>());
    super::alloc::advise_huge_pages(&mut out);
    for o in 0..outer {
        for (data, &run) in parts.iter().zip(runs) {
            out.extend_from_slice(&data[o * run..][..run]);
        }
    }
    out
}

/// `planes` planes of `to` elements, zero but for each value of the matching `from`-element
/// plane of `src` added at its position in `arg` (the gradient of max pooling). Planes in
/// parallel.
pub(crate) fn scatter_add_planes<T: Float>(
    src: &[T],
    arg: &[usize],
    planes: usize,
    (from, to): (usize, usize),
) -> Vec<T> {
    let mut out = vec![T::zero(); planes * to];
    for_each_chunk(&mut out, to, |p, plane| {
        let (vals, at) = (&src[p * from..][..from], &arg[p * from..][..from]);
        for (&v, &i) in vals.iter().zip(at) {
            plane[i] += v;
        }
    });
    out
}

/// For every plane of `from` elements of `x`, its values at the positions `arg` holds for
/// that plane: planes of `to` elements (the adjoint of [`scatter_add_planes`]).
pub(crate) fn gather_planes<T: Copy>(x: &[T], arg: &[usize], (from, to): (usize, usize)) -> Vec<T> {
    (0..arg.len())
        .map(|k| x[(k / to) * from + arg[k]])
        .collect()
}
