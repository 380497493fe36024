//! Matrix multiply. f32 on CPUs with AVX-512 runs our packed kernel (`sgemm`), measured
//! faster than both `matrixmultiply` and the `gemm` crate here; f64, and f32 elsewhere, run
//! `matrixmultiply` (see `examples/bench_kernels.rs` and the README).

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
    fn last_index(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.offset;
        }
        self.offset + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs
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

    /// Pointer to element (0, 0).
    pub(crate) fn ptr(&self) -> *const T {
        self.data[self.offset..].as_ptr()
    }
}

/// `out = a @ b` where `out` is a contiguous row-major `[a.rows, b.cols]` block.
pub fn gemm<T: Float>(a: MatRef<'_, T>, b: MatRef<'_, T>, out: &mut [T]) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "gemm: inner dimensions differ");
    assert_eq!(out.len(), m * n, "gemm: output length");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.iter_mut().for_each(|v| *v = T::zero());
        return;
    }
    assert!(
        a.last_index() < a.data.len() && b.last_index() < b.data.len(),
        "gemm: operand out of bounds"
    );
    // SAFETY: shapes, emptiness and bounds were checked just above.
    unsafe { T::gemm_unchecked(a, b, out) }
}
