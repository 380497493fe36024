//! Batch normalisation fused: per-channel statistics of `[outer, channels, inner]` (axis 1 of
//! NCHW or `[N, C]`, `inner` the spatial size) in one pass each, and the normalised output or
//! its derivative in one more, where the composite ops would take a dozen passes and buffers.
//!
//! Two walks, by the length of a channel's runs (`inner`):
//! - long runs (images): each run is summed in the element type (eight accumulators), the runs
//!   of a channel in f64, a channel per task; the output is written a run at a time with the
//!   channel's coefficients;
//! - short runs (`[N, C]`, runs of one): the rows are read in order and each column's sum kept
//!   in f64, a block of rows and columns per task, so no read strides across channels; the
//!   output is written a row at a time with coefficients laid out by column.
//!
//! Either way the statistics of a large batch keep their digits.

use std::mem::MaybeUninit;

use ferrograd_derive::isa_dispatch;

use super::parallel::{for_each_chunk, run_tasks};
use super::{Float, Rows, PAR_THRESHOLD};

/// Runs shorter than this are walked by rows: a dispatched call per run would cost more than
/// the run.
const SHORT_RUN: usize = 16;

/// Columns summed by one task of the short-run walk.
const COLUMN_BLOCK: usize = 1024;

/// Rows summed by one task of the short-run walk: many rows of few columns (`[65536, 64]`)
/// still share out between threads. Fixed by the shape alone, as the column blocks are, so
/// the order of the sums is too.
const ROW_BLOCK: usize = 256;

/// Whether runs of `inner` values take the short-run walk.
fn short_runs(inner: usize) -> bool {
    inner < SHORT_RUN
}

/// Σ term(a, b, m) over a run, eight accumulators in the element type.
#[isa_dispatch]
fn sum_terms<T: Float>(a: &[T], b: &[T], m: T, term: &impl Fn(T, T, T) -> T) -> T {
    let mut acc = [T::zero(); 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (a, b) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += term(a[i], b[i], m);
        }
    }
    let head = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    ar.iter()
        .zip(br)
        .fold(head, |s, (&a, &b)| s + term(a, b, m))
}

/// `acc[j] += term(a[j], b[j], m[j])` in f64 over one row's block of columns.
#[isa_dispatch]
fn add_terms<T: Float>(acc: &mut [f64], [a, b, m]: [&[T]; 3], term: &impl Fn(T, T, T) -> T) {
    for (((s, &a), &b), &m) in acc.iter_mut().zip(a).zip(b).zip(m) {
        *s += term(a, b, m).as_f64();
    }
}

/// `out = a·x + b` over a run.
#[isa_dispatch]
fn affine<T: Float>(out: &mut [MaybeUninit<T>], xs: &[T], a: T, b: T) {
    for (o, &x) in out.iter_mut().zip(xs) {
        o.write(x * a + b);
    }
}

/// `out[j] = a[j]·x[j] + b[j]` over a row.
#[isa_dispatch]
fn affine_columns<T: Float>(out: &mut [MaybeUninit<T>], xs: &[T], [a, b]: [&[T]; 2]) {
    let n = out.len();
    let (xs, a, b) = (&xs[..n], &a[..n], &b[..n]);
    for (((o, &x), &a), &b) in out.iter_mut().zip(xs).zip(a).zip(b) {
        o.write(x * a + b);
    }
}

/// `out = a·dy − b·(x − m) − k` over a run: the input gradient of batch normalisation.
#[isa_dispatch]
fn input_grad<T: Float>(out: &mut [MaybeUninit<T>], dy: &[T], xs: &[T], [a, b, m, k]: [T; 4]) {
    for ((o, &d), &x) in out.iter_mut().zip(dy).zip(xs) {
        o.write(a * d - b * (x - m) - k);
    }
}

/// [`input_grad`] over a row, its coefficients by column.
#[isa_dispatch]
fn input_grad_columns<T: Float>(
    out: &mut [MaybeUninit<T>],
    dy: &[T],
    xs: &[T],
    [a, b, m, k]: [&[T]; 4],
) {
    let n = out.len();
    let (dy, xs, a, b, m, k) = (&dy[..n], &xs[..n], &a[..n], &b[..n], &m[..n], &k[..n]);
    for (j, ((o, &d), &x)) in out.iter_mut().zip(dy).zip(xs).enumerate() {
        o.write(a[j] * d - b[j] * (x - m[j]) - k[j]);
    }
}

