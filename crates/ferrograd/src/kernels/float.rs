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
    /// Hyperbolic tangent. f32 goes through one f64 `exp` (glibc's `tanhf` goes through
    /// `expm1f`, several times slower), within one unit in the last place of the exact value.
    fn tanh_fast(self) -> Self;
    /// `out = a @ b` with `out` row-major `[a.rows, b.cols]`.
    ///
    /// # Safety
    /// `a.cols == b.rows`, `out.len() == a.rows * b.cols`, all three non-empty, and every
    /// element addressed through `a` and `b` in bounds (as `matmul::gemm` checks).
    unsafe fn gemm_unchecked(a: MatRef<'_, Self>, b: MatRef<'_, Self>, out: &mut [Self]);
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
    #[inline]
    fn tanh_fast(self) -> Self {
        let a = self.abs();
        if a < 1.0 / 4096.0 {
            // tanh x = x − x³/3 + …: the cubic term is below half a unit of x here.
            return self;
        }
        // f64 keeps (1 − e) exact enough near 0, where f32 would cancel its digits away.
        let e = (-2.0 * a as f64).exp();
        (((1.0 - e) / (1.0 + e)) as f32).copysign(self)
    }
    unsafe fn gemm_unchecked(a: MatRef<'_, f32>, b: MatRef<'_, f32>, out: &mut [f32]) {
        if super::sgemm::available() {
            // SAFETY: forwarded contract; the AVX-512 check was just made.
            return unsafe { super::sgemm::gemm(a, b, out) };
        }
        // SAFETY: forwarded contract.
        unsafe { portable_gemm(matrixmultiply::sgemm, a, b, out) }
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
    #[inline]
    fn tanh_fast(self) -> Self {
        self.tanh()
    }
    unsafe fn gemm_unchecked(a: MatRef<'_, f64>, b: MatRef<'_, f64>, out: &mut [f64]) {
        // SAFETY: forwarded contract.
        unsafe { portable_gemm(matrixmultiply::dgemm, a, b, out) }
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

/// `out = a @ b` by `matrixmultiply` (`gemm` is its `sgemm` or `dgemm`).
///
/// # Safety
/// The shapes fit (`a.cols == b.rows`, `out.len() == a.rows * b.cols`) and every element
/// `a` and `b` address lies inside their slices.
unsafe fn portable_gemm<T: Float>(
    gemm: MmGemm<T>,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
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
}

#[cfg(test)]
mod tests {
    use super::Float;

    #[test]
    fn f32_tanh_is_within_one_ulp() {
        let mut worst = 0i64;
        let mut x = -20.0f32;
        while x < 20.0 {
            for v in [x, x * 1e-3, x * 1e-6] {
                let exact = (v as f64).tanh() as f32;
                let got = v.tanh_fast();
                worst = worst.max((got.to_bits() as i64 - exact.to_bits() as i64).abs());
            }
            x += 0.00137;
        }
        assert!(worst <= 1, "{worst} ulp");
        assert!(f32::NAN.tanh_fast().is_nan());
        assert_eq!(
            (f32::INFINITY.tanh_fast(), f32::NEG_INFINITY.tanh_fast()),
            (1.0, -1.0)
        );
        assert_eq!((-0.0f32).tanh_fast().to_bits(), (-0.0f32).to_bits());
    }
}
