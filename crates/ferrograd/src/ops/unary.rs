//! The element-wise primitives of one tensor, one declaration each.
//!
//! [`elementwise_primitives!`](crate::elementwise_primitives) is the table: each entry gives a
//! primitive's name, its constant arguments, where it is smooth, its forward and its
//! derivative, side by side. Everything else is generated from that entry: the `Tensor`
//! method, the [`Unary`] value a static graph stores and evaluates, the graph's `Node` method,
//! the Python methods, and the list that the tests walk to gradcheck every primitive (first and
//! second order) and compare its graph and Python entries with the eager op. Adding a
//! primitive is one entry here plus its reference values in a test.
//!
//! The derivative of an element-wise function is the linear map `t ↦ f′(x)·t`. It is diagonal,
//! so it is its own transpose: the same expression is the reverse-mode rule (`t` the incoming
//! gradient) and the forward-mode rule (`t` the tangent). It is written with tensor ops, so it
//! is itself differentiable. `c` gives the primal input (`c.input(0)`) and result (`c.out()`).
//! An entry whose derivative is not declared does not match the table's grammar: a primitive
//! cannot be added without its rule (`derivative: none` says, explicitly, that there is none).

use super::{has_rule, map_dispatch, map_slices_dispatch, zip_dispatch};
use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use crate::kernels::{strided, Float};
use crate::tensor::{
    is_grad_enabled, record, record_nondiff, with_dtype, BackwardCtx, DType, Tensor,
};
use num_traits::{One, Zero};

