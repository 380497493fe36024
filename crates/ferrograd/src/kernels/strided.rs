//! Element-wise kernels over strided operands written into a contiguous output.
//!
//! Axes are first coalesced (merged wherever every operand steps through them as one run), so a
//! contiguous operand becomes a single flat axis and a bias broadcast `[N, M] + [M]` becomes rows
//! of `M`. The innermost run is then specialised on its strides (1 = contiguous, 0 = broadcast
//! scalar) so the compiler can vectorise it; only genuinely strided runs index one by one.

use super::parallel::for_each_chunk;
use ferrograd_derive::isa_dispatch;

use std::borrow::Cow;
use std::mem::MaybeUninit;

use super::{Dims, Float, MAP_THRESHOLD, PAR_CHUNK};

/// A read-only operand: `data[offset + Σ index[i] * strides[i]]`, strides already expressed in
/// the output's shape (0 along broadcast axes).
#[derive(Clone, Copy)]
pub struct Src<'a, T> {
    pub data: &'a [T],
    pub strides: &'a [usize],
    pub offset: usize,
}

/// Shape and per-operand strides after merging axes that every operand traverses as one run.
/// Always at least one axis.
struct MergedAxes<const K: usize> {
    shape: Dims,
    strides: [Dims; K],
}

impl<const K: usize> MergedAxes<K> {
    fn new(shape: &[usize], strides: [&[usize]; K]) -> Self {
        let mut out_shape = Dims::new();
        let mut out_strides: [Dims; K] = std::array::from_fn(|_| Dims::new());
        for (axis, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let mergeable = match out_shape.last() {
                Some(_) => (0..K).all(|k| {
                    let prev = *out_strides[k].last().unwrap();
                    prev == strides[k][axis] * d
                }),
                None => false,
            };
            if mergeable {
                *out_shape.last_mut().unwrap() *= d;
                for k in 0..K {
                    *out_strides[k].last_mut().unwrap() = strides[k][axis];
                }
            } else {
                out_shape.push(d);
                for k in 0..K {
                    out_strides[k].push(strides[k][axis]);
                }
            }
        }
        if out_shape.is_empty() {
            out_shape.push(1);
            for s in out_strides.iter_mut() {
                s.push(0);
            }
        }
        MergedAxes {
            shape: out_shape,
            strides: out_strides,
        }
    }

    fn inner(&self) -> usize {
        *self.shape.last().unwrap()
    }

    /// Offsets of the first element of flat output row `row` (rows run along the last axis).
    fn row_offsets(&self, mut row: usize, base: [usize; K]) -> [usize; K] {
        let mut offs = base;
        for axis in (0..self.shape.len() - 1).rev() {
            let d = self.shape[axis];
            let i = row % d;
            row /= d;
            for (o, strides) in offs.iter_mut().zip(&self.strides) {
                *o += i * strides[axis];
            }
        }
        offs
    }

    /// Calls `f(out_start, len, offsets, inner_strides)` for each run of the output range
    /// `start..start + len`, splitting across threads when the output is large.
    fn for_runs<T: Send>(
        &self,
        out: &mut [T],
        base: [usize; K],
        f: impl Fn(&mut [T], [usize; K], [usize; K]) + Sync,
    ) {
        let inner = self.inner();
        let inner_strides: [usize; K] = std::array::from_fn(|k| *self.strides[k].last().unwrap());
        let run_chunk = |chunk: &mut [T], start: usize| {
            let mut pos = 0;
            while pos < chunk.len() {
                let flat = start + pos;
                let (row, col) = (flat / inner, flat % inner);
                let len = (inner - col).min(chunk.len() - pos);
                let mut offs = self.row_offsets(row, base);
                for k in 0..K {
                    offs[k] += col * inner_strides[k];
                }
                f(&mut chunk[pos..pos + len], offs, inner_strides);
                pos += len;
            }
        };
        if out.len() >= MAP_THRESHOLD {
            for_each_chunk(out, PAR_CHUNK, |i, chunk| run_chunk(chunk, i * PAR_CHUNK));
        } else {
            run_chunk(out, 0);
        }
    }
}

