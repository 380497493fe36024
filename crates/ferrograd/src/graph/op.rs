//! What a graph node computes: the macro that declares ops (their variants, names, shape
//! rules, evaluations and `Node` methods, from one entry each in `graph/table.rs`), and the
//! leaves, gradients and element-wise ops that stand outside that table. Gradients need no
//! rule here: a session evaluates nodes with the eager ops, and the eager engine differentiates
//! them, so the project keeps one table of derivatives.

use std::fmt;

pub use super::table::Op;
pub use crate::ops::binary::Binary;
use crate::ops::dtype::float_rule;
use crate::ops::shape::broadcast;
pub(crate) use crate::ops::shape::known;
pub(crate) use crate::ops::shape::show;
pub use crate::ops::unary::Unary;
use crate::tensor::{DType, Tensor};

pub use crate::ops::shape::Shape;

/// Declares the ops a node can hold beyond the leaves, gradients and the element-wise tables:
/// one entry per op gives its `Op` variant with its attributes, its name in listings, its shape
/// and dtype rule, its evaluation (the eager `Tensor` method of the same name), its tangent
/// rule (forward mode, `graph::tangent`), its batching rule (`graph::batch`), its fusion class
/// when it is element-wise (`fusion(Elementwise)`, for `graph::fuse`) and the `Node` methods
/// that add it. Adding an op to graphs is one entry in `graph/table.rs`.
macro_rules! declare_ops {
    ($(
        $(#[$doc:meta])*
        $Variant:ident $name:literal { $($field:ident: $fty:ty),* $(,)? }
        $(outputs($count:literal))?
        $(fusion($fusion:ident))?
        infer($ins:ident) $infer:block
        eval($x:ident) $eval:block
        jvp($jx:ident, $jy:ident, $jt:ident) $jvp:block
        vmap($bb:ident) $vmap:block
        node { $($node:item)* }
    )*) => {
        /// What a node computes.
        #[derive(Clone)]
        pub enum Op {
            /// A value fed at run time, with an optional shape (`None` axes free) and dtype.
            Placeholder {
                /// The name errors and listings use.
                name: String,
                /// The shape fed values must have, when given.
                shape: Option<$crate::ops::shape::Shape>,
                /// The dtype fed values must have, when given.
                dtype: Option<$crate::tensor::DType>,
            },
            /// State that keeps its value across runs, updated by training ops.
            Variable {
                /// The name in listings and saved files.
                name: String,
                /// The value, a tracked leaf so that the eager engine differentiates it.
                param: $crate::autograd::Param,
            },
            /// A value fixed when the graph is built.
            Constant($crate::tensor::Tensor),
            /// An element-wise function.
            Unary($crate::ops::unary::Unary),
            /// An element-wise function of two inputs.
            Binary($crate::ops::binary::Binary),
            /// The gradient of input 0 (a one-element value) with respect to input 1.
            Grad,
            /// One step of an optimizer on `vars` against the loss (input 0); the loss is its
            /// value.
            Minimize($crate::graph::train::Minimizer),
            /// Output `index` (from 1) of input 0, whose op has several outputs (a `topk`'s
            /// positions); the node of that op is its output 0.
            Output {
                /// Which output.
                index: usize,
            },
            $(
                $(#[$doc])*
                $Variant {
                    $(
                        #[allow(missing_docs)]
                        $field: $fty,
                    )*
                },
            )*
        }

        impl Op {
            /// A declared op's name with its attributes, as `narrow(axis=0, start=1, len=2)`.
            pub(super) fn declared_name(&self) -> Option<String> {
                match self {
                    $(Op::$Variant { $($field),* } => {
                        let attributes: Vec<String> =
                            vec![$(format!("{}={:?}", stringify!($field), $field)),*];
                        Some($crate::graph::op::call_name($name, &attributes))
                    })*
                    _ => None,
                }
            }

            /// A declared op from a traced event: its variant's name and its attributes, in
            /// the order of the variant's fields (`tensor::trace`).
            #[allow(unused_variables, unused_mut)]
            pub(crate) fn declared_from_trace(
                variant: &str,
                attrs: Vec<Box<dyn std::any::Any>>,
            ) -> Option<Result<Op, String>> {
                let mut attrs = attrs.into_iter();
                match variant {
                    $(stringify!($Variant) => {
                        let mut build = || -> Result<Op, String> {
                            Ok(Op::$Variant {
                                $($field: $crate::graph::op::traced_attr::<$fty>(
                                    attrs.next(), stringify!($Variant), stringify!($field),
                                )?,)*
                            })
                        };
                        Some(build())
                    })*
                    _ => None,
                }
            }

            /// How a compiled graph may fuse a declared op (`Opaque` unless its entry says).
            pub(crate) fn declared_fusion(&self) -> Option<$crate::graph::op::Fusion> {
                match self {
                    $(Op::$Variant { .. } => Some($crate::graph::op::fusion_class!($($fusion)?)),)*
                    _ => None,
                }
            }

            /// How many values the op gives.
            pub(crate) fn outputs(&self) -> usize {
                match self {
                    $(Op::$Variant { .. } => 1 $(- 1 + $count)?,)*
                    _ => 1,
                }
            }

            /// A declared op's shape and dtype rule, one answer per output.
            #[allow(unused_variables)]
            pub(super) fn declared_infer(
                &self,
                inputs: &[($crate::ops::shape::Shape, $crate::tensor::DType)],
            ) -> Option<$crate::graph::op::InferredOutputs> {
                use $crate::graph::op::IntoOutputs;
                match self {
                    $(Op::$Variant { $($field),* } => {
                        let $ins = inputs;
                        let rule = || -> Result<_, String> { $infer };
                        Some(rule().map(IntoOutputs::into_outputs))
                    })*
                    _ => None,
                }
            }

            /// A declared op on evaluated inputs, one value per output.
            #[allow(unused_variables)]
            pub(super) fn declared_eval(
                &self,
                inputs: &[$crate::tensor::Tensor],
            ) -> Option<Vec<$crate::tensor::Tensor>> {
                use $crate::graph::op::IntoOutputs;
                match self {
                    $(Op::$Variant { $($field),* } => {
                        let $x = inputs;
                        Some($eval.into_outputs())
                    })*
                    _ => None,
                }
            }
        }

        impl Op {
            /// A declared op's tangent rule: the tangents of its outputs `y` at inputs `x`
            /// along the inputs' tangents `t` (see `graph::tangent`).
            #[allow(unused_variables)]
            pub(super) fn declared_tangent(
                &self,
                x: &[$crate::tensor::Tensor],
                y: &[$crate::tensor::Tensor],
                t: &$crate::graph::tangent::Tangents<'_>,
            ) -> Option<Vec<Option<$crate::tensor::Tensor>>> {
                use $crate::graph::tangent::IntoTangents;
                match self {
                    $(Op::$Variant { $($field),* } => {
                        let ($jx, $jy, $jt) = (x, y, t);
                        Some($jvp.into_tangents())
                    })*
                    _ => None,
                }
            }

            /// A declared op's batching rule: its outputs, batched along axis 0, from the
            /// inputs `b` gives (see `graph::batch`).
            #[allow(unused_variables)]
            pub(super) fn declared_batch(
                &self,
                b: &$crate::graph::batch::Batch<'_>,
            ) -> Option<Vec<$crate::tensor::Tensor>> {
                use $crate::graph::op::IntoOutputs;
                match self {
                    $(Op::$Variant { $($field),* } => {
                        let $bb = b;
                        Some($vmap.into_outputs())
                    })*
                    _ => None,
                }
            }

            /// The variant's name, as a traced event names it (`"Narrow"`, `"Unary"`).
            pub fn variant(&self) -> &'static str {
                match self {
                    $(Op::$Variant { .. } => stringify!($Variant),)*
                    Op::Placeholder { .. } => "Placeholder",
                    Op::Variable { .. } => "Variable",
                    Op::Constant(_) => "Constant",
                    Op::Unary(_) => "Unary",
                    Op::Binary(_) => "Binary",
                    Op::Grad => "Grad",
                    Op::Minimize(_) => "Minimize",
                    Op::Output { .. } => "Output",
                }
            }

            /// The name of every declared variant, as a traced event names it.
            pub fn declared_variants() -> &'static [&'static str] {
                &[$(stringify!($Variant)),*]
            }
        }

        impl $crate::graph::Node {
            $($($node)*)*
        }
    };
}
pub(crate) use declare_ops;

