//! The static graph's shape and dtype inference: what each op makes of its inputs' shapes
//! (some axes free) and dtypes, or why they do not fit. The shape and dtype rules are the
//! eager ops' own (`ops::shape`, `ops::dtype` and the rule beside each op), so the two accept
//! the same inputs; a session also checks every first run's results against what was
//! inferred.

use super::op::{Binary, Op, Reduce};
use crate::ops::concat::{cat_rule, pad_rule};
use crate::ops::conv::{conv_rule, conv_weight_rule};
use crate::ops::dtype::{
    float_rule, floats_rule, joined_rule, positions_rule, promoted_float_rule, sum_rule,
};
use crate::ops::index::{index_add_rule, index_select_rule};
use crate::ops::matmul::matmul_rule;
use crate::ops::norm::{layer_norm_dtype, layer_norm_rule};
use crate::ops::pool::{pool_rule, resize_rule};
use crate::ops::reduce::{reduce_rule, sum_to_rule};
use crate::ops::shape::{broadcast, check_axis, known, show, Shape};
use crate::ops::view::{
    broadcast_to_rule, flatten_from_rule, narrow_rule, permute_rule, reshape_rule, squeeze_rule,
    unsqueeze_rule,
};
use crate::tensor::DType;

/// A rule's answer: the result's shape and dtype, or why the inputs do not fit.
type Inferred = Result<(Shape, DType), String>;

impl Op {
    /// The result's shape and dtype from the inputs', or why they do not fit.
    pub(super) fn infer(&self, inputs: &[(Shape, DType)]) -> Inferred {
        let first = || (&inputs[0].0, inputs[0].1);
        match self {
            Op::Placeholder { .. } => unreachable!("a placeholder's shape and dtype are its own"),
            Op::Variable { param, .. } => Ok((known(&param.shape()), param.dtype())),
            Op::Constant(t) => Ok((known(t.shape()), t.dtype())),
            Op::Unary(u) => Ok((inputs[0].0.clone(), u.result_dtype(inputs[0].1)?)),
            Op::Softmax(a) | Op::LogSoftmax(a) => {
                check_axis(*a, &inputs[0].0)?;
                Ok((inputs[0].0.clone(), float_rule(inputs[0].1)?))
            }
            Op::Binary(op) => binary(*op, &inputs[0], &inputs[1]),
            Op::Matmul => {
                let ((a, da), (b, db)) = (&inputs[0], &inputs[1]);
                Ok((matmul_rule(a, b)?, promoted_float_rule(*da, *db)?))
            }
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => {
                let (s, d) = first();
                let all: Vec<usize> = (0..s.len()).collect();
                let out = reduce_rule(s, axes.as_deref().unwrap_or(&all), *keepdim)?;
                let dtype = if *kind == Reduce::Sum {
                    sum_rule(d)?
                } else {
                    float_rule(d)?
                };
                Ok((out, dtype))
            }
            Op::SumTo(to) => Ok((sum_to_rule(first().0, to)?, float_rule(first().1)?)),
            Op::Conv2d(_)
            | Op::ConvTranspose2d(_)
            | Op::Conv2dWeight(..)
            | Op::Pool { .. }
            | Op::AdaptiveAvgPool2d(..)
            | Op::UpsampleNearest2d(..) => self.infer_spatial(inputs),
            Op::Reshape(_)
            | Op::Permute(_)
            | Op::BroadcastTo(_)
            | Op::Cat(_)
            | Op::Narrow { .. }
            | Op::FlattenFrom(_)
            | Op::Squeeze(_)
            | Op::Unsqueeze(_)
            | Op::Pad(..)
            | Op::IndexSelect(..)
            | Op::IndexAdd(..) => self.infer_layout(inputs),
            Op::StopGradient => Ok(inputs[0].clone()),
            Op::ToDtype(to) => Ok((inputs[0].0.clone(), *to)),
            Op::WhereCond => {
                let ((c, _), (a, da), (b, db)) = (&inputs[0], &inputs[1], &inputs[2]);
                let d = promoted_float_rule(*da, *db)?;
                Ok((broadcast(&broadcast(c, a)?, b)?, d))
            }
            Op::LayerNorm(_) => {
                let shapes = [0, 1, 2].map(|i| inputs[i].0.clone());
                let dtypes = [0, 1, 2].map(|i| inputs[i].1);
                Ok((layer_norm_rule(&shapes)?, layer_norm_dtype(dtypes)?))
            }
            Op::ArgExtremum { axis, .. } => {
                let (s, d) = first();
                let d = positions_rule(d)?;
                check_axis(*axis, s)?;
                let out = (0..s.len()).filter(|&i| i != *axis).map(|i| s[i]).collect();
                Ok((out, d))
            }
            Op::Grad => {
                let ((of, _), (wrt, d)) = (&inputs[0], &inputs[1]);
                one_element(of, "gradients need a one-element value to differentiate")?;
                Ok((wrt.clone(), float_rule(*d)?))
            }
            Op::Minimize(_) => {
                let (of, d) = first();
                one_element(of, "minimize needs a one-element loss")?;
                Ok((Vec::new(), d))
            }
        }
    }

