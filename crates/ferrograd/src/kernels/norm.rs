//! Batch normalisation fused: per-channel statistics of `[outer, channels, inner]` (axis 1 of
//! NCHW or `[N, C]`, `inner` the spatial size) in one pass each, and the normalised output or
//! its derivative in one more, where the composite ops would take a dozen passes and buffers.
//!
//! Each run of `inner` values is summed in the element type (eight accumulators), the runs of a
//! channel in f64: the statistics of a large batch keep their digits.

use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

use super::reduce::sum_run;
use super::{Float, Rows, PAR_THRESHOLD};

/// Σ (x − m)² of a run.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn sum_sq_dev<T: Float>(xs: &[T], m: T) -> T {
    let mut acc = [T::zero(); 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            let d = c[i] - m;
            acc[i] += d * d;
        }
    }
    rest.iter()
        .fold(acc.iter().fold(T::zero(), |s, &a| s + a), |s, &x| {
            s + (x - m) * (x - m)
        })
}

/// Σ dy·(x − m) of a run.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn sum_dot_dev<T: Float>(dy: &[T], xs: &[T], m: T) -> T {
    let mut acc = [T::zero(); 8];
    let (dc, xc) = (dy.chunks_exact(8), xs.chunks_exact(8));
    let (dr, xr) = (dc.remainder(), xc.remainder());
    for (d, x) in dc.zip(xc) {
        for i in 0..8 {
            acc[i] += d[i] * (x[i] - m);
        }
    }
    let head = acc.iter().fold(T::zero(), |s, &a| s + a);
    dr.iter().zip(xr).fold(head, |s, (&d, &x)| s + d * (x - m))
}

/// `out = a·x + b` over a run.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn affine<T: Float>(out: &mut [MaybeUninit<T>], xs: &[T], a: T, b: T) {
    for (o, &x) in out.iter_mut().zip(xs) {
        o.write(x * a + b);
    }
}

/// `out = a·dy − b·(x − m) − k` over a run: the input gradient of batch normalisation.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn input_grad<T: Float>(out: &mut [MaybeUninit<T>], dy: &[T], xs: &[T], [a, b, m, k]: [T; 4]) {
    for ((o, &d), &x) in out.iter_mut().zip(dy).zip(xs) {
        o.write(a * d - b * (x - m) - k);
    }
}

/// `f(c)` for every channel, on the thread pool when `len` elements are to be read.
fn per_channel<R: Send>(
    channels: usize,
    len: usize,
    f: impl Fn(usize) -> R + Sync + Send,
) -> Vec<R> {
    if len >= PAR_THRESHOLD {
        (0..channels).into_par_iter().map(f).collect()
    } else {
        (0..channels).map(f).collect()
    }
}

/// `f(run of out, run index)` for every `inner`-long run, on the pool when large.
fn per_run<T: Float>(
    out: &mut [MaybeUninit<T>],
    inner: usize,
    f: impl Fn(&mut [MaybeUninit<T>], usize) + Sync + Send,
) {
    if out.len() >= PAR_THRESHOLD {
        out.par_chunks_mut(inner)
            .enumerate()
            .for_each(|(r, o)| f(o, r));
    } else {
        out.chunks_mut(inner).enumerate().for_each(|(r, o)| f(o, r));
    }
}

/// Runs shorter than this take plain loops: a dispatched call per run would cost more than
/// the run (`[N, C]` input has runs of one).
const SHORT_RUN: usize = 16;

/// Σ x of a run.
fn run_sum<T: Float>(xs: &[T]) -> f64 {
    if xs.len() < SHORT_RUN {
        xs.iter().map(|x| x.as_f64()).sum()
    } else {
        sum_run(xs).as_f64()
    }
}

/// Σ (x − m)² of a run.
fn run_sq_dev<T: Float>(xs: &[T], m: T) -> f64 {
    if xs.len() < SHORT_RUN {
        xs.iter().map(|&x| ((x - m) * (x - m)).as_f64()).sum()
    } else {
        sum_sq_dev(xs, m).as_f64()
    }
}

/// Σ dy·(x − m) of a run.
fn run_dot_dev<T: Float>(dy: &[T], xs: &[T], m: T) -> f64 {
    if xs.len() < SHORT_RUN {
        dy.iter()
            .zip(xs)
            .map(|(&d, &x)| (d * (x - m)).as_f64())
            .sum()
    } else {
        sum_dot_dev(dy, xs, m).as_f64()
    }
}

/// The runs of channel `c` in a buffer seen as `rows`.
fn runs<T>(x: &[T], rows: Rows, c: usize) -> impl Iterator<Item = &[T]> {
    let Rows { outer, mid, inner } = rows;
    (0..outer).map(move |o| &x[(o * mid + c) * inner..][..inner])
}