/// Per channel, Σ term(a, b, centre[c]) over the channel's elements, in f64.
fn channel_sums<T: Float>(
    rows: Rows,
    [a, b]: [&[T]; 2],
    centre: &[T],
    term: impl Fn(T, T, T) -> T + Sync + Send,
) -> Vec<f64> {
    let Rows { outer, mid, inner } = rows;
    assert!(a.len() == b.len() && a.len() == outer * mid * inner && centre.len() == mid);
    let parallel = 2 * a.len() >= PAR_THRESHOLD;
    if !short_runs(inner) {
        let channel = |c: usize| -> f64 {
            (0..outer)
                .map(|o| {
                    let at = (o * mid + c) * inner;
                    let (a, b) = (&a[at..][..inner], &b[at..][..inner]);
                    sum_terms(a, b, centre[c], &term).as_f64()
                })
                .sum()
        };
        return if parallel {
            run_tasks((0..mid).collect(), channel)
        } else {
            (0..mid).map(channel).collect()
        };
    }
    let width = mid * inner;
    if width == 0 {
        return vec![0.0; mid];
    }
    let centre = by_column(centre, inner);
    // Each block of rows sums each block of columns; then the row blocks add up in order.
    let mut partial = vec![0.0; outer.div_ceil(ROW_BLOCK) * width];
    let blocks = partial.chunks_mut(width).enumerate().flat_map(|(r, part)| {
        let blocks = part.chunks_mut(COLUMN_BLOCK).enumerate();
        blocks.map(move |(i, acc)| (r, i, acc))
    });
    let block = |(r, i, acc): (usize, usize, &mut [f64])| {
        let (rows, j) = (
            r * ROW_BLOCK..((r + 1) * ROW_BLOCK).min(outer),
            i * COLUMN_BLOCK,
        );
        let m = &centre[j..][..acc.len()];
        for o in rows {
            let at = o * width + j;
            add_terms(acc, [&a[at..][..m.len()], &b[at..][..m.len()], m], &term);
        }
    };
    if parallel {
        run_tasks(blocks.collect(), block);
    } else {
        blocks.for_each(block);
    }
    let mut parts = partial.chunks_exact(width);
    let first = parts.next().map(<[f64]>::to_vec);
    let mut columns = first.unwrap_or_else(|| vec![0.0; width]);
    for part in parts {
        columns.iter_mut().zip(part).for_each(|(c, &p)| *c += p);
    }
    columns.chunks(inner).map(|c| c.iter().sum()).collect()
}

/// Each channel's value repeated for its `inner` columns of a row, for the short-run walk
/// (empty when runs are long: they take their channel's value directly).
fn by_column<T: Copy>(per_channel: &[T], inner: usize) -> Vec<T> {
    if !short_runs(inner) {
        return Vec::new();
    }
    per_channel
        .iter()
        .flat_map(|&v| std::iter::repeat_n(v, inner))
        .collect()
}

/// Writes piece `r` of an output.
type WritePiece<'a, T> = dyn Fn(&mut [MaybeUninit<T>], usize) + Sync + 'a;

/// `out` (empty, with room for `outer · channels · inner`) written with no fill first:
/// `long(run, offset, channel)` for each `inner`-long run when runs are long, `short(row,
/// offset)` for each row of `channels · inner` when they are short. On the thread pool when
/// large.
///
/// # Safety
/// Every call of `long` and `short` must write every slot of the slice it is given: `out`
/// then holds that many elements.
unsafe fn write_runs<T: Float>(
    out: &mut Vec<T>,
    rows: Rows,
    long: impl Fn(&mut [MaybeUninit<T>], usize, usize) + Sync + Send,
    short: impl Fn(&mut [MaybeUninit<T>], usize) + Sync + Send,
) {
    let Rows { outer, mid, inner } = rows;
    let len = outer * mid * inner;
    assert!(out.is_empty(), "batch norm: the output is not empty");
    let dst = &mut out.spare_capacity_mut()[..len];
    let (piece, run): (usize, &WritePiece<'_, T>) = if !short_runs(inner) {
        (inner, &|o, r| long(o, r * inner, r % mid))
    } else {
        (mid * inner, &|o, r| short(o, r * mid * inner))
    };
    if len > 0 {
        if len >= PAR_THRESHOLD {
            for_each_chunk(dst, piece, |r, o| run(o, r));
        } else {
            dst.chunks_mut(piece)
                .enumerate()
                .for_each(|(r, o)| run(o, r));
        }
    }
    // SAFETY: the pieces cover the first `len` spare slots (runs of `inner`, or rows of
    // `mid · inner`, none when `len` is 0), and each was written whole (the caller's
    // contract).
    unsafe { out.set_len(len) };
}

