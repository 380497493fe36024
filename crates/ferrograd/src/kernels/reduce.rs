//! Reductions over a contiguous buffer viewed as `[outer, mid, inner]` ([`Rows`], reducing `mid`): every reduction over
//! a contiguous block of axes has this form (the ops layer permutes other axis sets into it).

use ferrograd_derive::isa_dispatch;

use super::parallel::{for_each_chunk, run_tasks};
use super::{Float, Rows, PAR_CHUNK, PAR_THRESHOLD};

/// Sum of a contiguous run with eight independent accumulators: vectorisable, and the error
/// grows with n/8 rather than n. Compiled for each instruction set, chosen at run time.
#[isa_dispatch]
pub(crate) fn sum_run<T: Float>(xs: &[T]) -> T {
    sum_lanes(xs)
}

/// [`sum_run`]'s arithmetic, inlined into a kernel that is itself compiled for each
/// instruction set (a dispatched call per short row would cost as much as the row).
#[inline(always)]
pub(crate) fn sum_lanes<T: Float>(xs: &[T]) -> T {
    let (acc, rest) = lanes::<T, T, 8>(xs, T::zero(), |a, v| a + v);
    let s = rest.iter().fold(T::zero(), |s, &r| s + r);
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s
}

/// Largest element of a run, −∞ for an empty one, with eight independent running maxima:
/// vectorisable, inlined as [`sum_lanes`]. NaN elements are passed over (as `max` does), so
/// the result is the same whatever the order.
#[inline(always)]
pub(crate) fn max_lanes<T: Float>(xs: &[T]) -> T {
    let (acc, rest) = lanes::<T, T, 8>(xs, T::neg_infinity(), |m, v| m.max(v));
    acc.iter()
        .chain(rest)
        .fold(T::neg_infinity(), |m, &v| m.max(v))
}

/// `f` folded over `xs` in `L` independent running values from `init` (element `i` of each
/// whole group of `L` into value `i`), and the elements after the last whole group. One fold
/// would be a chain of dependent steps; `L` of them fill the vector lanes. Each caller
/// combines the values in its own fixed order, so its result is the same bits every run.
#[inline(always)]
pub(crate) fn lanes<T: Copy, A: Copy, const L: usize>(
    xs: &[T],
    init: A,
    f: impl Fn(A, T) -> A,
) -> ([A; L], &[T]) {
    let mut acc = [init; L];
    let chunks = xs.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..L {
            acc[i] = f(acc[i], c[i]);
        }
    }
    (acc, rest)
}

/// `acc[j] = op(acc[j], x[j])`: one row of a reduction over rows, compiled for each
/// instruction set.
#[isa_dispatch]
fn accumulate<T: Float>(acc: &mut [T], x: &[T], op: &impl Fn(T, T) -> T) {
    for (v, &x) in acc.iter_mut().zip(x) {
        *v = op(*v, x);
    }
}

/// `f(out block, x block)` for the matching blocks of `out` (`out_block` long) and `x`
/// (`x_block` long): on the thread pool when the input is large and there is more than one
/// block (`several`), in order otherwise.
fn per_block<T: Send + Sync, U: Send>(
    out: &mut [U],
    out_block: usize,
    x: &[T],
    x_block: usize,
    several: bool,
    f: impl Fn((&mut [U], &[T])) + Sync + Send,
) {
    let (out_block, x_block) = (out_block.max(1), x_block.max(1));
    if x.len() >= PAR_THRESHOLD && several {
        // Parts of about PAR_CHUNK inputs each, of whole blocks.
        let per = (PAR_CHUNK / x_block).max(1);
        let parts: Vec<(&mut [U], &[T])> = out
            .chunks_mut(out_block * per)
            .zip(x.chunks(x_block * per))
            .collect();
        run_tasks(parts, |(o, x)| {
            o.chunks_mut(out_block).zip(x.chunks(x_block)).for_each(&f)
        });
    } else {
        out.chunks_mut(out_block).zip(x.chunks(x_block)).for_each(f);
    }
}

