//! The element-wise primitives of two tensors, one declaration each, with numpy broadcasting;
//! gradients are summed back to each operand's shape.
//!
//! [`binary_primitives!`](crate::binary_primitives) is the table, as
//! [`elementwise_primitives!`](crate::elementwise_primitives) is for one tensor: each entry
//! gives the name, the dtype rule (arithmetic or comparison), where each operand is smooth, the
//! element function and the derivative, side by side. The `Tensor` method, the [`Binary`]
//! value a static graph stores and evaluates, its dtype rule, the graph's `Node` method and the
//! list the tests walk are generated from it.
//!
//! The derivative is one linear map per operand, `t ↦ ∂f/∂a·t` and `t ↦ ∂f/∂b·t` over the
//! broadcast shape, written with tensor ops (so it is itself differentiable); each is summed
//! back to its operand's shape and built only when that operand needs a gradient. An entry
//! without a derivative does not match the table's grammar (`derivative: none` declares that
//! there is none: the comparisons).

use super::dtype::{eager_dtype_or_panic, promoted_float_rule};
use super::unary::UnaryDomain;
use super::{broadcast_shape_or_panic, has_rule, zip_dispatch, zip_elems};
use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use crate::kernels::strided;
use crate::tensor::{
    filled, numel_or_panic, record, record_nondiff, with_any_dtype, with_dtype, BackwardCtx, DType,
    Element, Tensor, INTEGER_IN_FLOAT_OP,
};
use num_traits::Zero;

/// Both operands in one dtype: f32 meets f64 as f64 (the cast is differentiable).
pub(crate) fn promote(a: &Tensor, b: &Tensor) -> (Tensor, Tensor) {
    let to = a.dtype().promote(b.dtype());
    (a.to_dtype(to), b.to_dtype(to))
}

/// The table of element-wise primitives of two tensors, handed to `$callback` (a macro that
/// receives every entry): expanded here into the ops and [`Binary`], and by the graph into its
/// `Node` methods.
#[doc(hidden)]
#[macro_export]
macro_rules! binary_primitives {
    ($($callback:ident)::+) => {
        $($callback)::+! {
            /// Element-wise `self + other` with broadcasting (the `+` operator); mixed dtypes
            /// are promoted (f32 with f64 to f64). Panics when the shapes do not broadcast.
            add Add {
                kind: Arithmetic, smooth_on: (Real, Real),
                forward: |x, y| x + y,
                derivative: |_c, t| (t.clone(), t.clone()),
            }
            /// Element-wise `self - other` with broadcasting (the `-` operator); mixed dtypes
            /// are promoted. Panics when the shapes do not broadcast.
            sub Sub {
                kind: Arithmetic, smooth_on: (Real, Real),
                forward: |x, y| x - y,
                derivative: |_c, t| (t.clone(), -t),
            }
            /// Element-wise `self * other` with broadcasting (the `*` operator); mixed dtypes
            /// are promoted. Panics when the shapes do not broadcast.
            mul Mul {
                kind: Arithmetic, smooth_on: (Real, Real),
                forward: |x, y| x * y,
                derivative: |c, t| (t * c.input(1), t * c.input(0)),
            }
            /// Element-wise `self / other` with broadcasting (the `/` operator); mixed dtypes
            /// are promoted. Panics when the shapes do not broadcast.
            div Div {
                kind: Arithmetic, smooth_on: (Real, NonZero),
                forward: |x, y| x / y,
                // d(a/b)/db = −a/b² = −(a/b)/b
                derivative: |c, t| (t / c.input(1), -&(&(t * c.out()) / c.input(1))),
            }
            /// Element-wise maximum; at a tie each operand receives half the gradient (the
            /// mean of the one-sided derivatives, which central differences also see). A NaN
            /// on either side gives NaN, as in PyTorch.
            maximum Maximum {
                kind: Arithmetic, smooth_on: (Real, Real),
                forward: |x, y| if x >= y || x.is_nan() { x } else { y },
                derivative: |c, t| (
                    t * &first_share(c, Tensor::gt),
                    t * &(1.0 - &first_share(c, Tensor::gt)),
                ),
            }
            /// Element-wise minimum; ties split the gradient as in [`Tensor::maximum`], and NaN
            /// propagates as there.
            minimum Minimum {
                kind: Arithmetic, smooth_on: (Real, Real),
                forward: |x, y| if x <= y || x.is_nan() { x } else { y },
                derivative: |c, t| (
                    t * &first_share(c, Tensor::lt),
                    t * &(1.0 - &first_share(c, Tensor::lt)),
                ),
            }
            /// 1 where `self == other` (broadcast), else 0. Has no derivative.
            eq Eq {
                kind: Comparison, smooth_on: (Real, Real),
                forward: |x, y| x == y,
                derivative: none,
            }
            /// 1 where `self != other` (broadcast), else 0. Has no derivative.
            ne Ne {
                kind: Comparison, smooth_on: (Real, Real),
                forward: |x, y| x != y,
                derivative: none,
            }
            /// 1 where `self < other` (broadcast), else 0. Has no derivative.
            lt Lt {
                kind: Comparison, smooth_on: (Real, Real),
                forward: |x, y| x < y,
                derivative: none,
            }
            /// 1 where `self <= other` (broadcast), else 0. Has no derivative.
            le Le {
                kind: Comparison, smooth_on: (Real, Real),
                forward: |x, y| x <= y,
                derivative: none,
            }
            /// 1 where `self > other` (broadcast), else 0. Has no derivative.
            gt Gt {
                kind: Comparison, smooth_on: (Real, Real),
                forward: |x, y| x > y,
                derivative: none,
            }
            /// 1 where `self >= other` (broadcast), else 0. Has no derivative.
            ge Ge {
                kind: Comparison, smooth_on: (Real, Real),
                forward: |x, y| x >= y,
                derivative: none,
            }
        }
    };
}