/// How a compiled graph may fuse an op with its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// Runs on its own, over whole tensors.
    Opaque,
    /// Each output element comes from the elements at the same place of the inputs (one
    /// element broadcast to all counts as at every place): a chain of such ops can run over
    /// blocks of elements that stay in cache, with no whole intermediate tensor.
    Elementwise,
}

/// A declaration's fusion class: `Opaque` unless its entry names one.
macro_rules! fusion_class {
    () => {
        $crate::graph::op::Fusion::Opaque
    };
    ($class:ident) => {
        $crate::graph::op::Fusion::$class
    };
}
pub(crate) use fusion_class;

/// One attribute of a traced event, read back as the field's type.
pub(crate) fn traced_attr<T: 'static>(
    attr: Option<Box<dyn std::any::Any>>,
    variant: &str,
    field: &str,
) -> Result<T, String> {
    let attr = attr.ok_or_else(|| format!("a traced {variant} lacks its attribute {field}"))?;
    attr.downcast::<T>().map(|a| *a).map_err(|_| {
        format!(
            "a traced {variant}'s attribute {field} is not a {}",
            std::any::type_name::<T>()
        )
    })
}

/// A rule's answer: the result's shape and dtype, or why the inputs do not fit.
pub(crate) type Inferred = Result<(Shape, DType), String>;