/// Sum of a whole buffer; parallel (and pairwise across chunks) when large.
pub fn sum_all<T: Float>(xs: &[T]) -> T {
    if xs.len() >= PAR_THRESHOLD {
        let partial: Vec<T> = run_tasks(xs.chunks(PAR_CHUNK).collect(), sum_run);
        sum_run(&partial)
    } else {
        sum_run(xs)
    }
}

/// `out[o, j] = Σ_r x[o, r, j]`.
pub fn sum<T: Float>(x: &[T], rows: Rows, out: &mut [T]) {
    let Rows { outer, mid, inner } = rows;
    debug_assert_eq!(x.len(), outer * mid * inner);
    debug_assert_eq!(out.len(), outer * inner);
    if mid == 0 || out.is_empty() {
        // The sum of nothing is 0 (and an empty output has nothing to compute).
        out.iter_mut().for_each(|v| *v = T::zero());
    } else if inner == 1 && outer == 1 {
        out[0] = sum_all(x);
    } else if inner == 1 {
        per_block(out, 1, x, mid, true, |(o, row)| o[0] = sum_run(row));
    } else if outer == 1 && x.len() >= PAR_THRESHOLD {
        // One outer block: split the kept columns across threads instead.
        let cols = (PAR_CHUNK / mid).max(64);
        for_each_chunk(out, cols, |ci, o_cols| {
            let j0 = ci * cols;
            o_cols.iter_mut().for_each(|v| *v = T::zero());
            for r in 0..mid {
                let x_row = &x[r * inner + j0..r * inner + j0 + o_cols.len()];
                accumulate(o_cols, x_row, &|v, x| v + x);
            }
        });
    } else {
        let block = |(o_row, x_block): (&mut [T], &[T])| {
            o_row.iter_mut().for_each(|v| *v = T::zero());
            for x_row in x_block.chunks_exact(inner) {
                accumulate(o_row, x_row, &|v, x| v + x);
            }
        };
        per_block(out, inner, x, mid * inner, outer > 1, block);
    }
}

/// `out[o, j] = fold(x[o, 0, j], x[o, 1, j], ...)` for an associative `pick` such as max or min.
/// `rows.mid` must be at least 1.
pub fn fold<T: Float>(x: &[T], rows: Rows, out: &mut [T], pick: impl Fn(T, T) -> T + Sync) {
    let Rows { outer, mid, inner } = rows;
    assert!(mid > 0, "reduction over an empty axis");
    let block = |(o_row, x_block): (&mut [T], &[T])| {
        o_row.copy_from_slice(&x_block[..inner]);
        for x_row in x_block.chunks_exact(inner).skip(1) {
            accumulate(o_row, x_row, &pick);
        }
    };
    per_block(out, inner, x, mid * inner, outer > 1, block);
}

/// Index along the reduced axis of the first element that `better` prefers over all others
/// (`better(new, best)` true means `new` wins). NaN wins, as in numpy.
pub fn arg_fold<T: Float>(
    x: &[T],
    rows: Rows,
    out: &mut [usize],
    better: impl Fn(T, T) -> bool + Sync,
) {
    let Rows { outer, mid, inner } = rows;
    assert!(mid > 0, "reduction over an empty axis");
    let block = |(o_row, x_block): (&mut [usize], &[T])| {
        for (j, o) in o_row.iter_mut().enumerate() {
            let mut best = x_block[j];
            let mut at = 0;
            for r in 1..mid {
                let v = x_block[r * inner + j];
                if best.is_nan() {
                    break;
                }
                if v.is_nan() || better(v, best) {
                    best = v;
                    at = r;
                }
            }
            *o = at;
        }
    };
    per_block(out, inner, x, mid * inner, outer > 1, block);
}