/// The table of element-wise primitives, handed to `$callback` (a macro that receives every
/// entry). The library expands it once into the ops; the graph and the Python bindings expand
/// it again into their entries, so no list of primitives is written twice.
#[doc(hidden)]
#[macro_export]
macro_rules! elementwise_primitives {
    ($($callback:ident)::+) => {
        $($callback)::+! {
            /// Element-wise `-x` (the unary `-` operator).
            neg Neg {
                smooth_on: Real,
                forward: map(|v| -v),
                derivative: |_c, t| -t,
            }
            /// Element-wise `eˣ`.
            exp Exp {
                smooth_on: Real,
                forward: slices(exp_in_place),
                derivative: |c, t| t * c.out(),
            }
            /// `eˣ − 1`, exact for small `x` (where `exp(x) - 1` loses every digit).
            expm1 Expm1 {
                smooth_on: Real,
                forward: map(|v| v.exp_m1()),
                derivative: |c, t| t * &(c.out() + 1.0),
            }
            /// Natural logarithm.
            log Log {
                smooth_on: Positive,
                forward: map(|v| v.ln()),
                derivative: |c, t| t / c.input(0),
            }
            /// `ln(1 + x)`, exact for small `x` (where `log(1 + x)` loses every digit).
            log1p Log1p {
                smooth_on: Positive,
                forward: map(|v| v.ln_1p()),
                derivative: |c, t| t / &(c.input(0) + 1.0),
            }
            /// Element-wise square root (NaN for negative elements; the gradient is infinite at 0).
            sqrt Sqrt {
                smooth_on: Positive,
                forward: map(|v| v.sqrt()),
                derivative: |c, t| &(t * 0.5) / c.out(),
            }
            /// Every element raised to the constant power `p`.
            powf Powf(p: f64) {
                smooth_on: Positive, example (2.7),
                forward: map(|v| v.powf(T::from_f64(p))),
                // x⁰ is constant: its derivative is 0 everywhere, including x = 0 where
                // p·x^(p−1) would be 0·∞ (PyTorch gives 0 too).
                derivative: |c, t| if p == 0.0 {
                    t.zeros_like()
                } else {
                    &(t * p) * &c.input(0).powf(p - 1.0)
                },
            }
            /// Element-wise `x²`.
            square Square {
                smooth_on: Real,
                forward: map(|v| v * v),
                derivative: |c, t| &(t * 2.0) * c.input(0),
            }
            /// Element-wise `|x|`; its gradient at 0 is 0.
            abs Abs {
                smooth_on: NonZero,
                forward: map(|v| v.abs()),
                derivative: |c, t| t * &c.input(0).detach().sign(),
            }
            /// −1, 0 or 1 by the sign of each element (0 at 0). Has no derivative.
            sign Sign {
                smooth_on: NonZero,
                forward: map(|v| if v > T::zero() {
                    T::one()
                } else if v < T::zero() {
                    -T::one()
                } else {
                    v
                }),
                derivative: none,
            }
            /// The largest integer not above each element (`x // 1`, what floor division and
            /// the remainder round with). Has no derivative: it is flat or undefined everywhere.
            floor Floor {
                smooth_on: NonZero,
                forward: map(|v| v.floor()),
                derivative: none,
            }
            /// Element-wise sine (radians).
            sin Sin {
                smooth_on: Real,
                forward: map(|v| v.sin()),
                derivative: |c, t| t * &c.input(0).cos(),
            }
            /// Element-wise cosine (radians).
            cos Cos {
                smooth_on: Real,
                forward: map(|v| v.cos()),
                derivative: |c, t| -&(t * &c.input(0).sin()),
            }
            /// Element-wise hyperbolic tangent.
            tanh Tanh {
                smooth_on: Real,
                forward: slices(tanh_in_place),
                derivative: |c, t| t * &(1.0 - &c.out().square()),
            }
            /// Logistic sigmoid, evaluated without overflow for large |x|.
            sigmoid Sigmoid {
                smooth_on: Real,
                forward: slices(sigmoid_in_place),
                derivative: |c, t| &(t * c.out()) * &(1.0 - c.out()),
            }
            /// max(x, 0); the derivative at 0 is taken as 0. NaN stays NaN, as in PyTorch (a
            /// diverging loss is not hidden).
            relu Relu {
                smooth_on: NonZero,
                forward: map(|v| if v > T::zero() || v.is_nan() {
                    v
                } else {
                    T::zero()
                }),
                derivative: |c, t| t.leaky_relu_backward(c.input(0), 0.0),
            }
            /// x for x > 0, `slope * x` otherwise.
            leaky_relu LeakyRelu(slope: f64) {
                smooth_on: NonZero, example (0.2),
                forward: map(|v| if v > T::zero() {
                    v
                } else {
                    v * T::from_f64(slope)
                }),
                derivative: |c, t| t.leaky_relu_backward(c.input(0), slope),
            }
            /// ln(1 + eˣ), computed as max(x, 0) + ln(1 + e^−|x|): exact for large |x| in both
            /// directions.
            softplus Softplus {
                smooth_on: Real,
                forward: map(|v| v.max(T::zero()) + (-v.abs()).exp().ln_1p()),
                derivative: |c, t| t * &c.input(0).sigmoid(),
            }
            /// GELU with the exact normal CDF, PyTorch's default `gelu`: x · Φ(x) with
            /// Φ(x) = ½(1 + erf(x/√2)).
            gelu Gelu {
                smooth_on: Real,
                forward: slices(gelu_in_place),
                derivative: |c, t| t.gelu_backward(c.input(0)),
            }
            /// The Gauss error function.
            erf Erf {
                smooth_on: Real,
                forward: map(|v| Float::erf(v)),
                derivative: |c, t| &(t * TWO_OVER_SQRT_PI) * &(-&c.input(0).square()).exp(),
            }
            /// Every element limited to `[min, max]` (either bound may be infinite; panics when
            /// `min > max`); NaN stays NaN, as in PyTorch. The gradient passes where the
            /// element is inside, bounds included.
            clamp Clamp(min: f64, max: f64) {
                smooth_on: Real, example (-0.5, 0.7),
                forward: tensor(|x| {
                    assert!(min <= max, "clamp: min {min} is above max {max}");
                    map_dispatch!(x, |v| if v.is_nan() {
                        v
                    } else {
                        v.max(T::from_f64(min)).min(T::from_f64(max))
                    })
                }),
                derivative: |c, t| {
                    let x = c.input(0).detach();
                    t * &(&x.ge_scalar(min) * &x.le_scalar(max))
                },
            }
            /// `self + s` (a primitive of its own, so `x + 2.0` costs one pass).
            add_scalar AddScalar(s: f64) {
                smooth_on: Real, example (0.5),
                forward: map(|v| v + T::from_f64(s)),
                derivative: |_c, t| t.clone(),
            }
            /// `self * s`.
            mul_scalar MulScalar(s: f64) {
                smooth_on: Real, example (-1.5),
                forward: map(|v| v * T::from_f64(s)),
                derivative: |_c, t| t.mul_scalar(s),
            }
            /// `self / s`.
            div_scalar DivScalar(s: f64) {
                smooth_on: Real, example (-4.0),
                forward: map(|v| v / T::from_f64(s)),
                derivative: |_c, t| t.div_scalar(s),
            }
            /// `s - self`.
            rsub_scalar RsubScalar(s: f64) {
                smooth_on: Real, example (2.0),
                forward: map(|v| T::from_f64(s) - v),
                derivative: |_c, t| -t,
            }
            /// `s / self`.
            rdiv_scalar RdivScalar(s: f64) {
                smooth_on: NonZero, example (1.5),
                forward: map(|v| T::from_f64(s) / v),
                // d(s/x)/dx = −s/x² = −(s/x)/x
                derivative: |c, t| -&(&(t * c.out()) / c.input(0)),
            }
        }
    };
}

