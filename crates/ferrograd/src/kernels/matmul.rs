//! Matrix multiply. f32 on CPUs with AVX2 or AVX-512 runs our packed kernel (`sgemm`),
//! measured faster than both `matrixmultiply` and the `gemm` crate; f64, and f32 on the
//! portable path, run `matrixmultiply` (see `examples/bench_matmul_blas.rs` and the README).

use std::mem::MaybeUninit;

use ferrograd_derive::isa_dispatch;

use super::parallel::{run_tasks, threads};
use super::Float;

/// A strided matrix inside a slice: element (i, j) is `data[offset + i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a, T> {
    pub data: &'a [T],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<T> MatRef<'_, T> {
    /// Whether every element this matrix addresses is inside `data` (an empty one addresses
    /// none).
    fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1)
            .checked_mul(self.rs)
            .zip((self.cols - 1).checked_mul(self.cs))
            .and_then(|(r, c)| r.checked_add(c)?.checked_add(self.offset));
        last.is_some_and(|last| last < self.data.len())
    }

    /// Columns `j0..j0 + len` of this matrix.
    pub(crate) fn sub_cols(&self, j0: usize, len: usize) -> Self {
        MatRef {
            offset: self.offset + j0 * self.cs,
            cols: len,
            ..*self
        }
    }

    /// Rows `i0..i0 + len` of this matrix.
    pub(crate) fn sub_rows(&self, i0: usize, len: usize) -> Self {
        MatRef {
            offset: self.offset + i0 * self.rs,
            rows: len,
            ..*self
        }
    }

    /// The transpose, as a view of the same elements.
    pub(crate) fn t(&self) -> Self {
        MatRef {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..*self
        }
    }

    /// Pointer to element (0, 0).
    pub(crate) fn ptr(&self) -> *const T {
        self.data[self.offset..].as_ptr()
    }
}

/// The two operands of one product.
pub type Pair<'a, T> = (MatRef<'a, T>, MatRef<'a, T>);