/// Numerically stable softmax (or log-softmax) of each row of `x` viewed as
/// `[outer, red, inner]` along the middle axis: the row maximum is subtracted before `exp`.
pub fn softmax<T: Float>(x: &[T], rows: Rows, log: bool, out: &mut [T]) {
    let Rows {
        outer,
        mid: red,
        inner,
    } = rows;
    debug_assert_eq!(x.len(), outer * red * inner);
    debug_assert_eq!(out.len(), x.len());
    if inner == 1 {
        // Rows contiguous (the last axis): whole-row passes in vector lanes, and the
        // vectorised exponential instead of a library call per element.
        let row = |(o, x): (&mut [T], &[T])| softmax_row(o, x, log);
        return per_block(out, red, x, red, outer > 1, row);
    }
    let block = |(o_block, x_block): (&mut [T], &[T])| {
        for j in 0..inner {
            let mut m = T::neg_infinity();
            for r in 0..red {
                m = m.max(x_block[r * inner + j]);
            }
            if m.is_infinite() {
                // All -inf (or +inf present): keep the arithmetic finite where it can be.
                m = if m > T::zero() { m } else { T::zero() };
            }
            let mut s = T::zero();
            for r in 0..red {
                let e = (x_block[r * inner + j] - m).exp();
                o_block[r * inner + j] = e;
                s += e;
            }
            if log {
                // (x - m) - ln s, not x - (m + ln s): the latter loses ln s's digits when m
                // is large.
                let ls = s.ln();
                for r in 0..red {
                    o_block[r * inner + j] = (x_block[r * inner + j] - m) - ls;
                }
            } else {
                let inv = T::one() / s;
                for r in 0..red {
                    o_block[r * inner + j] = o_block[r * inner + j] * inv;
                }
            }
        }
    };
    per_block(out, red * inner, x, red * inner, outer > 1, block);
}

/// [`softmax`] of one contiguous row `x` into `o`, compiled for each instruction set: the
/// same steps as the strided form, with the maximum and the sum in eight lanes.
#[isa_dispatch]
fn softmax_row<T: Float>(o: &mut [T], x: &[T], log: bool) {
    let o = &mut o[..x.len()];
    let mut m = max_lanes(x);
    if m.is_infinite() {
        // All -inf (or +inf present): keep the arithmetic finite where it can be.
        m = if m > T::zero() { m } else { T::zero() };
    }
    for (o, &x) in o.iter_mut().zip(x) {
        *o = x - m;
    }
    T::exp_in_place(o);
    let s = sum_lanes(o);
    if log {
        // (x - m) - ln s, not x - (m + ln s): the latter loses ln s's digits when m is large.
        let ls = s.ln();
        for (o, &x) in o.iter_mut().zip(x) {
            *o = (x - m) - ls;
        }
    } else {
        let inv = T::one() / s;
        o.iter_mut().for_each(|o| *o = *o * inv);
    }
}

/// Integer sums over `mid` ([`Rows`] as [`sum`]) added into `out` (zeros from the caller's
/// allocation), in two's-complement arithmetic that wraps on overflow, as PyTorch's int64
/// sums do: exact at every size, unlike a sum through f64.
pub fn sum_wrapping(x: &[i64], rows: Rows, out: &mut [i64]) {
    let Rows { outer, mid, inner } = rows;
    debug_assert_eq!(x.len(), outer * mid * inner);
    debug_assert_eq!(out.len(), outer * inner);
    for (block, o) in x
        .chunks_exact((mid * inner).max(1))
        .zip(out.chunks_exact_mut(inner.max(1)))
    {
        for row in block.chunks_exact(inner.max(1)).take(mid) {
            o.iter_mut()
                .zip(row)
                .for_each(|(s, &v)| *s = s.wrapping_add(v));
        }
    }
}

/// Running `op` along `mid` ([`Rows`]; `out` is `x`'s size): element `m` combines elements
/// `0..=m` from the left. For the integer scans (`cumsum`, `cumprod`), whose `op` wraps.
pub fn scan_with(x: &[i64], rows: Rows, out: &mut [i64], op: impl Fn(i64, i64) -> i64) {
    let Rows { outer, mid, inner } = rows;
    debug_assert_eq!(x.len(), outer * mid * inner);
    debug_assert_eq!(out.len(), x.len());
    let step = (mid * inner).max(1);
    for (block, o) in x.chunks_exact(step).zip(out.chunks_exact_mut(step)) {
        for m in 0..mid {
            let row = m * inner..(m + 1) * inner;
            if m == 0 {
                o[row.clone()].copy_from_slice(&block[row]);
            } else {
                let (done, rest) = o.split_at_mut(m * inner);
                let prev = &done[(m - 1) * inner..];
                for ((r, &p), &v) in rest[..inner].iter_mut().zip(prev).zip(&block[row]) {
                    *r = op(p, v);
                }
            }
        }
    }
}