/// Where an element-wise primitive is smooth: the points its gradient checks sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryDomain {
    /// Every real number.
    Real,
    /// x > 0 (and, for `log1p`, more).
    Positive,
    /// Away from 0, where the function has a kink or no derivative.
    NonZero,
}

/// Records the result of a primitive with its derivative rule, or as a node without one.
macro_rules! record_elementwise {
    ($name:expr, $out:expr, $x:expr, none $(,)?) => {
        record_nondiff($name, $out, &[$x])
    };
    ($name:expr, $out:expr, $x:expr, |$c:ident, $t:ident| $rule:expr $(,)?) => {
        record($name, $out, &[$x], move |$c, $t| smallvec![Some($rule)])
    };
}

/// An entry's derivative applied to a tangent: the same rule as the reverse mode's.
macro_rules! tangent_elementwise {
    ($x:expr, $y:expr, $tangent:expr, none $(,)?) => {
        None
    };
    ($x:expr, $y:expr, $tangent:expr, |$c:ident, $t:ident| $rule:expr $(,)?) => {{
        let inputs = [$x.clone()];
        let $c = &BackwardCtx {
            inputs: &inputs,
            out: $y,
            needs: &[true],
        };
        let $t: &Tensor = $tangent;
        Some($rule)
    }};
}

/// An entry's forward on a tensor: `map(|v| …)` is a function of one element, `slices(f)` a
/// vectorised slice function of the element type (`Float::tanh_in_place`), `tensor(|x| …)`
/// a function of the whole tensor.
macro_rules! elementwise_forward {
    ($x:expr, map(|$v:ident| $body:expr)) => {
        map_dispatch!($x, |$v| $body)
    };
    ($x:expr, slices($f:ident)) => {
        map_slices_dispatch!($x, $f)
    };
    ($x:expr, tensor(|$t:ident| $body:expr)) => {{
        let $t = $x;
        $body
    }};
}

/// An entry's forward over a slice of the element type `T` in place (what a fused loop
/// runs), or `false` for a function of the whole tensor.
macro_rules! elementwise_in_place {
    ($xs:expr, map(|$v:ident| $body:expr)) => {{
        for e in $xs.iter_mut() {
            let $v: T = *e;
            *e = $body;
        }
        true
    }};
    ($xs:expr, slices($f:ident)) => {{
        <T as Float>::$f($xs);
        true
    }};
    ($xs:expr, tensor(|$t:ident| $body:expr)) => {
        false
    };
}