/// Per-channel mean and biased variance (over `outer · inner` values each).
pub fn batch_stats<T: Float>(x: &[T], rows: Rows) -> (Vec<T>, Vec<T>) {
    let count = (rows.outer * rows.inner) as f64;
    let zero = vec![T::zero(); rows.mid];
    let sums = channel_sums(rows, [x, x], &zero, |x, _, _| x);
    let mean: Vec<T> = sums.iter().map(|&s| T::from_f64(s / count)).collect();
    let squares = channel_sums(rows, [x, x], &mean, |x, _, m| (x - m) * (x - m));
    let var = squares.iter().map(|&s| T::from_f64(s / count)).collect();
    (mean, var)
}

/// `out` (empty, with room for `x.len()`) filled with `x · scale[c] + shift[c]` per channel.
pub fn scale_shift<T: Float>(x: &[T], rows: Rows, [scale, shift]: [&[T]; 2], out: &mut Vec<T>) {
    assert!(
        scale.len() == rows.mid
            && shift.len() == rows.mid
            && x.len() == rows.outer * rows.mid * rows.inner
    );
    let columns = [scale, shift].map(|v| by_column(v, rows.inner));
    let long = |o: &mut [MaybeUninit<T>], at: usize, c: usize| {
        affine(o, &x[at..][..o.len()], scale[c], shift[c]);
    };
    let short = |o: &mut [MaybeUninit<T>], at: usize| {
        affine_columns(o, &x[at..][..o.len()], [&columns[0], &columns[1]]);
    };
    // SAFETY: `affine` and `affine_columns` write every slot of `o` (they zip it with inputs
    // sliced to its length, and panic where an input is shorter).
    unsafe { write_runs(out, rows, long, short) };
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
    let count = (rows.outer * rows.inner) as f64;
    let zero = vec![T::zero(); rows.mid];
    let dbias = channel_sums(rows, [dy, dy], &zero, |d, _, _| d);
    let dot = channel_sums(rows, [x, dy], mean, |x, d, m| d * (x - m));
    let dweight: Vec<T> = dot
        .iter()
        .zip(invstd)
        .map(|(&s, &i)| T::from_f64(s * i.as_f64()))
        .collect();
    let dbias: Vec<T> = dbias.into_iter().map(T::from_f64).collect();
    // dx = w·invstd·(dy − Σdy/M − x̂·Σ(dy·x̂)/M), with x̂ = (x − mean)·invstd.
    let m = T::from_f64(count);
    let coefficients: Vec<[T; 4]> = (0..rows.mid)
        .map(|c| {
            let a = weight[c] * invstd[c];
            [a, a * invstd[c] * dweight[c] / m, mean[c], a * dbias[c] / m]
        })
        .collect();
    let columns: [Vec<T>; 4] = std::array::from_fn(|i| {
        let v: Vec<T> = coefficients.iter().map(|k| k[i]).collect();
        by_column(&v, rows.inner)
    });
    let long = |o: &mut [MaybeUninit<T>], at: usize, c: usize| {
        let (dy, x) = (&dy[at..][..o.len()], &x[at..][..o.len()]);
        input_grad(o, dy, x, coefficients[c]);
    };
    let short = |o: &mut [MaybeUninit<T>], at: usize| {
        let (dy, x) = (&dy[at..][..o.len()], &x[at..][..o.len()]);
        input_grad_columns(
            o,
            dy,
            x,
            [&columns[0], &columns[1], &columns[2], &columns[3]],
        );
    };
    // SAFETY: `input_grad` and `input_grad_columns` write every slot of `o` (they zip it
    // with inputs sliced to its length, and panic where an input is shorter).
    unsafe { write_runs(dx, rows, long, short) };
    (dweight, dbias)
}

/// Rows per task of layer normalisation: fixed by the shape, so the order in which the
/// affine parameters' gradients are summed is too, whatever the thread count.
const LAYER_ROWS: usize = 64;