/// `out` (empty, with room for the shape's elements) filled with `f(a[i])` over the broadcast
/// shape `shape`, row-major: each element written once, with no fill before.
pub fn map_into<T: Copy + Sync, U: Send>(
    shape: &[usize],
    a: Src<'_, T>,
    out: &mut Vec<U>,
    f: impl Fn(T) -> U + Sync,
) {
    assert!(out.is_empty(), "map_into: the output is not empty");
    let n = super::part_numel(shape);
    let plan = MergedAxes::new(shape, [a.strides]);
    let dst = &mut out.spare_capacity_mut()[..n];
    plan.for_runs(dst, [a.offset], |dst, [oa], [sa]| match sa {
        1 => run_map(dst, &a.data[oa..oa + dst.len()], &f),
        0 => {
            let x = a.data[oa];
            for d in dst.iter_mut() {
                d.write(f(x));
            }
        }
        _ => {
            for (i, d) in dst.iter_mut().enumerate() {
                d.write(f(a.data[oa + i * sa]));
            }
        }
    });
    // SAFETY: for_runs hands every one of the first n slots to exactly one run, and each arm
    // writes every slot of its run (a panic in `f` unwinds before this, leaving `out` empty).
    unsafe { out.set_len(n) };
}

/// `out` (empty, with room for the shape's elements) filled with `f(a[i], b[i])` over the
/// broadcast shape `shape`, row-major: each element written once, with no fill before.
pub fn zip_into<T: Copy + Sync, U: Send>(
    shape: &[usize],
    a: Src<'_, T>,
    b: Src<'_, T>,
    out: &mut Vec<U>,
    f: impl Fn(T, T) -> U + Sync,
) {
    assert!(out.is_empty(), "zip_into: the output is not empty");
    let n = super::part_numel(shape);
    let plan = MergedAxes::new(shape, [a.strides, b.strides]);
    let dst = &mut out.spare_capacity_mut()[..n];
    plan.for_runs(dst, [a.offset, b.offset], |dst, [oa, ob], [sa, sb]| {
        let n = dst.len();
        match (sa, sb) {
            (1, 1) => run_zip(dst, &a.data[oa..oa + n], &b.data[ob..ob + n], &f),
            (1, 0) => {
                let y = b.data[ob];
                run_map(dst, &a.data[oa..oa + n], &|x| f(x, y));
            }
            (0, 1) => {
                let x = a.data[oa];
                run_map(dst, &b.data[ob..ob + n], &|y| f(x, y));
            }
            _ => {
                for (i, d) in dst.iter_mut().enumerate() {
                    d.write(f(a.data[oa + i * sa], b.data[ob + i * sb]));
                }
            }
        }
    });
    // SAFETY: for_runs hands every one of the first n slots to exactly one run, and each arm
    // writes every slot of its run (a panic in `f` unwinds before this, leaving `out` empty).
    unsafe { out.set_len(n) };
}

/// `out` (empty, with room for `a.len()`) filled with `f(a[i])`: each element written once,
/// with no fill before.
pub fn map_flat_into<T: Copy + Sync, U: Send>(
    a: &[T],
    out: &mut Vec<U>,
    f: impl Fn(T) -> U + Sync,
) {
    assert!(out.is_empty(), "map_flat_into: the output is not empty");
    let dst = &mut out.spare_capacity_mut()[..a.len()];
    if a.len() >= MAP_THRESHOLD {
        for_each_chunk(dst, PAR_CHUNK, |i, o| {
            run_map(o, &a[i * PAR_CHUNK..i * PAR_CHUNK + o.len()], &f)
        });
    } else {
        run_map(dst, a, &f);
    }
    // SAFETY: the chunks cover the first a.len() spare slots, and run_map wrote each (a
    // panic in `f` unwinds before this, leaving `out` empty).
    unsafe { out.set_len(a.len()) };
}

/// `out` (empty, with room for `a.len()`) filled with `f(a[i], b[i])` (`b` as long as `a`):
/// each element written once, with no fill before.
pub fn zip_flat_into<T: Copy + Sync, U: Send>(
    a: &[T],
    b: &[T],
    out: &mut Vec<U>,
    f: impl Fn(T, T) -> U + Sync,
) {
    assert!(
        out.is_empty() && a.len() == b.len(),
        "zip_flat_into: the output is not empty or the operands' lengths differ"
    );
    let dst = &mut out.spare_capacity_mut()[..a.len()];
    let run = |i: usize, o: &mut [MaybeUninit<U>]| {
        let start = i * PAR_CHUNK;
        let end = start + o.len();
        run_zip(o, &a[start..end], &b[start..end], &f);
    };
    if a.len() >= MAP_THRESHOLD {
        for_each_chunk(dst, PAR_CHUNK, run);
    } else {
        run(0, dst);
    }
    // SAFETY: the chunks cover the first a.len() spare slots, and run_zip wrote each (a
    // panic in `f` unwinds before this, leaving `out` empty).
    unsafe { out.set_len(a.len()) };
}