/// What a primitive of two tensors computes, and so its dtype rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryKind {
    /// A float function of the promoted operands; integers are refused.
    Arithmetic,
    /// A 0/1 mask in the operands' promoted dtype, integers included; no derivative.
    Comparison,
}

/// The forward of an entry: arithmetic through the float kernels, a comparison (a predicate
/// `$body`) over any dtype, as a 0/1 mask.
macro_rules! binary_forward {
    (Arithmetic, $name:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        zip_dispatch!($name, $a, $b, |$x, $y| $body)
    };
    (Comparison, $name:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        with_any_dtype!($a.dtype(), T => {
            zip_elems::<T>($name, $a, $b, |$x: T, $y: T| if $body { T::ONE } else { T::ZERO })
        })
    };
}

/// One element of an entry's result: arithmetic's value, or a comparison's 0/1.
macro_rules! binary_element {
    (Arithmetic, $body:expr) => {
        $body
    };
    (Comparison, $body:expr) => {
        if $body {
            T::ONE
        } else {
            T::ZERO
        }
    };
}

/// Records the result of a primitive with its two derivative maps, or as a node without one.
macro_rules! record_binary {
    ($name:expr, $out:expr, $a:expr, $b:expr, none $(,)?) => {
        record_nondiff($name, $out, &[$a, $b])
    };
    (
        $name:expr, $out:expr, $a:expr, $b:expr,
        |$c:ident, $t:ident| ($da:expr, $db:expr $(,)?) $(,)?
    ) => {
        record($name, $out, &[$a, $b], move |$c, $t| {
            smallvec![
                $c.needs(0)
                    .then(|| Tensor::sum_to(&$da, $c.input(0).shape())),
                $c.needs(1)
                    .then(|| Tensor::sum_to(&$db, $c.input(1).shape())),
            ]
        })
    };
}