/// Products of `pairs` (all `m × k` by `k × n`) into one new row-major buffer of
/// `pairs.len()` blocks of `m × n`. Small products of a batch run on separate threads.
pub fn gemm_batch<T: Float>(pairs: &[Pair<'_, T>], m: usize, n: usize) -> Vec<T> {
    let mut out = Vec::new();
    gemm_batch_append(pairs, m, n, &mut out);
    out
}

/// [`gemm_batch`] appending its blocks to `out` (which may already hold earlier ones, so
/// that a batch computed in chunks lands in one buffer without a copy).
pub fn gemm_batch_append<T: Float>(pairs: &[Pair<'_, T>], m: usize, n: usize, out: &mut Vec<T>) {
    batch_append(pairs, (m, n), None, out);
}

/// [`gemm_batch_append`], with `row` (`n` long) added to every row of every block.
fn batch_append<T: Float>(
    pairs: &[Pair<'_, T>],
    (m, n): (usize, usize),
    row: Option<&[T]>,
    out: &mut Vec<T>,
) {
    let block = m.checked_mul(n).expect("gemm: output size overflows");
    let total = block
        .checked_mul(pairs.len())
        .expect("gemm: output size overflows");
    // A refused allocation unwinds with the sizes (as `tensor::filled` does) instead of
    // aborting the process.
    if out.try_reserve(total).is_err() {
        panic!(
            "matmul: cannot allocate {total} elements for {} products of {m} x {n}",
            pairs.len()
        );
    }
    super::alloc::advise_huge_pages(out);
    if block > 0 {
        let spare = &mut out.spare_capacity_mut()[..total];
        let run =
            |(c, pair): (&mut [MaybeUninit<T>], &Pair<'_, T>)| gemm_uninit(pair.0, pair.1, row, c);
        let small = pairs
            .first()
            .is_some_and(|(a, _)| a.rows.saturating_mul(a.cols).saturating_mul(n) < SMALL_GEMM);
        if pairs.len() > 1 && small {
            // A few groups of products per thread: one task per product would cost more in
            // scheduling than a small product's arithmetic.
            let per = pairs.len().div_ceil(threads() * GROUPS_PER_THREAD);
            let groups = spare.chunks_mut(block * per).zip(pairs.chunks(per));
            run_tasks(groups.collect(), |(c, ps)| {
                c.chunks_mut(block).zip(ps).for_each(run);
            });
        } else {
            spare.chunks_mut(block).zip(pairs).for_each(run);
        }
    }
    let len = out.len() + total;
    // SAFETY: `gemm_uninit` wrote every element of each of the `pairs.len()` blocks after the
    // old length (and there is nothing to write when a block is empty); `reserve` made room.
    unsafe { out.set_len(len) };
}

/// `out = a @ b` into an initialised buffer (row-major `[a.rows, b.cols]`); a product too
/// small to share between threads runs on the calling thread (kernels that parallelise
/// around many small products call this from their workers).
pub fn gemm_into<T: Float>(a: MatRef<'_, T>, b: MatRef<'_, T>, out: &mut [T]) {
    // SAFETY: MaybeUninit<T> has T's layout; writing through it into initialised memory is
    // sound, and `gemm_uninit` writes every element.
    let out = unsafe {
        std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<MaybeUninit<T>>(), out.len())
    };
    gemm_uninit(a, b, None, out)
}

/// Below this many multiply-adds per matrix, a batch runs its matrices on separate threads
/// instead of threading inside each product.
const SMALL_GEMM: usize = 1 << 20;

/// Groups of a batch's small products per thread (the last to finish waits for one group).
const GROUPS_PER_THREAD: usize = 4;

/// At most this many multiply-adds, a product is a direct loop over rows ([`gemm_tiny`]):
/// packing and the packed kernels' setup cost more than such a product's arithmetic.
const TINY_GEMM: usize = 1 << 12;

/// `a @ b + row`, `row` added to every row of the product (a layer's bias), appended to `out`
/// as a row-major `[a.rows, b.cols]` block. Where the own f32 kernel runs, the row joins each
/// row panel of the product once its last k block is stored (no second pass over the
/// output); every path rounds as the product followed by the addition would.
pub fn gemm_plus_row_append<T: Float>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    row: &[T],
    out: &mut Vec<T>,
) {
    assert_eq!(row.len(), b.cols, "gemm: row length");
    batch_append(&[(a, b)], (a.rows, b.cols), Some(row), out);
}

/// `row` added to each `row.len()`-long row of `out` (to one row of a panel of the product
/// when `out` is as long as `row`), compiled for each kernel path.
#[isa_dispatch]
pub(super) fn add_row<T: Float>(out: &mut [T], row: &[T]) {
    for r in out.chunks_exact_mut(row.len()) {
        r.iter_mut().zip(row).for_each(|(o, &b)| *o += b);
    }
}

/// `out = a @ b (+ row)` into uninitialised memory: every element of `out` is written.
fn gemm_uninit<T: Float>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    row: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
) {
    if out.is_empty() {
        return;
    }
    if a.cols == 0 {
        out.iter_mut().for_each(|v| {
            v.write(T::zero());
        });
    } else {
        check(&a, &b, out.len());
        if super::gemv::applies(a.rows, b.cols) {
            super::gemv::vector_product(&a, &b, out);
        } else if a.rows.saturating_mul(a.cols).saturating_mul(b.cols) <= TINY_GEMM {
            gemm_tiny(&a, &b, out);
        } else {
            // SAFETY: checked above (`row`, when given, by `gemm_plus_row_append`); both
            // kernels write every element of the output without reading it first
            // (matrixmultiply with beta = 0, sgemm's first k block stores), so it may be
            // uninitialised. MaybeUninit<T> has T's layout. They add the row themselves.
            return unsafe {
                T::gemm_unchecked(
                    a,
                    b,
                    row,
                    std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<T>(), out.len()),
                )
            };
        }
    }
    if let Some(row) = row {
        // SAFETY: every element was written just above; MaybeUninit<T> has T's layout.
        let out =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<T>(), out.len()) };
        add_row(out, row);
    }
}