/// `out` (empty, with room for `n`) filled with `n` copies of `value`, on the thread pool when
/// large: a fresh tensor of ones is written at the speed of both cores, not one.
pub fn fill_into<T: Copy + Send + Sync>(out: &mut Vec<T>, n: usize, value: T) {
    assert!(out.is_empty(), "fill_into: the output is not empty");
    let dst = &mut out.spare_capacity_mut()[..n];
    let fill = |o: &mut [MaybeUninit<T>]| o.iter_mut().for_each(|d| _ = d.write(value));
    if n >= MAP_THRESHOLD {
        for_each_chunk(dst, PAR_CHUNK, |_, o| fill(o));
    } else {
        fill(dst);
    }
    // SAFETY: the chunks cover the first n spare slots and each was written.
    unsafe { out.set_len(n) };
}

/// `dst[i] = f(xs[i])` into slots not yet written: the innermost loop of the unary kernels
/// (and of the binary ones with one broadcast scalar), compiled for each instruction set and
/// chosen at run time.
#[isa_dispatch]
fn run_map<T: Copy, U>(dst: &mut [MaybeUninit<U>], xs: &[T], f: &impl Fn(T) -> U) {
    for (d, &x) in dst.iter_mut().zip(xs) {
        d.write(f(x));
    }
}

/// `dst[i] = f(xa[i], xb[i])` into slots not yet written: the innermost loop of the binary
/// kernels.
#[isa_dispatch]
fn run_zip<T: Copy, U>(dst: &mut [MaybeUninit<U>], xa: &[T], xb: &[T], f: &impl Fn(T, T) -> U) {
    for ((d, &x), &y) in dst.iter_mut().zip(xa).zip(xb) {
        d.write(f(x, y));
    }
}

/// `src` with the slice function `f` applied to it (such as `Float::tanh_in_place`), on the
/// thread pool when large: in place if `src` is already a copy of its own, else each chunk is
/// copied and transformed while it is in cache (rather than the whole copied first on one
/// thread).
pub fn applied<T: Copy + Send + Sync>(src: Cow<'_, [T]>, f: impl Fn(&mut [T]) + Sync) -> Vec<T> {
    match src {
        Cow::Owned(mut own) => {
            apply_chunks(&mut own, |_, t| f(t));
            own
        }
        Cow::Borrowed(src) => applied_copy_with(src, src, |_, t| f(t)),
    }
}

/// `ts` with `f(xs_part, ts_part)` applied to matching chunks (`xs` as long as `ts`): a slice
/// function of two operands (`Float::gelu_backward`), as [`applied`].
pub fn applied_with<T: Copy + Send + Sync>(
    xs: &[T],
    ts: Cow<'_, [T]>,
    f: impl Fn(&[T], &mut [T]) + Sync,
) -> Vec<T> {
    assert_eq!(xs.len(), ts.len(), "applied_with: lengths differ");
    match ts {
        Cow::Owned(mut own) => {
            apply_chunks(&mut own, |i, t| f(&xs[i * PAR_CHUNK..][..t.len()], t));
            own
        }
        Cow::Borrowed(ts) => applied_copy_with(xs, ts, f),
    }
}

/// `f(i, chunk)` over the `PAR_CHUNK`-element chunks of `xs`, on the thread pool when large.
fn apply_chunks<T: Send>(xs: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    if xs.len() >= MAP_THRESHOLD {
        for_each_chunk(xs, PAR_CHUNK, f);
    } else {
        f(0, xs);
    }
}

/// Elements copied and transformed at a time by [`applied_copy_with`] (8 KiB of f64).
const L1_PIECE: usize = 1024;