/// An entry's two derivative maps applied to the operands' tangents and summed.
macro_rules! tangent_binary {
    (($a:expr, $b:expr, $y:expr), $ta:expr, $tb:expr, none $(,)?) => {
        None
    };
    (
        ($a:expr, $b:expr, $y:expr), $ta:expr, $tb:expr,
        |$c:ident, $t:ident| ($da:expr, $db:expr $(,)?) $(,)?
    ) => {{
        let inputs = [$a.to_dtype($y.dtype()), $b.to_dtype($y.dtype())];
        let $c = &BackwardCtx {
            inputs: &inputs,
            out: $y,
            needs: &[true, true],
        };
        let first = $ta.map(|$t: &Tensor| $da);
        let second = $tb.map(|$t: &Tensor| $db);
        let sum = match (first, second) {
            (Some(p), Some(q)) => Some(&p + &q),
            (p, q) => p.or(q),
        };
        sum.map(|s| s.to_dtype($y.dtype()).broadcast_to($y.shape()))
    }};
}

/// Expands the table into the ops, [`Binary`] and its listing.
macro_rules! define_binary {
    ($(
        $(#[$doc:meta])*
        $name:ident $Variant:ident {
            kind: $kind:ident, smooth_on: ($da:ident, $db:ident),
            forward: |$x:ident, $y:ident| $forward:expr,
            derivative: $($rule:tt)+
        }
    )*) => {
        /// An element-wise primitive of two tensors: what a static graph's node stores, and
        /// what the tests walk to check every primitive.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Binary {
            $($(#[$doc])* $Variant,)*
        }

        impl Binary {
            /// The primitive's name (its method's name).
            pub fn name(self) -> &'static str {
                match self {
                    $(Binary::$Variant => stringify!($name),)*
                }
            }

            /// The primitive applied to `a` and `b`: the same as calling its method.
            pub fn apply(self, a: &Tensor, b: &Tensor) -> Tensor {
                match self {
                    $(Binary::$Variant => a.$name(b),)*
                }
            }

            /// Arithmetic or comparison.
            pub fn kind(self) -> BinaryKind {
                match self {
                    $(Binary::$Variant => BinaryKind::$kind,)*
                }
            }

            /// Whether the primitive has a derivative rule.
            pub fn is_differentiable(self) -> bool {
                match self {
                    $(Binary::$Variant => has_rule!($($rule)+),)*
                }
            }

            /// Where each operand is smooth (for the other operand's every value).
            pub fn smooth_on(self) -> (UnaryDomain, UnaryDomain) {
                match self {
                    $(Binary::$Variant => (UnaryDomain::$da, UnaryDomain::$db),)*
                }
            }

            /// Every primitive once.
            pub fn examples() -> Vec<Binary> {
                vec![$(Binary::$Variant),*]
            }

            /// The primitive of f32 slices of one length into `out`, element by element: the
            /// same function as its method's (what a fused loop runs).
            pub(crate) fn zip_f32(self, a: &[f32], b: &[f32], out: &mut [f32]) {
                type T = f32;
                match self {
                    $(Binary::$Variant => {
                        for ((o, &$x), &$y) in out.iter_mut().zip(a).zip(b) {
                            *o = binary_element!($kind, $forward);
                        }
                    })*
                }
            }

            /// [`Binary::zip_f32`] of f64 slices.
            pub(crate) fn zip_f64(self, a: &[f64], b: &[f64], out: &mut [f64]) {
                type T = f64;
                match self {
                    $(Binary::$Variant => {
                        for ((o, &$x), &$y) in out.iter_mut().zip(a).zip(b) {
                            *o = binary_element!($kind, $forward);
                        }
                    })*
                }
            }

            /// The primitive's tangent at `a`, `b` (its value there `y`) along the operands'
            /// tangents, either of which may be absent (zero): each derivative map of the
            /// entry applied to its operand's tangent, summed over the result's shape. `None`
            /// for a primitive without derivative, or without tangents.
            pub(crate) fn tangent(
                self,
                (a, b, y): (&Tensor, &Tensor, &Tensor),
                ta: Option<&Tensor>,
                tb: Option<&Tensor>,
            ) -> Option<Tensor> {
                match self {
                    $(Binary::$Variant => {
                        tangent_binary!((a, b, y), ta, tb, $($rule)+)
                    })*
                }
            }
        }

        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self, other: &Tensor) -> Tensor {
                    let _profiled = crate::tensor::profile::scope(stringify!($name));
                    let op = Binary::$Variant;
                    let attrs = crate::tensor::trace::attrs![op];
                    crate::tensor::trace::op("Binary", attrs, &[self, other], || {
                        let (a, b) = if self.dtype() == other.dtype() {
                            (self.clone(), other.clone())
                        } else {
                            promote(self, other)
                        };
                        if let Err(e) = op.result_dtype(a.dtype(), b.dtype()) {
                            panic!("{e}");
                        }
                        let out = binary_forward!($kind, stringify!($name), &a, &b, |$x, $y| $forward);
                        record_binary!(stringify!($name), out, &a, &b, $($rule)+)
                    })
                }
            )*
        }
    };
}