/// `out = a @ b` for products of a few thousand multiply-adds (the many small products of
/// attention heads and per-sample gradients), by blocks of 16, 8, 4 or 1 columns whose sums
/// stay in registers ([`tiny_cols`]). Compiled for each instruction set, chosen at run time.
/// A `b` with strided rows (a transposed view, as in `x @ xᵀ`) of at most this many elements
/// is first copied into row-major order on the stack, so that its rows are read as vectors.
const PACKED_TINY: usize = 1024;

#[isa_dispatch]
fn gemm_tiny<T: Float>(a: &MatRef<'_, T>, b: &MatRef<'_, T>, out: &mut [MaybeUninit<T>]) {
    let len = b.rows * b.cols;
    if b.cs == 1 || len > PACKED_TINY {
        return tiny_blocks(a, b, out);
    }
    let mut buf = [MaybeUninit::<T>::uninit(); PACKED_TINY];
    for (p, row) in buf[..len].chunks_exact_mut(b.cols).enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            v.write(b.data[b.offset + p * b.rs + j * b.cs]);
        }
    }
    // SAFETY: the first `len` elements were written just above; MaybeUninit<T> has T's
    // layout.
    let data = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<T>(), len) };
    let packed = MatRef {
        data,
        offset: 0,
        rs: b.cols,
        cs: 1,
        ..*b
    };
    tiny_blocks(a, &packed, out);
}

/// [`gemm_tiny`]'s column blocks, widest first.
#[inline(always)]
fn tiny_blocks<T: Float>(a: &MatRef<'_, T>, b: &MatRef<'_, T>, out: &mut [MaybeUninit<T>]) {
    let mut j0 = 0;
    while j0 < b.cols {
        j0 += match b.cols - j0 {
            16.. => tiny_cols::<T, 16>(a, b, j0, out),
            8.. => tiny_cols::<T, 8>(a, b, j0, out),
            4.. => tiny_cols::<T, 4>(a, b, j0, out),
            _ => tiny_cols::<T, 1>(a, b, j0, out),
        };
    }
}

/// Columns `j0..j0 + N` of `a @ b` into the row-major `out`, each row's `N` sums in a
/// fixed-size array (registers) while `a`'s row is read once; returns `N`. (Two rows at a
/// time, each row of `b` read once for both, measured slower.)
#[inline(always)]
fn tiny_cols<T: Float, const N: usize>(
    a: &MatRef<'_, T>,
    b: &MatRef<'_, T>,
    j0: usize,
    out: &mut [MaybeUninit<T>],
) -> usize {
    let n = b.cols;
    for i in 0..a.rows {
        let mut acc = [T::zero(); N];
        for p in 0..a.cols {
            let x = a.data[a.offset + i * a.rs + p * a.cs];
            let start = b.offset + p * b.rs + j0 * b.cs;
            if b.cs == 1 {
                let row: &[T; N] = b.data[start..start + N].try_into().expect("N columns");
                for (s, &y) in acc.iter_mut().zip(row) {
                    *s += x * y;
                }
            } else {
                for (j, s) in acc.iter_mut().enumerate() {
                    *s += x * b.data[start + j * b.cs];
                }
            }
        }
        for (o, v) in out[i * n + j0..][..N].iter_mut().zip(acc) {
            o.write(v);
        }
    }
    N
}

fn check<T>(a: &MatRef<'_, T>, b: &MatRef<'_, T>, out_len: usize) {
    assert_eq!(a.cols, b.rows, "gemm: inner dimensions differ");
    assert_eq!(
        Some(out_len),
        a.rows.checked_mul(b.cols),
        "gemm: output length"
    );
    assert!(
        a.in_bounds() && b.in_bounds(),
        "gemm: operand out of bounds"
    );
}