/// Expands the table into the ops, [`Unary`] and its listing.
macro_rules! define_elementwise {
    ($(
        $(#[$doc:meta])*
        $name:ident $Variant:ident $(($($arg:ident: $ty:ty),+))? {
            smooth_on: $domain:ident $(, example $example:tt)?,
            forward: $form:ident($($forward:tt)*),
            derivative: $($rule:tt)+
        }
    )*) => {
        /// An element-wise primitive of one tensor with its constant arguments: what a
        /// static graph's node stores, and what the tests walk to check every primitive.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum Unary {
            $($(#[$doc])* $Variant $(($($ty),+))?,)*
        }

        impl Unary {
            /// The primitive's name (its method's name).
            pub fn name(self) -> &'static str {
                match self {
                    $(Unary::$Variant { .. } => stringify!($name),)*
                }
            }

            /// The primitive applied to `x`: the same as calling its method.
            pub fn apply(self, x: &Tensor) -> Tensor {
                match self {
                    $(Unary::$Variant $(($($arg),+))? => x.$name($($($arg),+)?),)*
                }
            }

            /// Whether the primitive has a derivative rule.
            pub fn is_differentiable(self) -> bool {
                match self {
                    $(Unary::$Variant { .. } => has_rule!($($rule)+),)*
                }
            }

            /// Where the primitive is smooth.
            pub fn smooth_on(self) -> UnaryDomain {
                match self {
                    $(Unary::$Variant { .. } => UnaryDomain::$domain,)*
                }
            }

            /// The constant arguments, in order (empty for most primitives).
            pub fn constants(self) -> Vec<f64> {
                match self {
                    $(Unary::$Variant $(($($arg),+))? => vec![$($($arg),+)?],)*
                }
            }

            /// Every primitive once, with example constants where it takes any.
            pub fn examples() -> Vec<Unary> {
                vec![$(Unary::$Variant $($example)?),*]
            }

            /// The primitive over f32 elements in place, the same function as its method's
            /// for each element; `false` (and nothing done) for a function of whole tensors.
            #[allow(unused_variables)]
            pub(crate) fn in_place_f32(self, xs: &mut [f32]) -> bool {
                type T = f32;
                match self {
                    $(Unary::$Variant $(($($arg),+))? => {
                        elementwise_in_place!(xs, $form($($forward)*))
                    })*
                }
            }

            /// [`Unary::in_place_f32`] over f64 elements.
            #[allow(unused_variables)]
            pub(crate) fn in_place_f64(self, xs: &mut [f64]) -> bool {
                type T = f64;
                match self {
                    $(Unary::$Variant $(($($arg),+))? => {
                        elementwise_in_place!(xs, $form($($forward)*))
                    })*
                }
            }

            /// The primitive's tangent at `x` (its value there `y`) along `t`: the derivative
            /// entry read as the forward-mode rule. `None` for a primitive without one.
            #[allow(unused_variables)]
            pub(crate) fn tangent(self, x: &Tensor, y: &Tensor, t: &Tensor) -> Option<Tensor> {
                match self {
                    $(Unary::$Variant $(($($arg),+))? => {
                        tangent_elementwise!(x, y, t, $($rule)+)
                    })*
                }
            }
        }

        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self $($(, $arg: $ty)+)?) -> Tensor {
                    let _profiled = crate::tensor::profile::scope(stringify!($name));
                    let op = Unary::$Variant $(($($arg),+))?;
                    if let Err(e) = op.result_dtype(self.dtype()) {
                        panic!("{e}");
                    }
                    let attrs = crate::tensor::trace::attrs![op];
                    crate::tensor::trace::op("Unary", attrs, &[self], || {
                        let out = elementwise_forward!(self, $form($($forward)*));
                        record_elementwise!(stringify!($name), out, self, $($rule)+)
                    })
                }
            )*
        }
    };
}

elementwise_primitives!(define_elementwise);

impl Unary {
    /// The dtype of the result for an input of dtype `input`, or why there is none: the one
    /// rule that the eager op and the static graph's inference both apply.
    pub fn result_dtype(self, input: DType) -> Result<DType, String> {
        if input.is_float() {
            Ok(input)
        } else {
            Err(format!(
                "{}: {}",
                self.name(),
                crate::tensor::INTEGER_IN_FLOAT_OP
            ))
        }
    }
}

/// The name with its constants, as graph listings show it: `exp`, `powf(2.0)`.
impl std::fmt::Display for Unary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let debug = format!("{self:?}");
        let constants = debug.find('(').map_or("", |i| &debug[i..]);
        write!(f, "{}{constants}", self.name())
    }
}