binary_primitives!(define_binary);

impl Binary {
    /// The dtype of the result for operands of dtypes `a` and `b`, or why there is none: the
    /// one rule that the eager op and the static graph's inference both apply.
    pub fn result_dtype(self, a: DType, b: DType) -> Result<DType, String> {
        let d = a.promote(b);
        match self.kind() {
            BinaryKind::Comparison => Ok(d),
            BinaryKind::Arithmetic if d.is_float() => Ok(d),
            BinaryKind::Arithmetic => Err(format!("{}: {INTEGER_IN_FLOAT_OP}", self.name())),
        }
    }
}

/// The name, as graph listings show it.
impl std::fmt::Display for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The share of an element-wise max's or min's gradient that goes to the first operand: 1
/// where it `wins`, 0 where it loses, ½ at a tie. A constant: the inputs are detached.
fn first_share(c: &BackwardCtx<'_>, wins: fn(&Tensor, &Tensor) -> Tensor) -> Tensor {
    let (a, b) = (c.input(0).detach(), c.input(1).detach());
    &wins(&a, &b) + &(&a.eq(&b) * 0.5)
}

impl Tensor {
    /// Elements of `on_true` where this mask is non-zero, of `on_false` elsewhere (all three
    /// broadcast together). The mask receives no gradient.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("where_cond");
        trace::op("WhereCond", attrs![], &[self, on_true, on_false], || {
            self.where_cond_untraced(on_true, on_false)
        })
    }

    fn where_cond_untraced(&self, on_true: &Tensor, on_false: &Tensor) -> Tensor {
        let rule = promoted_float_rule(on_true.dtype(), on_false.dtype());
        eager_dtype_or_panic("where_cond", rule);
        if on_true.dtype() != on_false.dtype() {
            let (t, f) = promote(on_true, on_false);
            return self.where_cond(&t, &f);
        }
        let cond = self.to_dtype(on_true.dtype()).detach();
        let shape = broadcast_shape_or_panic("where_cond", self.shape(), on_true.shape());
        let shape = broadcast_shape_or_panic("where_cond", &shape, on_false.shape());
        let out = with_dtype!(on_true.dtype(), T => {
            let (sc, st, sf) = (
                cond.layout().broadcast_strides(&shape),
                on_true.layout().broadcast_strides(&shape),
                on_false.layout().broadcast_strides(&shape),
            );
            let mut out = filled("where", numel_or_panic("where", &shape), T::zero());
            strided::zip3(&shape, cond.src::<T>(&sc), on_true.src::<T>(&st), on_false.src::<T>(&sf), &mut out,
                |m, t, f| if m != T::zero() { t } else { f });
            Tensor::from_data(out, &shape)
        });
        record("where_cond", out, &[&cond, on_true, on_false], |c, up| {
            let mask = c.input(0);
            smallvec![
                None,
                c.needs(1).then(|| (up * mask).sum_to(c.input(1).shape())),
                c.needs(2)
                    .then(|| (up * &(1.0 - mask)).sum_to(c.input(2).shape())),
            ]
        })
    }
}
