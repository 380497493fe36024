//! `exp`, the sigmoid, tanh and GELU over f32 slices, vectorised.
//!
//! glibc's `expf` and `tanhf` are scalar calls (tanhf through `expm1f`), and in a recurrent
//! cell they are most of the time. Here each is branch-free arithmetic that the compiler
//! turns into AVX-512 or AVX2 code (chosen at run time): the exponential by range reduction
//! `x = n·ln 2 + r` and Cephes' degree-5 polynomial for `e^r`, tanh by Cephes' odd polynomial
//! below |x| = 0.625 and through the exponential above. Both stay within a few units in the
//! last place (the tests bound them); f64 keeps the C library's functions. GELU's normal CDF
//! comes from the complementary error function as `t·e^(−z²)·Q(t)`, t = 1/(1 + z/2) (the
//! variable of Numerical Recipes' `erfcc`, with Q fitted here), which has no cancellation in
//! either tail.

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

/// 1/√2 and 1/√(2π), of the normal distribution.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// erfc(z)·e^(z²)/t as a polynomial in t = 1/(1 + z/2), z ≥ 0, ascending powers: a
/// least-squares fit of relative error 6.2·10⁻⁸ (7.8·10⁻⁸ with the coefficients rounded to
/// f32) over t ≥ 0.1 (z ≤ 18; beyond, e^(−z²) is 0 in f32 and the polynomial only has to
/// stay finite). Written this way, erfc's exponential is e^(−z²) alone, the one the normal
/// density needs too: GELU's derivative takes one exponential instead of two.
const ERFCX_OVER_T: [f32; 9] = [
    0.282_086_4,
    0.282_363_8,
    0.243_287_01,
    0.201_518_45,
    -0.022_718_232,
    0.270_616_83,
    -0.479_054_84,
    0.279_824,
    -0.057_923_343,
];

/// Φ(x), the standard normal CDF, and e^(−x²/2): Φ(x) = ½·erfc(−x/√2), with
/// erfc(z) = t·e^(−z²)·Q(t) for z = |x|/√2 (and 2 − that for the other sign).
#[inline(always)]
fn normal_cdf_and_gauss<const FMA: bool>(x: f32) -> (f32, f32) {
    let z = x.abs() * FRAC_1_SQRT_2;
    let t = 1.0 / madd::<FMA>(0.5, z, 1.0);
    let (last, rest) = ERFCX_OVER_T.split_last().expect("coefficients");
    let q = rest.iter().rev().fold(*last, |q, &c| madd::<FMA>(q, t, c));
    // z² as (−x/2)·x: halving is exact, so the exponent carries one rounding (z itself is
    // rounded, and its square's error would grow with z² in the far tail).
    let gauss = exp::<FMA>(-0.5 * x * x);
    let half_erfc = 0.5 * t * gauss * q;
    let cdf = if x >= 0.0 { 1.0 - half_erfc } else { half_erfc };
    (cdf, gauss)
}

/// GELU: x·Φ(x).
#[inline(always)]
fn gelu<const FMA: bool>(x: f32) -> f32 {
    x * normal_cdf_and_gauss::<FMA>(x).0
}

/// GELU′(x) = Φ(x) + x·φ(x), with φ the standard normal density.
#[inline(always)]
fn gelu_slope<const FMA: bool>(x: f32) -> f32 {
    let (cdf, gauss) = normal_cdf_and_gauss::<FMA>(x);
    madd::<FMA>(x * FRAC_1_SQRT_2PI, gauss, cdf)
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
slice_kernel!(gelu_f32, gelu);

/// `ts[i] ← ts[i]·GELU′(xs[i])`, compiled for each kernel path. The loop is written here
/// rather than through a function argument: a call through `Fn` was left out of line, and
/// the FMAs inside it became library calls.
#[isa_dispatch]
fn gelu_backward_slice<const FMA: bool>(xs: &[f32], ts: &mut [f32]) {
    for (t, &x) in ts.iter_mut().zip(xs) {
        *t *= gelu_slope::<FMA>(x);
    }
}

/// GELU's derivative applied to an incoming gradient: `ts[i] ← ts[i]·GELU′(xs[i])`.
pub fn gelu_backward_f32(xs: &[f32], ts: &mut [f32]) {
    if Isa::active() >= Isa::Avx2 {
        gelu_backward_slice::<true>(xs, ts);
    } else {
        gelu_backward_slice::<false>(xs, ts);
    }
}

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

    /// The largest relative error of `f` against `exact` over a sweep of `[lo, hi]`.
    fn worst_relative(f: impl Fn(f32) -> f32, exact: impl Fn(f64) -> f64, lo: f64, hi: f64) -> f64 {
        (0..=100_000)
            .map(|i| (lo + (hi - lo) * i as f64 / 100_000.0) as f32)
            .map(|x| {
                let want = exact(x as f64);
                ((f(x) as f64 - want) / want.abs().max(f32::MIN_POSITIVE as f64)).abs()
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn gelu_and_its_slope_close_to_the_exact_values() {
        let cdf = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
        let exact_gelu = |x: f64| x * cdf(x);
        let density = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let exact_slope = |x: f64| cdf(x) + x * density(x);
        let slope_of = |f: fn(&[f32], &mut [f32])| {
            move |x: f32| {
                let mut t = [1.0f32];
                f(&[x], &mut t);
                t[0]
            }
        };
        // GELU over a slice and its derivative applied to a gradient, in one form.
        type Pair = (fn(&mut [f32]), fn(&[f32], &mut [f32]));
        let forms: [Pair; 2] = [
            (gelu_f32, gelu_backward_f32),
            (
                |xs| xs.iter_mut().for_each(|x| *x = gelu::<false>(*x)),
                |xs, ts| {
                    ts.iter_mut()
                        .zip(xs)
                        .for_each(|(t, &x)| *t *= gelu_slope::<false>(x))
                },
            ),
        ];
        for (gelu, backward) in forms {
            let one = |x: f32| {
                let mut v = [x];
                gelu(&mut v);
                v[0]
            };
            // The bulk, and the far negative tail where x·Φ(x) is tiny but not yet 0. The fit
            // is good to 6.2e-8; its nine-term polynomial evaluated in f32 adds a few
            // roundings, and in the tail so does e^(−x²/2)'s rounded exponent (far below what
            // training notices).
            assert!(worst_relative(one, exact_gelu, -6.0, 10.0) < 1.5e-6);
            assert!(worst_relative(one, exact_gelu, -12.0, -6.0) < 5e-6);
            // The slope crosses zero near x = −0.75: measure it against its scale, 1.
            let slope = slope_of(backward);
            let worst_abs = (0..=100_000)
                .map(|i| -12.0 + 22.0 * i as f64 / 100_000.0)
                .map(|x| (slope(x as f32) as f64 - exact_slope(x as f32 as f64)).abs())
                .fold(0.0, f64::max);
            assert!(worst_abs < 5e-7, "{worst_abs}");
        }
        let mut edge = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, 100.0];
        gelu_f32(&mut edge);
        // −∞·Φ(−∞) = −∞·0 is NaN, as PyTorch's GELU gives.
        assert!(edge[0].is_nan() && edge[2].is_nan());
        assert_eq!(edge[1], f32::INFINITY);
        assert_eq!(&edge[3..], [0.0, 100.0]);
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
