//! Matrix multiply through `matrixmultiply` (measured faster than the `gemm` crate on this
//! class of machine: see `examples/bench_kernels.rs` and the README).

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
        "gemm: out of bounds"
    );
    // SAFETY: the asserts above keep every addressed element of `a` and `b` in bounds; `out`
    // is an exclusive borrow of exactly m * n elements, so it aliases neither input.
    unsafe {
        T::gemm_raw(
            m,
            k,
            n,
            a.data.as_ptr().add(a.offset),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr().add(b.offset),
            b.rs as isize,
            b.cs as isize,
            T::zero(),
            out.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}