/// One task's share of a layer normalisation: its block's index, and its rows of the output,
/// of the input and of the upstream gradient.
type LayerTask<'a, T> = (usize, &'a mut [MaybeUninit<T>], &'a [T], &'a [T]);

/// Runs `task` on blocks of [`LAYER_ROWS`] rows of width `d`, on several threads when the
/// input is large, and returns its results in the blocks' order; `out` (empty, with room for
/// `x.len()`) then holds `x.len()` elements.
///
/// # Safety
/// `task` must write every slot of the output block it is given (`out` is set to its full
/// length afterwards).
unsafe fn layer_blocks<T: Float, R: Send>(
    out: &mut Vec<T>,
    [x, up]: [&[T]; 2],
    d: usize,
    task: impl Fn(LayerTask<'_, T>) -> R + Sync + Send,
) -> Vec<R> {
    assert!(d > 0 && x.len().is_multiple_of(d) && up.len() == x.len());
    assert!(out.is_empty() && out.capacity() >= x.len());
    let block = LAYER_ROWS * d;
    let parts: Vec<LayerTask<'_, T>> = out.spare_capacity_mut()[..x.len()]
        .chunks_mut(block)
        .zip(x.chunks(block))
        .zip(up.chunks(block))
        .enumerate()
        .map(|(i, ((o, x), u))| (i, o, x, u))
        .collect();
    let results = if 2 * x.len() >= PAR_THRESHOLD {
        super::parallel::run_tasks(parts, task)
    } else {
        parts.into_iter().map(task).collect()
    };
    let len = x.len();
    // SAFETY: the blocks cover `out`'s first `len` slots and `task` wrote every slot of its
    // block (this function's contract); `out` has room for `len`.
    unsafe { out.set_len(len) };
    results
}

/// One row's mean and rstd = 1/√(biased variance + eps).
#[inline(always)]
fn row_stats<T: Float>(x: &[T], eps: T) -> (T, T) {
    let n = T::from_f64(x.len() as f64);
    let mean = sum_terms(x, x, T::zero(), &|a, _, _| a) / n;
    let var = sum_terms(x, x, mean, &|a, _, m| (a - m) * (a - m)) / n;
    (mean, T::one() / (var + eps).sqrt())
}

#[isa_dispatch]
fn stats_of_row<T: Float>(x: &[T], eps: T) -> (T, T) {
    row_stats(x, eps)
}

/// Each row's mean and rstd, as [`layer_norm`] returns them (the same sums, so the same
/// values), without normalising: for a backward that does not have the forward's.
pub fn layer_norm_stats<T: Float>(x: &[T], d: usize, eps: T) -> Vec<T> {
    let rows = |block: &[T]| -> Vec<T> {
        block
            .chunks_exact(d)
            .flat_map(|row| <[T; 2]>::from(stats_of_row(row, eps)))
            .collect()
    };
    if d == 0 {
        // Rows of nothing: no statistics (and nothing to split them by).
        return Vec::new();
    }
    if x.len() < PAR_THRESHOLD {
        return rows(x);
    }
    // Blocks of rows on the kernels' threads, as the forward splits them.
    let blocks: Vec<&[T]> = x.chunks(LAYER_ROWS * d).collect();
    super::parallel::run_tasks(blocks, rows).concat()
}

/// One row normalised: `out = (x − mean)·rstd·w + b`; returns `(mean, rstd)`.
#[isa_dispatch]
fn normalise_row<T: Float>(
    out: &mut [MaybeUninit<T>],
    x: &[T],
    [w, b]: [&[T]; 2],
    eps: T,
) -> (T, T) {
    let (mean, rstd) = row_stats(x, eps);
    let (w, b) = (&w[..x.len()], &b[..x.len()]);
    for (((o, &x), &w), &b) in out.iter_mut().zip(x).zip(w).zip(b) {
        o.write((x - mean) * rstd * w + b);
    }
    (mean, rstd)
}

/// Layer normalisation of every row of `x` (`[rows, d]`, row-major), PyTorch's `layer_norm`
/// over the last axis: `out` (empty, with room for `x.len()`) gets `(x − mean)·rstd·w + b`
/// with the row's mean and biased variance, rstd = 1/√(var + eps). Returns each row's mean
/// and rstd, one pair after the other (`[rows, 2]`), for the backward.
pub fn layer_norm<T: Float>(x: &[T], d: usize, wb: [&[T]; 2], eps: T, out: &mut Vec<T>) -> Vec<T> {
    assert!(
        wb.iter().all(|v| v.len() == d),
        "layer_norm: weight and bias of {d}"
    );
    // SAFETY: `normalise_row` writes every slot of each row (it zips the row with x, w and b,
    // sliced to its length), and the rows cover the block (its length is a multiple of d).
    let stats = unsafe {
        layer_blocks(out, [x, x], d, |(_, o, x, _)| {
            let rows = o.chunks_exact_mut(d).zip(x.chunks_exact(d));
            rows.flat_map(|(o, x)| <[T; 2]>::from(normalise_row(o, x, wb, eps)))
                .collect::<Vec<T>>()
        })
    };
    stats.concat()
}

/// One row's input gradient `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))`, g = up·w, and its
/// terms of the parameters' gradients: `dw += up·x̂`, `db += up`.
#[isa_dispatch]
fn layer_row_grad<T: Float>(
    dx: &mut [MaybeUninit<T>],
    [up, x, w]: [&[T]; 3],
    (mean, rstd): (T, T),
    [dw, db]: [&mut [T]; 2],
) {
    let d = x.len();
    let (up, w, dw, db, dx) = (&up[..d], &w[..d], &mut dw[..d], &mut db[..d], &mut dx[..d]);
    let (mut sg, mut sgx) = ([T::zero(); 8], [T::zero(); 8]);
    // Element j goes to running sum j % 8. Written over whole groups of eight (the rest after
    // them) so that the sums stay in vector lanes: indexed by j % 8 in one loop, they were
    // kept as eight scalars.
    let whole = d / 8 * 8;
    let groups = up[..whole].chunks_exact(8).zip(w[..whole].chunks_exact(8));
    for ((u, w), x) in groups.zip(x[..whole].chunks_exact(8)) {
        for l in 0..8 {
            let g = u[l] * w[l];
            sg[l] += g;
            sgx[l] += g * (x[l] - mean);
        }
    }
    for j in whole..d {
        let g = up[j] * w[j];
        sg[j % 8] += g;
        sgx[j % 8] += g * (x[j] - mean);
    }
    let total = |a: [T; 8]| ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    let n = T::from_f64(d as f64);
    let (mg, mgx) = (total(sg) / n, total(sgx) * rstd / n);
    for j in 0..d {
        let xhat = (x[j] - mean) * rstd;
        dx[j].write(rstd * (up[j] * w[j] - mg - xhat * mgx));
        dw[j] += up[j] * xhat;
        db[j] += up[j];
    }
}

/// The gradients of [`layer_norm`] given `up` and its statistics: `dx` written into `dx`
/// (empty, with room for `x.len()`), `(dweight, dbias)` returned (sums over the rows, block by block in order).
pub fn layer_norm_backward<T: Float>(
    [up, x]: [&[T]; 2],
    d: usize,
    weight: &[T],
    stats: &[T],
    dx: &mut Vec<T>,
) -> (Vec<T>, Vec<T>) {
    assert_eq!(weight.len(), d, "layer_norm backward: weight of {d}");
    assert_eq!(
        stats.len() * d,
        2 * x.len(),
        "layer_norm backward: statistics"
    );
    // SAFETY: `layer_row_grad` writes every slot of each row (j in 0..d), and the rows cover
    // the block.
    let partial = unsafe {
        layer_blocks(dx, [x, up], d, |(i, o, x, up)| {
            let (mut dw, mut db) = (vec![T::zero(); d], vec![T::zero(); d]);
            let st = stats[2 * i * LAYER_ROWS..].chunks_exact(2);
            let rows = o
                .chunks_exact_mut(d)
                .zip(x.chunks_exact(d))
                .zip(up.chunks_exact(d));
            for (((o, x), u), s) in rows.zip(st) {
                layer_row_grad(o, [u, x, weight], (s[0], s[1]), [&mut dw, &mut db]);
            }
            (dw, db)
        })
    };
    let (mut dw, mut db) = (vec![T::zero(); d], vec![T::zero(); d]);
    for (pw, pb) in partial {
        dw.iter_mut().zip(&pw).for_each(|(a, &b)| *a += b);
        db.iter_mut().zip(&pb).for_each(|(a, &b)| *a += b);
    }
    (dw, db)
}