/// A copy of `ts` with `f(xs_part, ts_part)` applied to matching chunks, each copied into
/// fresh memory and transformed piece by piece.
fn applied_copy_with<T: Copy + Send + Sync>(
    xs: &[T],
    ts: &[T],
    f: impl Fn(&[T], &mut [T]) + Sync,
) -> Vec<T> {
    let mut out = Vec::with_capacity(ts.len());
    let dst = &mut out.spare_capacity_mut()[..ts.len()];
    apply_chunks(dst, |i, dst| {
        // Piece by piece small enough to stay in L1 between the copy and `f`, so that `f`
        // reads what the copy just wrote instead of streaming the chunk in a second time.
        for (j, dst) in dst.chunks_mut(L1_PIECE).enumerate() {
            let start = i * PAR_CHUNK + j * L1_PIECE;
            for (d, &t) in dst.iter_mut().zip(&ts[start..]) {
                d.write(t);
            }
            // SAFETY: every element of `dst` was written just above, and MaybeUninit<T> has
            // T's layout.
            let dst = unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [T]) };
            f(&xs[start..][..dst.len()], dst);
        }
    });
    // SAFETY: the chunks cover the first ts.len() spare slots and each was written (a panic
    // in `f` unwinds before this, leaving `out` empty).
    unsafe { out.set_len(ts.len()) };
    out
}

/// `out[i] = f(a[i], b[i], c[i])` over the broadcast shape `shape` (used by `where_cond`).
pub fn zip3<T: Copy + Sync, U: Send>(
    shape: &[usize],
    a: Src<'_, T>,
    b: Src<'_, T>,
    c: Src<'_, T>,
    out: &mut [U],
    f: impl Fn(T, T, T) -> U + Sync,
) {
    let plan = MergedAxes::new(shape, [a.strides, b.strides, c.strides]);
    plan.for_runs(
        out,
        [a.offset, b.offset, c.offset],
        |dst, [oa, ob, oc], [sa, sb, sc]| {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = f(
                    a.data[oa + i * sa],
                    b.data[ob + i * sb],
                    c.data[oc + i * sc],
                );
            }
        },
    );
}

/// Copies a strided operand into contiguous row-major order, into the empty `out` (with
/// room for the shape's elements).
pub fn gather<T: Copy + Send + Sync>(shape: &[usize], a: Src<'_, T>, out: &mut Vec<T>) {
    map_into(shape, a, out, |x| x);
}

/// Copies the row-major `src` (of `shape`) into the block of the row-major `out` (of
/// `out_shape`) that starts at `start` along every axis: one contiguous run per row.
pub fn copy_into_block<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    out: &mut [T],
    out_shape: &[usize],
    start: &[usize],
) {
    for_block_rows(src, shape, out, out_shape, start, |o, s| {
        o.copy_from_slice(s)
    });
}

/// Adds the row-major `src` (of `shape`) into the block of the row-major `out` (of
/// `out_shape`) that starts at `start` along every axis.
pub fn add_into_block<T: Float>(
    src: &[T],
    shape: &[usize],
    out: &mut [T],
    out_shape: &[usize],
    start: &[usize],
) {
    for_block_rows(src, shape, out, out_shape, start, |o, s| {
        o.iter_mut().zip(s).for_each(|(o, &s)| *o += s);
    });
}

