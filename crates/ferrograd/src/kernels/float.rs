//! The numeric element type of every kernel (f32 or f64).

use std::fmt;

pub trait Float:
    num_traits::Float
    + Send
    + Sync
    + Default
    + fmt::Debug
    + fmt::Display
    + std::iter::Sum
    + std::ops::AddAssign
    + 'static
{
    fn from_f64(v: f64) -> Self;
    fn as_f64(self) -> f64;
    fn erf(self) -> Self;
    /// `c = alpha * a @ b + beta * c` on strided matrices.
    ///
    /// # Safety
    /// Every element addressed through the pointers and strides must be in bounds, and `c` must
    /// not alias `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

impl Float for f32 {
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn as_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn erf(self) -> Self {
        libm::erff(self)
    }
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        beta: f32,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract of `gemm_raw`: the caller checked bounds and aliasing.
        unsafe { matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
    }
}

impl Float for f64 {
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline]
    fn as_f64(self) -> f64 {
        self
    }
    #[inline]
    fn erf(self) -> Self {
        libm::erf(self)
    }
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        beta: f64,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract of `gemm_raw`: the caller checked bounds and aliasing.
        unsafe { matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
    }
}