/// The answers of a rule for each of the op's outputs.
pub(crate) type InferredOutputs = Result<Vec<(Shape, DType)>, String>;

/// An op's value, or its values, as the list a session keeps (output 0 first); a rule's answer
/// likewise.
pub(crate) trait IntoOutputs<T> {
    fn into_outputs(self) -> Vec<T>;
}

impl IntoOutputs<Tensor> for Tensor {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self]
    }
}

impl IntoOutputs<Tensor> for Vec<Tensor> {
    fn into_outputs(self) -> Vec<Tensor> {
        self
    }
}

impl IntoOutputs<Tensor> for (Tensor, Tensor) {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self.0, self.1]
    }
}

impl IntoOutputs<Tensor> for (Tensor, Tensor, Tensor) {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self.0, self.1, self.2]
    }
}

impl IntoOutputs<(Shape, DType)> for (Shape, DType) {
    fn into_outputs(self) -> Vec<(Shape, DType)> {
        vec![self]
    }
}

impl IntoOutputs<(Shape, DType)> for Vec<(Shape, DType)> {
    fn into_outputs(self) -> Vec<(Shape, DType)> {
        self
    }
}

/// What is known of a value's shape and dtype.
pub(crate) type Partial = (Option<Shape>, Option<DType>);

/// `name(a, b)`, or `name` without attributes.
pub(crate) fn call_name(name: &str, attributes: &[String]) -> String {
    if attributes.is_empty() {
        name.to_string()
    } else {
        format!("{name}({})", attributes.join(", "))
    }
}

impl Op {
    /// The op of a traced event (`tensor::trace`): its variant's name and its attributes.
    pub(crate) fn from_trace(
        variant: &str,
        attrs: Vec<Box<dyn std::any::Any>>,
    ) -> Result<Op, String> {
        let mut attrs = attrs.into_iter();
        match variant {
            "Unary" => Ok(Op::Unary(traced_attr(attrs.next(), variant, "op")?)),
            "Binary" => Ok(Op::Binary(traced_attr(attrs.next(), variant, "op")?)),
            _ => Op::declared_from_trace(variant, attrs.collect())
                .unwrap_or_else(|| Err(format!("no graph op is named {variant}"))),
        }
    }

    /// The op's name in listings.
    pub fn name(&self) -> String {
        match self {
            Op::Placeholder { name, .. } => format!("placeholder {name:?}"),
            Op::Variable { name, .. } => format!("variable {name:?}"),
            Op::Constant(t) => format!("constant {:?}", t.shape()),
            Op::Unary(u) => u.to_string(),
            Op::Binary(b) => b.to_string(),
            Op::Grad => "grad".into(),
            Op::Minimize(m) => format!("minimize({})", m.describe()),
            Op::Output { index } => format!("output({index})"),
            op => op.declared_name().expect("every other op is declared"),
        }
    }

    /// Whether the op computes from its inputs alone, so that equal ops on equal inputs may be
    /// merged and ops on constants folded.
    pub(crate) fn is_pure(&self) -> bool {
        !matches!(
            self,
            Op::Placeholder { .. } | Op::Variable { .. } | Op::Constant(_) | Op::Minimize(_)
        )
    }

