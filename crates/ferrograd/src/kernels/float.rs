//! The numeric element type of every kernel (f32 or f64).

use std::fmt;

use super::matmul::MatRef;

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
    /// e^x of every element, in place (vectorised for f32).
    fn exp_in_place(xs: &mut [Self]);
    /// The logistic sigmoid of every element, in place (vectorised for f32).
    fn sigmoid_in_place(xs: &mut [Self]);
    /// tanh of every element, in place (vectorised for f32).
    fn tanh_in_place(xs: &mut [Self]);
    /// GELU, x·Φ(x), of every element, in place (vectorised for f32).
    fn gelu_in_place(xs: &mut [Self]);
    /// `ts[i] ← ts[i]·GELU′(xs[i])`, GELU′(x) = Φ(x) + x·φ(x) (vectorised for f32).
    fn gelu_backward(xs: &[Self], ts: &mut [Self]);
    /// `out = a @ b` with `out` row-major `[a.rows, b.cols]`, then `row` added to every row
    /// of it when given.
    ///
    /// # Safety
    /// `a.cols == b.rows`, `out.len() == a.rows * b.cols`, all three non-empty, `row` (if
    /// given) `b.cols` long, and every element addressed through `a` and `b` in bounds (as
    /// `matmul::gemm` checks).
    unsafe fn gemm_unchecked(
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        row: Option<&[Self]>,
        out: &mut [Self],
    );
    /// The slice itself when the type is f32 (for kernels written for f32 alone).
    fn as_f32(xs: &[Self]) -> Option<&[f32]>;
    /// The slice itself when the type is f32.
    fn as_f32_mut(xs: &mut [Self]) -> Option<&mut [f32]>;
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
    fn exp_in_place(xs: &mut [Self]) {
        super::activation::exp_f32(xs);
    }
    fn sigmoid_in_place(xs: &mut [Self]) {
        super::activation::sigmoid_f32(xs);
    }
    fn tanh_in_place(xs: &mut [Self]) {
        super::activation::tanh_f32(xs);
    }
    fn gelu_in_place(xs: &mut [Self]) {
        super::activation::gelu_f32(xs);
    }
    fn gelu_backward(xs: &[Self], ts: &mut [Self]) {
        super::activation::gelu_backward_f32(xs, ts);
    }
    unsafe fn gemm_unchecked(
        a: MatRef<'_, f32>,
        b: MatRef<'_, f32>,
        row: Option<&[f32]>,
        out: &mut [f32],
    ) {
        if super::sgemm::available() {
            // SAFETY: forwarded contract; the AVX check was just made.
            return unsafe { super::sgemm::gemm(a, b, row, out) };
        }
        // SAFETY: forwarded contract.
        unsafe { portable_gemm(matrixmultiply::sgemm, a, b, row, out) }
    }
    fn as_f32(xs: &[Self]) -> Option<&[f32]> {
        Some(xs)
    }
    fn as_f32_mut(xs: &mut [Self]) -> Option<&mut [f32]> {
        Some(xs)
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
    fn exp_in_place(xs: &mut [Self]) {
        xs.iter_mut().for_each(|x| *x = x.exp());
    }
    fn sigmoid_in_place(xs: &mut [Self]) {
        for x in xs {
            let e = (-x.abs()).exp();
            let s = 1.0 / (1.0 + e);
            *x = if *x >= 0.0 { s } else { e * s };
        }
    }
    fn tanh_in_place(xs: &mut [Self]) {
        xs.iter_mut().for_each(|x| *x = x.tanh());
    }
    fn gelu_in_place(xs: &mut [Self]) {
        xs.iter_mut()
            .for_each(|x| *x = *x * 0.5 * libm::erfc(-*x * std::f64::consts::FRAC_1_SQRT_2));
    }
    fn gelu_backward(xs: &[Self], ts: &mut [Self]) {
        const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
        for (t, &x) in ts.iter_mut().zip(xs) {
            let cdf = 0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2);
            *t *= cdf + x * FRAC_1_SQRT_2PI * (-0.5 * x * x).exp();
        }
    }
    unsafe fn gemm_unchecked(
        a: MatRef<'_, f64>,
        b: MatRef<'_, f64>,
        row: Option<&[f64]>,
        out: &mut [f64],
    ) {
        // SAFETY: forwarded contract.
        unsafe { portable_gemm(matrixmultiply::dgemm, a, b, row, out) }
    }
    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

/// `matrixmultiply`'s signature, shared by its f32 and f64 products.
type MmGemm<T> = unsafe fn(
    usize,
    usize,
    usize,
    T,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    *mut T,
    isize,
    isize,
);

/// `out = a @ b (+ row)` by `matrixmultiply` (`gemm` is its `sgemm` or `dgemm`), the row
/// added afterwards.
///
/// # Safety
/// The shapes fit (`a.cols == b.rows`, `out.len() == a.rows * b.cols`, `row` `b.cols` long)
/// and every element `a` and `b` address lies inside their slices.
unsafe fn portable_gemm<T: Float>(
    gemm: MmGemm<T>,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    row: Option<&[T]>,
    out: &mut [T],
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    // SAFETY: the caller guarantees the shapes and bounds; `out` is an exclusive borrow, so it
    // aliases neither input.
    unsafe {
        gemm(
            m,
            k,
            n,
            T::one(),
            a.ptr(),
            a.rs as isize,
            a.cs as isize,
            b.ptr(),
            b.rs as isize,
            b.cs as isize,
            T::zero(),
            out.as_mut_ptr(),
            n as isize,
            1,
        )
    }
    if let Some(row) = row {
        super::matmul::add_row(out, row);
    }
}