    /// The ops over `[N, C, H, W]` planes: convolutions, pooling, resampling.
    fn infer_spatial(&self, inputs: &[(Shape, DType)]) -> Inferred {
        let first = || (&inputs[0].0, inputs[0].1);
        match self {
            Op::Conv2d(o) | Op::ConvTranspose2d(o) => {
                let ((x, dx), (w, dw)) = (&inputs[0], &inputs[1]);
                let d = floats_rule(&[("input", *dx), ("weight", *dw)])?;
                let transposed = matches!(self, Op::ConvTranspose2d(_));
                Ok((conv_rule(x, w, o, transposed)?, d))
            }
            Op::Conv2dWeight(k, o) => {
                let ((x, dx), (dy, ddy)) = (&inputs[0], &inputs[1]);
                let d = floats_rule(&[("input", *dx), ("output gradient", *ddy)])?;
                Ok((conv_weight_rule(x, dy, *k, o)?, d))
            }
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => {
                let out = pool_rule(first().0, [*kernel; 2], [*stride; 2], [*padding; 2])?;
                Ok((out, float_rule(first().1)?))
            }
            Op::AdaptiveAvgPool2d(h, w) => {
                let out = resize_rule(first().0, (*h, *w), true)?;
                Ok((out, float_rule(first().1)?))
            }
            // Built from views: it moves elements, integers included.
            Op::UpsampleNearest2d(h, w) => same_dtype(first(), |s| resize_rule(s, (*h, *w), false)),
            _ => unreachable!("{} is not a spatial op", self.name()),
        }
    }

    /// The ops that rearrange, join or select elements.
    fn infer_layout(&self, inputs: &[(Shape, DType)]) -> Inferred {
        let first = || (&inputs[0].0, inputs[0].1);
        match self {
            Op::Reshape(to) => same_dtype(first(), |s| reshape_rule(s, to)),
            Op::Permute(p) => same_dtype(first(), |s| permute_rule(s, p)),
            Op::BroadcastTo(to) => same_dtype(first(), |s| broadcast_to_rule(s, to)),
            Op::Cat(axis) => {
                let shapes: Vec<Shape> = inputs.iter().map(|(s, _)| s.clone()).collect();
                let d = joined_rule(inputs.iter().map(|(_, d)| *d));
                Ok((cat_rule(&shapes, *axis)?, d))
            }
            Op::Narrow { axis, start, len } => {
                same_dtype(first(), |s| narrow_rule(s, *axis, *start, *len))
            }
            Op::FlattenFrom(start) => same_dtype(first(), |s| flatten_from_rule(s, *start)),
            Op::Squeeze(axis) => same_dtype(first(), |s| squeeze_rule(s, *axis)),
            Op::Unsqueeze(axis) => same_dtype(first(), |s| unsqueeze_rule(s, *axis)),
            Op::Pad(pads, _) => same_dtype(first(), |s| pad_rule(s, pads)),
            Op::IndexSelect(axis, indices) => {
                same_dtype(first(), |s| index_select_rule(s, *axis, indices))
            }
            Op::IndexAdd(axis, indices) => {
                let ((s, d), (src, _)) = (&inputs[0], &inputs[1]);
                let out = index_add_rule(s, src, *axis, indices)?;
                Ok((out, float_rule(*d)?))
            }
            _ => unreachable!("{} is not a layout op", self.name()),
        }
    }
}

/// An op that keeps its input's dtype, with its shape rule.
fn same_dtype(
    (s, d): (&Shape, DType),
    rule: impl FnOnce(&Shape) -> Result<Shape, String>,
) -> Inferred {
    Ok((rule(s)?, d))
}

/// The eager op's dtype rule ([`Binary::result_dtype`]) over the broadcast shape.
fn binary(op: Binary, (a, da): &(Shape, DType), (b, db): &(Shape, DType)) -> Inferred {
    let d = op.result_dtype(*da, *db)?;
    Ok((broadcast(a, b)?, d))
}

/// `Err(what, shape)` unless `s` holds one element.
pub(super) fn one_element(s: &Shape, what: &str) -> Result<(), String> {
    if s.iter().all(|d| *d == Some(1)) {
        Ok(())
    } else {
        Err(format!("{what}, got {}", show(s)))
    }
}