    /// Each output's shape and dtype where every input's is known; where one is not, what the
    /// op alone fixes (a reshape's shape, a gradient's), the rest unknown. An `Output` node's
    /// is its source's, which the graph looks up.
    pub(crate) fn infer_partial(&self, inputs: &[Partial]) -> Result<Vec<Partial>, String> {
        if let Op::Placeholder { shape, dtype, .. } = self {
            return Ok(vec![(shape.clone(), *dtype)]);
        }
        let all: Option<Vec<(Shape, DType)>> = inputs
            .iter()
            .map(|(s, d)| Some((s.clone()?, (*d)?)))
            .collect();
        if let Some(all) = all {
            let outputs = self.infer(&all)?;
            return Ok(outputs
                .into_iter()
                .map(|(s, d)| (Some(s), Some(d)))
                .collect());
        }
        Ok(match self {
            Op::Reshape { shape } | Op::BroadcastTo { shape } => {
                vec![(Some(known(shape)), inputs[0].1)]
            }
            Op::Grad => {
                if let Some(of) = &inputs[0].0 {
                    one_element(of, "gradients need a one-element value to differentiate")?;
                }
                vec![inputs[1].clone()]
            }
            Op::Minimize(_) => vec![(Some(Vec::new()), inputs[0].1)],
            Op::Sum {} | Op::Mean {} | Op::Max {} | Op::Min {} => vec![(Some(Vec::new()), None)],
            _ => vec![(None, None); self.outputs()],
        })
    }

    /// Each output's shape and dtype from the inputs', or why they do not fit.
    pub(super) fn infer(&self, inputs: &[(Shape, DType)]) -> InferredOutputs {
        let one = match self {
            Op::Placeholder { .. } | Op::Output { .. } => {
                unreachable!("the graph knows a placeholder's and an output's shape")
            }
            Op::Variable { param, .. } => (known(&param.shape()), param.dtype()),
            Op::Constant(t) => (known(t.shape()), t.dtype()),
            Op::Unary(u) => (inputs[0].0.clone(), u.result_dtype(inputs[0].1)?),
            Op::Binary(op) => {
                let ((a, da), (b, db)) = (&inputs[0], &inputs[1]);
                (broadcast(a, b)?, op.result_dtype(*da, *db)?)
            }
            Op::Grad => {
                let ((of, _), (wrt, d)) = (&inputs[0], &inputs[1]);
                one_element(of, "gradients need a one-element value to differentiate")?;
                (wrt.clone(), float_rule(*d)?)
            }
            Op::Minimize(_) => {
                let (of, d) = &inputs[0];
                one_element(of, "minimize needs a one-element loss")?;
                (Vec::new(), *d)
            }
            op => {
                return op
                    .declared_infer(inputs)
                    .expect("every other op is declared")
            }
        };
        Ok(vec![one])
    }

    /// How a compiled graph may fuse the op: the element-wise tables' ops and the declared
    /// ops whose entries say `fusion(Elementwise)` run in fused blocks.
    pub fn fusion(&self) -> Fusion {
        match self {
            Op::Unary(_) | Op::Binary(_) => Fusion::Elementwise,
            op => op.declared_fusion().unwrap_or(Fusion::Opaque),
        }
    }

    /// The op on evaluated inputs, one value per output (leaves, gradients and outputs are
    /// evaluated by the session).
    pub(crate) fn eval(&self, x: &[Tensor]) -> Vec<Tensor> {
        match self {
            Op::Unary(u) => vec![u.apply(&x[0])],
            Op::Binary(b) => vec![b.apply(&x[0], &x[1])],
            Op::Constant(t) => vec![t.clone()],
            Op::Placeholder { .. }
            | Op::Variable { .. }
            | Op::Grad
            | Op::Minimize(_)
            | Op::Output { .. } => {
                unreachable!("the session evaluates leaves, gradients, training ops and outputs")
            }
            op => op.declared_eval(x).expect("every other op is declared"),
        }
    }

    /// A key equal for ops that compute the same function of the same inputs.
    pub(crate) fn key(&self) -> String {
        format!("{self:?}")
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Unary(u) => write!(f, "{u}"),
            _ => f.write_str(&self.name()),
        }
    }
}

/// `Err(what, shape)` unless `s` holds one element.
pub(super) fn one_element(s: &Shape, what: &str) -> Result<(), String> {
    if s.iter().all(|d| *d == Some(1)) {
        Ok(())
    } else {
        Err(format!("{what}, got {}", show(s)))
    }
}

/// `[?, 784]`, or `[..]` when not even the rank is known.
pub(crate) fn show_opt(s: &Option<Shape>) -> String {
    s.as_ref().map_or("[..]".to_string(), |s| show(s))
}