/// The derivatives of relu and GELU applied to a gradient, as ops of their own: a traced
/// backward (a compiled step) records them as one op each and runs their fused pass.
impl Tensor {
    /// This gradient through leaky relu at `x`: itself where `x` > 0, times `slope`
    /// elsewhere (0 when `slope` is 0, as PyTorch's relu backward, even for an infinite
    /// gradient); PyTorch's `leaky_relu_backward`. Linear in the gradient along a routing that
    /// `x` fixes: `x` receives no gradient (its derivative is zero almost everywhere).
    pub fn leaky_relu_backward(&self, x: &Tensor, slope: f64) -> Tensor {
        let _profiled = crate::tensor::profile::scope("leaky_relu_backward");
        trace::op("SlopeScaled", attrs![slope], &[self, x], || {
            slope_scaled(self, x, slope)
        })
    }

    /// This gradient times GELU′ at `x` (the exact GELU's derivative), PyTorch's
    /// `gelu_backward`; differentiable in both.
    pub fn gelu_backward(&self, x: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("gelu_backward");
        trace::op("GeluBackward", attrs![], &[self, x], || {
            gelu_derivative(x, self)
        })
    }
}

/// `up` where `x` > 0, `up · slope` elsewhere, in one pass; its own rule is itself.
fn slope_scaled(up: &Tensor, x: &Tensor, slope: f64) -> Tensor {
    let out = if slope == 0.0 {
        zip_dispatch!("relu backward", up, x, |u, v| if v > T::zero() {
            u
        } else {
            T::zero()
        })
    } else {
        zip_dispatch!("leaky_relu backward", up, x, |u, v| if v > T::zero() {
            u
        } else {
            u * T::from_f64(slope)
        })
    };
    let x = x.detach();
    record("slope_scaled", out, &[up], move |_, g| {
        smallvec![Some(g.leaky_relu_backward(&x, slope))]
    })
}

/// 2 / √π, the scale of erf's derivative.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// 1/√(2π), the normal density's scale.
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `t · GELU′(x)`, GELU′(x) = Φ(x) + x·φ(x). A backward that builds a graph gets it from
/// primitives (differentiable again); a plain one, whose gradients are values, from one fused
/// pass.
fn gelu_derivative(x: &Tensor, t: &Tensor) -> Tensor {
    if is_grad_enabled() || trace::is_tracing() {
        return gelu_derivative_composite(x, t);
    }
    with_dtype!(x.dtype(), T => {
        let xs = x.contiguous_data::<T>();
        let t = t.to_dtype(x.dtype()).broadcast_to(x.shape());
        let ts = strided::applied_with(&xs, t.contiguous_data::<T>(), T::gelu_backward);
        Tensor::from_data(ts, x.shape())
    })
}

/// `t · GELU′(x)` in primitives, differentiable again.
pub(crate) fn gelu_derivative_composite(x: &Tensor, t: &Tensor) -> Tensor {
    let cdf = &(&(x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5;
    let density = &x.square().mul_scalar(-0.5).exp() * FRAC_1_SQRT_2PI;
    t * &(&cdf + &(x * &density))
}

/// Composites: written from the primitives above, so they need no rule of their own.
impl Tensor {
    /// GELU with PyTorch's tanh approximation (`approximate="tanh"`):
    /// `½x(1 + tanh(√(2/π)(x + 0.044715x³)))`.
    pub fn gelu_tanh(&self) -> Tensor {
        let _profiled = crate::tensor::profile::scope("gelu_tanh");
        trace::op("GeluTanh", attrs![], &[self], || self.gelu_tanh_untraced())
    }

    pub(crate) fn gelu_tanh_untraced(&self) -> Tensor {
        let inner = (self + &self.powf(3.0).mul_scalar(0.044715))
            .mul_scalar((2.0 / std::f64::consts::PI).sqrt());
        &(self * 0.5) * &inner.tanh().add_scalar(1.0)
    }

    /// ELU: x for x > 0, `alpha · (eˣ − 1)` otherwise, written as
    /// relu(x) + alpha · (e^−relu(−x) − 1) so that the exponential never overflows.
    pub fn elu(&self, alpha: f64) -> Tensor {
        let _profiled = crate::tensor::profile::scope("elu");
        let negative_part = (-&(-self).relu()).exp().add_scalar(-1.0).mul_scalar(alpha);
        &self.relu() + &negative_part
    }
}