/// Per-channel mean and biased variance (over `outer · inner` values each).
pub fn batch_stats<T: Float>(x: &[T], rows: Rows) -> (Vec<T>, Vec<T>) {
    assert_eq!(x.len(), rows.outer * rows.mid * rows.inner);
    let count = (rows.outer * rows.inner) as f64;
    let stats = per_channel(rows.mid, x.len(), |c| {
        let sum: f64 = runs(x, rows, c).map(run_sum).sum();
        let mean = T::from_f64(sum / count);
        let sq: f64 = runs(x, rows, c).map(|r| run_sq_dev(r, mean)).sum();
        (mean, T::from_f64(sq / count))
    });
    stats.into_iter().unzip()
}

/// `out` (empty, with room for `x.len()`) filled with `x · scale[c] + shift[c]` per channel.
pub fn scale_shift<T: Float>(x: &[T], rows: Rows, [scale, shift]: [&[T]; 2], out: &mut Vec<T>) {
    assert!(scale.len() == rows.mid && shift.len() == rows.mid);
    write_per_channel(out, x.len(), rows, |o, at, c| {
        let xs = &x[at..][..o.len()];
        if o.len() < SHORT_RUN {
            for (o, &x) in o.iter_mut().zip(xs) {
                o.write(x * scale[c] + shift[c]);
            }
        } else {
            affine(o, xs, scale[c], shift[c]);
        }
    });
}

/// `out` (empty, with room for `len`) written run by run by [`per_channel_run`], with no fill
/// first: `f` must write every slot of the run it is given.
fn write_per_channel<T: Float>(
    out: &mut Vec<T>,
    len: usize,
    rows: Rows,
    f: impl Fn(&mut [MaybeUninit<T>], usize, usize) + Sync + Send,
) {
    assert!(
        out.is_empty() && len == rows.outer * rows.mid * rows.inner,
        "batch norm: the output is not empty or the input is not [outer, channels, inner]"
    );
    per_channel_run(&mut out.spare_capacity_mut()[..len], rows, f);
    // SAFETY: the runs cover the first `len` spare slots (outer · mid runs of `inner`, or none
    // when `inner` is 0 and so is `len`), and `f` wrote each slot of each run.
    unsafe { out.set_len(len) };
}

/// `f(run, offset, channel)` for every channel's run of `out` (`inner` long), on the pool when
/// large; short runs are handed out a whole row of channels at a time.
fn per_channel_run<T: Float>(
    out: &mut [MaybeUninit<T>],
    rows: Rows,
    f: impl Fn(&mut [MaybeUninit<T>], usize, usize) + Sync + Send,
) {
    let Rows { mid, inner, .. } = rows;
    if inner >= SHORT_RUN {
        per_run(out, inner, |o, r| f(o, r * inner, r % mid));
    } else if inner > 0 {
        per_run(out, mid * inner, |row, r| {
            for (c, o) in row.chunks_mut(inner).enumerate() {
                f(o, (r * mid + c) * inner, c);
            }
        });
    }
}

/// The gradients of `y = (x − mean)·invstd·weight + bias` given `dy`, with the batch's own
/// statistics: `dx` written into `dx` (empty, with room for `x.len()`), `(dweight, dbias)`
/// returned.
pub fn batch_norm_backward<T: Float>(
    [dy, x]: [&[T]; 2],
    rows: Rows,
    [mean, invstd, weight]: [&[T]; 3],
    dx: &mut Vec<T>,
) -> (Vec<T>, Vec<T>) {
    assert!(dy.len() == x.len() && x.len() == rows.outer * rows.mid * rows.inner);
    let count = (rows.outer * rows.inner) as f64;
    let sums = per_channel(rows.mid, 2 * x.len(), |c| {
        let dbias: f64 = runs(dy, rows, c).map(run_sum).sum();
        let dot: f64 = runs(dy, rows, c)
            .zip(runs(x, rows, c))
            .map(|(d, x)| run_dot_dev(d, x, mean[c]))
            .sum();
        (T::from_f64(dot * invstd[c].as_f64()), T::from_f64(dbias))
    });
    let (dweight, dbias): (Vec<T>, Vec<T>) = sums.into_iter().unzip();
    // dx = w·invstd·(dy − Σdy/M − x̂·Σ(dy·x̂)/M), with x̂ = (x − mean)·invstd.
    let coefficients: Vec<[T; 4]> = (0..rows.mid)
        .map(|c| {
            let a = weight[c] * invstd[c];
            let m = T::from_f64(count);
            [a, a * invstd[c] * dweight[c] / m, mean[c], a * dbias[c] / m]
        })
        .collect();
    write_per_channel(dx, x.len(), rows, |o, at, c| {
        let (dy, x) = (&dy[at..][..o.len()], &x[at..][..o.len()]);
        let [a, b, m, k] = coefficients[c];
        if o.len() < SHORT_RUN {
            for ((o, &d), &x) in o.iter_mut().zip(dy).zip(x) {
                o.write(a * d - b * (x - m) - k);
            }
        } else {
            input_grad(o, dy, x, coefficients[c]);
        }
    });
    (dweight, dbias)
}