/// `f(out_row, src_row)` for each row of the row-major `src` (of `shape`) with the run of
/// the row-major `out` (of `out_shape`) it lands on, in the block from `start`. A large block
/// goes in groups of rows on all threads: the runs lie in `out` in the rows' order, so each
/// group's stretch of `out` is its own.
fn for_block_rows<T: Send + Sync>(
    src: &[T],
    shape: &[usize],
    out: &mut [T],
    out_shape: &[usize],
    start: &[usize],
    f: impl Fn(&mut [T], &[T]) + Sync,
) {
    let Some((&inner, outer_axes)) = shape.split_last() else {
        f(&mut out[..1], &src[..1]);
        return;
    };
    if src.is_empty() {
        return;
    }
    let strides = super::contiguous_strides(out_shape);
    let mut idx = vec![0usize; outer_axes.len()];
    let mut at = Vec::with_capacity(src.len() / inner);
    for _ in 0..src.len() / inner {
        at.push(
            idx.iter()
                .zip(start)
                .zip(&strides)
                .map(|((&i, &s0), &st)| (i + s0) * st)
                .sum::<usize>()
                + start[outer_axes.len()],
        );
        // The next row's index, last axis fastest.
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < outer_axes[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    let group = if src.len() < MAP_THRESHOLD {
        at.len()
    } else {
        PAR_CHUNK.div_ceil(inner)
    };
    // Each group's rows with the stretch of `out` from its first run to the next group's.
    let mut groups = Vec::new();
    let mut rest = &mut out[at[0]..];
    for (g, rows) in at.chunks(group).enumerate() {
        let end = at
            .get((g + 1) * group)
            .map_or(rest.len(), |&next| next - rows[0]);
        let (here, tail) = std::mem::take(&mut rest).split_at_mut(end);
        rest = tail;
        groups.push((g * group, rows, here));
    }
    let run_group = |(first, rows, here): (usize, &[usize], &mut [T])| {
        for (r, &a) in rows.iter().enumerate() {
            let a = a - rows[0];
            f(
                &mut here[a..a + inner],
                &src[(first + r) * inner..][..inner],
            );
        }
    };
    if groups.len() == 1 {
        groups.into_iter().for_each(run_group);
    } else {
        super::parallel::run_tasks(groups, run_group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_added_where_they_lie() {
        // A [2, 3] block at (1, 2) of a [3, 6] matrix, a run of a vector, a 0-d tensor, an empty
        // block.
        let mut out: Vec<f64> = (0..18).map(f64::from).collect();
        add_into_block(
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &[2, 3],
            &mut out,
            &[3, 6],
            &[1, 2],
        );
        let mut want: Vec<f64> = (0..18).map(f64::from).collect();
        for (at, add) in [
            (8, 1.0),
            (9, 2.0),
            (10, 3.0),
            (14, 4.0),
            (15, 5.0),
            (16, 6.0),
        ] {
            want[at] += add;
        }
        assert_eq!(out, want);
        let mut v = vec![1.0f32; 5];
        add_into_block(&[2.0, 3.0], &[2], &mut v, &[5], &[3]);
        assert_eq!(v, [1.0, 1.0, 1.0, 3.0, 4.0]);
        copy_into_block(&[7.0f32], &[], &mut v, &[], &[]);
        assert_eq!(v[0], 7.0);
        let mut m = vec![1.0f32; 6];
        add_into_block(&[], &[2, 0], &mut m, &[2, 3], &[0, 1]);
        assert_eq!(m, [1.0; 6]);
    }

    #[test]
    fn large_blocks_go_in_groups_of_rows_each_to_its_place() {
        // A [3, 280, 40] block at (1, 20, 15) of a [5, 300, 70] tensor: above the threshold,
        // in several groups of rows, some of which straddle the first axis.
        let (shape, out_shape, start) = ([3, 280, 40], [5, 300, 70], [1, 20, 15]);
        let src: Vec<f64> = (0..3 * 280 * 40).map(|i| i as f64).collect();
        assert!(src.len() >= MAP_THRESHOLD && src.len() > 2 * PAR_CHUNK);
        let base: Vec<f64> = (0..5 * 300 * 70).map(|i| -(i as f64)).collect();
        let (mut added, mut copied) = (base.clone(), base.clone());
        for (i, &v) in src.iter().enumerate() {
            let (a, b, c) = (i / (280 * 40), i / 40 % 280, i % 40);
            let at = ((a + 1) * 300 + b + 20) * 70 + c + 15;
            added[at] += v;
            copied[at] = v;
        }
        let mut out = base.clone();
        add_into_block(&src, &shape, &mut out, &out_shape, &start);
        assert_eq!(out, added);
        let mut out = base;
        copy_into_block(&src, &shape, &mut out, &out_shape, &start);
        assert_eq!(out, copied);
    }

    #[test]
    fn applied_copies_pair_each_chunk_with_its_own_operand() {
        // Below the threshold, at it, and over several chunks with a short last one.
        for n in [0, 5, MAP_THRESHOLD, 3 * PAR_CHUNK + 17] {
            let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
            let ts: Vec<f64> = (0..n).map(|i| (i % 7) as f64).collect();
            let want: Vec<f64> = xs.iter().zip(&ts).map(|(&x, &t)| 2.0 * t + x).collect();
            let twice: Vec<f64> = ts.iter().map(|t| 2.0 * t).collect();
            // Borrowed (copied chunk by chunk) and owned (transformed in place).
            for src in [Cow::Borrowed(&ts[..]), Cow::Owned(ts.clone())] {
                let got = applied_with(&xs, src.clone(), |x, t| {
                    t.iter_mut().zip(x).for_each(|(t, &x)| *t = 2.0 * *t + x)
                });
                assert_eq!(got, want, "n = {n}");
                let doubled = applied(src, |t| t.iter_mut().for_each(|t| *t *= 2.0));
                assert_eq!(doubled, twice, "n = {n}");
            }
        }
    }
}
