//! `exp`, the sigmoid and tanh over f32 slices, vectorised.
//!
//! glibc's `expf` and `tanhf` are scalar calls (tanhf through `expm1f`), and in a recurrent
//! cell they are most of the time. Here each is branch-free arithmetic that the compiler
//! turns into AVX-512 or AVX2 code (chosen at run time): the exponential by range reduction
//! `x = n·ln 2 + r` and Cephes' degree-5 polynomial for `e^r`, tanh by Cephes' odd polynomial
//! below |x| = 0.625 and through the exponential above. Both stay within a few units in the
//! last place (the tests bound them); f64 keeps the C library's functions.

use ferrograd_derive::isa_dispatch;

use super::isa::Isa;

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two: `n·LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Beyond these, e^x overflows f32 or rounds to zero (below the smallest subnormal).
const EXP_MAX: f32 = 88.722_84;
const EXP_MIN: f32 = -103.972_08;
/// 1.5·2^23: adding it to a small integer-valued float puts the integer in the low bits.
const ROUNDING_BIAS: f32 = 12_582_912.0;

/// `a·b + c`, fused (one rounding) when `FMA`: the kernels' clones for CPUs with FMA pass
/// true, so the polynomials take half the instructions there; elsewhere a fused multiply-add
/// would be a slow library call.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// e^x, branch-free (NaN stays NaN).
#[inline(always)]
fn exp<const FMA: bool>(input: f32) -> f32 {
    let x = input.clamp(EXP_MIN, EXP_MAX);
    let n = madd::<FMA>(x, LOG2E, 0.5).floor();
    let r = madd::<FMA>(-n, LN2_LO, madd::<FMA>(-n, LN2_HI, x));
    let p = [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ]
    .into_iter()
    .fold(1.987_569_1e-4, |p, c| madd::<FMA>(p, r, c));
    let y = madd::<FMA>(p * r, r, r) + 1.0;
    // n as an integer through the bits of n + 1.5·2^23 (exact for |n| < 2^22): unlike `as
    // i32`, whose saturating cast is done lane by lane, this stays in vector registers. A NaN
    // gives a meaningless n here, but then y is NaN and so is the result.
    let n = ((n + ROUNDING_BIAS).to_bits() as i32).wrapping_sub(ROUNDING_BIAS.to_bits() as i32);
    // 2^n as two normal powers of two (n is in −150..=128 after the clamp, beyond one f32
    // exponent at both ends): the product is then right in the subnormal range and up to
    // f32::MAX.
    let half = n >> 1;
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    let out = y * pow2(half) * pow2(n.wrapping_sub(half));
    if input < EXP_MIN {
        0.0
    } else if input > EXP_MAX {
        f32::INFINITY
    } else {
        out
    }
}

/// The logistic sigmoid from e^−|x|: no overflow, and no cancellation on either side.
#[inline(always)]
fn sigmoid<const FMA: bool>(x: f32) -> f32 {
    let e = exp::<FMA>(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// tanh: an odd polynomial near 0 (where 1 − e^−2|x| would cancel), the exponential above.
#[inline(always)]
fn tanh<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let p = [2.063_909e-2, -5.373_971_6e-2, 0.133_314_42, -0.333_332_8]
        .into_iter()
        .fold(-5.704_988_7e-3, |p, c| madd::<FMA>(p, z, c));
    let small = madd::<FMA>(p * z, x, x);
    let e = exp::<FMA>(-2.0 * a);
    let large = ((1.0 - e) / (1.0 + e)).copysign(x);
    // tanh is odd: the sign is x's, −0 included.
    if a < 0.625 {
        small.copysign(x)
    } else {
        large
    }
}

/// `f` over `xs`, compiled for each kernel path.
#[isa_dispatch]
fn map_f32(xs: &mut [f32], f: impl Fn(f32) -> f32) {
    xs.iter_mut().for_each(|x| *x = f(*x));
}

/// `f` over `xs`, in its FMA form on the paths that have FMA (all but the portable one).
macro_rules! slice_kernel {
    ($name:ident, $f:ident) => {
        pub fn $name(xs: &mut [f32]) {
            if Isa::active() >= Isa::Avx2 {
                map_f32(xs, $f::<true>);
            } else {
                map_f32(xs, $f::<false>);
            }
        }
    };
}

slice_kernel!(exp_f32, exp);
slice_kernel!(sigmoid_f32, sigmoid);
slice_kernel!(tanh_f32, tanh);

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest distance in units in the last place between `f` and `exact` (computed in
    /// f64) over a dense sweep of `[lo, hi]` and its scaled-down copies.
    fn worst_ulp(f: fn(&mut [f32]), exact: fn(f64) -> f64, lo: f32, hi: f32) -> i64 {
        let steps = 200_000;
        let mut xs: Vec<f32> = (0..=steps)
            .map(|i| lo + (hi - lo) * i as f32 / steps as f32)
            .collect();
        let scaled: Vec<f32> = xs.iter().flat_map(|&x| [x * 1e-3, x * 1e-7]).collect();
        xs.extend(scaled);
        let mut ys = xs.clone();
        f(&mut ys);
        xs.iter()
            .zip(&ys)
            .map(|(&x, &y)| {
                let want = exact(x as f64) as f32;
                (y.to_bits() as i64 - want.to_bits() as i64).abs()
            })
            .max()
            .unwrap()
    }

    /// The three kernels in one form: the dispatched slice kernels (the FMA form on a CPU
    /// with FMA), or the scalar functions without FMA.
    type Kernels = [fn(&mut [f32]); 3];
    const FORMS: [Kernels; 2] = [
        [exp_f32, sigmoid_f32, tanh_f32],
        [
            |xs| xs.iter_mut().for_each(|x| *x = exp::<false>(*x)),
            |xs| xs.iter_mut().for_each(|x| *x = sigmoid::<false>(*x)),
            |xs| xs.iter_mut().for_each(|x| *x = tanh::<false>(*x)),
        ],
    ];

    #[test]
    fn within_a_few_ulp_of_the_exact_values() {
        for [exp, sigmoid, tanh] in FORMS {
            assert!(worst_ulp(exp, f64::exp, -87.0, 88.72) <= 2);
            // Near f32::MAX, and subnormal results (their ulp is fixed, so the count stays
            // small).
            assert!(worst_ulp(exp, f64::exp, 88.3, 88.7228) <= 2);
            assert!(worst_ulp(exp, f64::exp, -103.9, -87.4) <= 2);
            let exact_sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
            assert!(worst_ulp(sigmoid, exact_sigmoid, -80.0, 30.0) <= 3);
            assert!(worst_ulp(tanh, f64::tanh, -12.0, 12.0) <= 3);
        }
    }

    #[test]
    fn edges() {
        for [exp, sigmoid, tanh] in FORMS {
            let mut xs = [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                1000.0,
                -1000.0,
                0.0,
                -0.0,
            ];
            exp(&mut xs);
            assert!(xs[0].is_nan());
            assert_eq!(&xs[1..], [f32::INFINITY, 0.0, f32::INFINITY, 0.0, 1.0, 1.0]);
            let mut s = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0];
            sigmoid(&mut s);
            assert!(s[0].is_nan());
            assert_eq!(&s[1..], [1.0, 0.0, 0.5]);
            let mut t = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 20.0];
            tanh(&mut t);
            assert!(t[0].is_nan());
            assert_eq!(&t[1..], [1.0, -1.0, -0.0, 1.0]);
            assert!(t[3].is_sign_negative(), "{:?}", t);
        }
    }
}
