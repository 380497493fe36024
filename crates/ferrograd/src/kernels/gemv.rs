//! Matrix products with a lone row or column: a dot product per output when `b` is one
//! column, a sum of scaled rows of `b` when `a` is one row. The blocked kernels would pad the
//! lone row or column to a whole panel (and pack it): several times the useful work and
//! memory traffic, for what is a single pass over the other operand.

use std::mem::MaybeUninit;

use ferrograd_derive::isa_dispatch;

use super::matmul::MatRef;
use super::parallel::for_each_chunk;
use super::{Float, PAR_THRESHOLD};

/// Columns of the output a task of the row-vector product sums at a time (its sums stay in
/// L1 while it walks the rows of `b`).
const COLUMN_BLOCK: usize = 1024;

/// Whether [`vector_product`] serves an `m × n` output.
pub(super) fn applies(m: usize, n: usize) -> bool {
    (m == 1 || n == 1) && m * n > 0
}

/// `out = a @ b` where `a` has one row or `b` one column (see [`applies`]); every element of
/// `out` is written. The operands have been checked to be in bounds.
pub(super) fn vector_product<T: Float>(
    a: &MatRef<'_, T>,
    b: &MatRef<'_, T>,
    out: &mut [MaybeUninit<T>],
) {
    if b.cols == 1 {
        rows_dot(a, &row(&b.t(), 0), out);
    } else {
        weighted_rows(b, &row(a, 0), out);
    }
}

/// Row `i` of `m`, contiguous.
fn row<T: Float>(m: &MatRef<'_, T>, i: usize) -> Vec<T> {
    (0..m.cols)
        .map(|j| m.data[m.offset + i * m.rs + j * m.cs])
        .collect()
}

/// `out[i] = a[i, :] · x`: a dot product per row (a strided row copied first), rows on the
/// thread pool when `a` is large; a column-major `a` as the sum of its scaled columns.
fn rows_dot<T: Float>(a: &MatRef<'_, T>, x: &[T], out: &mut [MaybeUninit<T>]) {
    if a.cs != 1 && a.rs == 1 {
        return weighted_rows(&a.t(), x, out);
    }
    let k = a.cols;
    let one = |(i, o): (usize, &mut MaybeUninit<T>)| {
        let at = a.offset + i * a.rs;
        o.write(if a.cs == 1 {
            dot(&a.data[at..][..k], x)
        } else {
            dot(&row(a, i), x)
        });
    };
    if a.rows * k >= PAR_THRESHOLD {
        // A row at a time: `for_each_chunk` hands them out in runs, a few per thread.
        for_each_chunk(out, 1, |i, o| one((i, &mut o[0])));
    } else {
        out.iter_mut().enumerate().for_each(one);
    }
}

/// `out[j] = Σ_p y[p] · b[p, j]`: rows of `b` scaled and added block by block of columns
/// (blocks on the thread pool when `b` is large); a column-major `b` as a dot product per
/// column, and a strided one column by column copied.
fn weighted_rows<T: Float>(b: &MatRef<'_, T>, y: &[T], out: &mut [MaybeUninit<T>]) {
    if b.cs != 1 {
        return if b.rs == 1 {
            rows_dot(&b.t(), y, out)
        } else {
            let columns = b.t();
            for (j, o) in out.iter_mut().enumerate() {
                o.write(dot(&row(&columns, j), y));
            }
        };
    }
    let block = |(q, o): (usize, &mut [MaybeUninit<T>])| {
        let j0 = q * COLUMN_BLOCK;
        let mut acc = vec![T::zero(); o.len()];
        for (p, &w) in y.iter().enumerate() {
            axpy(&mut acc, w, &b.data[b.offset + p * b.rs + j0..][..o.len()]);
        }
        for (o, v) in o.iter_mut().zip(acc) {
            o.write(v);
        }
    };
    if b.rows * b.cols >= PAR_THRESHOLD {
        for_each_chunk(out, COLUMN_BLOCK, |q, o| block((q, o)));
    } else {
        out.chunks_mut(COLUMN_BLOCK).enumerate().for_each(block);
    }
}

/// Σ a[i]·b[i], eight accumulators.
#[isa_dispatch]
pub(crate) fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    dot_inline(a, b)
}

/// [`dot`] for a caller that is itself compiled per instruction set (inlined there, so short
/// rows pay no dispatch).
#[inline(always)]
pub(crate) fn dot_inline<T: Float>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (a, b) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += a[i] * b[i];
        }
    }
    let head = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    ar.iter().zip(br).fold(head, |s, (&a, &b)| s + a * b)
}

/// `acc += w · x`.
#[isa_dispatch]
pub(crate) fn axpy<T: Float>(acc: &mut [T], w: T, x: &[T]) {
    axpy_inline(acc, w, x)
}

/// [`axpy`] for a caller that is itself compiled per instruction set.
#[inline(always)]
pub(crate) fn axpy_inline<T: Float>(acc: &mut [T], w: T, x: &[T]) {
    for (a, &x) in acc.iter_mut().zip(x) {
        *a += w * x;
    }
}
