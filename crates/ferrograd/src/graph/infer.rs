//! The static graph's shape and dtype rules: what each op makes of its inputs' shapes (some
//! axes free) and dtypes, or why they do not fit. A session checks every first run's results
//! against these rules, so they cannot drift from the eager ops unnoticed.

use super::op::{known, show, Binary, Op, Reduce, Shape};
use crate::ops::conv::ConvOpts;
use crate::tensor::{checked_numel, DType};

/// A rule's answer: the result's shape and dtype, or why the inputs do not fit.
type Inferred = Result<(Shape, DType), String>;

/// `d`, unless it is not a float: then an error naming `what`.
fn float(d: DType, what: &str) -> Result<DType, String> {
    if d.is_float() {
        Ok(d)
    } else {
        Err(format!("{what} needs a float input, got {d}"))
    }
}

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
                Ok((inputs[0].0.clone(), float(inputs[0].1, "this op")?))
            }
            Op::Binary(op) => binary(*op, &inputs[0], &inputs[1]),
            Op::Matmul => {
                let ((a, da), (b, db)) = (&inputs[0], &inputs[1]);
                Ok((matmul_shape(a, b)?, float(da.promote(*db), "matmul")?))
            }
            Op::Reduce {
                axes,
                keepdim,
                kind,
            } => reduce(first(), axes.as_deref(), *keepdim, *kind),
            Op::Reshape(to) => reshape(first(), to),
            Op::Permute(p) => permute(first(), p),
            Op::BroadcastTo(to) => broadcast_to(first(), to),
            Op::SumTo(to) => sum_to(first(), to),
            Op::Conv2d(o) | Op::ConvTranspose2d(o) => {
                let ((x, dx), (w, dw)) = (&inputs[0], &inputs[1]);
                let d = float(dx.promote(*dw), "a convolution")?;
                let transposed = matches!(self, Op::ConvTranspose2d(_));
                Ok((conv_shape(x, w, o, transposed)?, d))
            }
            Op::Conv2dWeight(k, o) => conv_weight(&inputs[0], &inputs[1], *k, o),
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => pool(first(), *kernel, *stride, *padding),
            Op::AdaptiveAvgPool2d(h, w) | Op::UpsampleNearest2d(h, w) => {
                resize(first(), (*h, *w), matches!(self, Op::AdaptiveAvgPool2d(..)))
            }
            Op::Cat(axis) => cat(inputs, *axis),
            Op::Narrow { axis, start, len } => narrow(first(), *axis, *start, *len),
            Op::FlattenFrom(start) => flatten_from(first(), *start),
            Op::Squeeze(axis) => squeeze(first(), *axis),
            Op::Unsqueeze(axis) => unsqueeze(first(), *axis),
            Op::Pad(pads, _) => pad(first(), pads),
            Op::IndexSelect(axis, indices) => index_select(first(), *axis, indices),
            Op::IndexAdd(axis, indices) => index_add(&inputs[0], &inputs[1].0, *axis, indices),
            Op::StopGradient => Ok(inputs[0].clone()),
            Op::ToDtype(to) => Ok((inputs[0].0.clone(), *to)),
            Op::WhereCond => {
                let ((c, _), (a, da), (b, db)) = (&inputs[0], &inputs[1], &inputs[2]);
                let d = float(da.promote(*db), "where_cond")?;
                Ok((broadcast(&broadcast(c, a)?, b)?, d))
            }
            Op::LayerNorm(_) => layer_norm(inputs),
            Op::ArgExtremum { axis, .. } => {
                let (s, d) = first();
                float(d, "argmax and argmin")?;
                check_axis(*axis, s)?;
                let out = (0..s.len()).filter(|&i| i != *axis).map(|i| s[i]).collect();
                Ok((out, DType::I64))
            }
            Op::Grad => {
                let ((of, _), (wrt, d)) = (&inputs[0], &inputs[1]);
                one_element(of, "gradients need a one-element value to differentiate")?;
                Ok((wrt.clone(), float(*d, "a gradient")?))
            }
            Op::Minimize(_) => {
                let (of, d) = first();
                one_element(of, "minimize needs a one-element loss")?;
                Ok((Vec::new(), d))
            }
        }
    }
}

/// The eager op's dtype rule ([`Binary::result_dtype`]) over the broadcast shape.
fn binary(op: Binary, (a, da): &(Shape, DType), (b, db): &(Shape, DType)) -> Inferred {
    let d = op.result_dtype(*da, *db)?;
    Ok((broadcast(a, b)?, d))
}

fn reduce(
    (s, d): (&Shape, DType),
    axes: Option<&[usize]>,
    keepdim: bool,
    kind: Reduce,
) -> Inferred {
    let d = float(d, &format!("{kind:?}").to_lowercase())?;
    let all: Vec<usize> = (0..s.len()).collect();
    let axes = axes.unwrap_or(&all);
    for (k, &a) in axes.iter().enumerate() {
        check_axis(a, s)?;
        if axes[..k].contains(&a) {
            return Err(format!("axis {a} given twice"));
        }
    }
    let out = (0..s.len())
        .filter_map(|i| match (axes.contains(&i), keepdim) {
            (true, true) => Some(Some(1)),
            (true, false) => None,
            (false, _) => Some(s[i]),
        })
        .collect();
    Ok((out, d))
}

/// The known sizes must divide the target's count (free axes make up the rest).
fn reshape((s, d): (&Shape, DType), to: &[usize]) -> Inferred {
    let fixed: Vec<usize> = s.iter().flatten().copied().collect();
    let (Some(fixed), Some(target)) = (checked_numel(&fixed), checked_numel(to)) else {
        return Err(format!(
            "cannot reshape {} into {to:?}: too many elements",
            show(s)
        ));
    };
    let complete = s.iter().all(Option::is_some);
    if (complete && fixed != target) || (!complete && fixed != 0 && !target.is_multiple_of(fixed)) {
        return Err(format!("cannot reshape {} into {to:?}", show(s)));
    }
    Ok((known(to), d))
}

fn permute((s, d): (&Shape, DType), p: &[usize]) -> Inferred {
    let mut seen = vec![false; s.len()];
    let valid = p.len() == s.len()
        && p.iter()
            .all(|&i| i < s.len() && !std::mem::replace(&mut seen[i], true));
    if !valid {
        return Err(format!("{p:?} is not a permutation of {}", show(s)));
    }
    Ok((p.iter().map(|&i| s[i]).collect(), d))
}

fn broadcast_to((s, d): (&Shape, DType), to: &[usize]) -> Inferred {
    let lead = to.len().checked_sub(s.len());
    let fits = lead.is_some_and(|lead| {
        s.iter()
            .zip(&to[lead..])
            .all(|(n, &t)| n.is_none_or(|n| n == 1 || n == t))
    });
    if !fits {
        return Err(format!("cannot broadcast {} to {to:?}", show(s)));
    }
    Ok((known(to), d))
}

/// The adjoint of `broadcast_to`: `to` must broadcast to `s`.
fn sum_to((s, d): (&Shape, DType), to: &[usize]) -> Inferred {
    let lead = s.len().checked_sub(to.len());
    let fits = lead.is_some_and(|lead| {
        s[lead..]
            .iter()
            .zip(to)
            .all(|(n, &t)| t == 1 || n.is_none_or(|n| n == t))
    });
    if !fits {
        return Err(format!("{to:?} does not broadcast to {}", show(s)));
    }
    Ok((known(to), float(d, "sum_to")?))
}

fn conv_weight(
    (x, dx): &(Shape, DType),
    (dy, ddy): &(Shape, DType),
    (kh, kw): (usize, usize),
    o: &ConvOpts,
) -> Inferred {
    if x.len() != 4 || dy.len() != 4 || o.groups == 0 {
        return Err(format!(
            "takes [N, C, H, W] twice, got {} and {}",
            show(x),
            show(dy)
        ));
    }
    let cg = x[1].map(|c| c / o.groups);
    Ok((
        vec![dy[1], cg, Some(kh), Some(kw)],
        float(dx.promote(*ddy), "conv2d_weight")?,
    ))
}

fn pool((s, d): (&Shape, DType), kernel: usize, stride: usize, padding: usize) -> Inferred {
    if s.len() != 4 || kernel == 0 || stride == 0 || padding > kernel / 2 {
        return Err(format!(
            "pooling takes [N, C, H, W], a positive kernel and stride and padding up to half \
             the kernel, got {}",
            show(s)
        ));
    }
    let out = |n: Option<usize>| -> Result<Option<usize>, String> {
        let Some(n) = n else { return Ok(None) };
        (n + 2 * padding)
            .checked_sub(kernel)
            .map(|r| Some(r / stride + 1))
            .ok_or_else(|| format!("a kernel of {kernel} does not fit {}", show(s)))
    };
    Ok((
        vec![s[0], s[1], out(s[2])?, out(s[3])?],
        float(d, "pooling")?,
    ))
}

/// Adaptive pooling to `h × w`, or nearest upsampling by `h × w`.
fn resize((s, d): (&Shape, DType), (h, w): (usize, usize), adaptive: bool) -> Inferred {
    if s.len() != 4 || h == 0 || w == 0 {
        return Err(format!(
            "takes [N, C, H, W] and positive sizes, got {}",
            show(s)
        ));
    }
    let out = if adaptive {
        vec![s[0], s[1], Some(h), Some(w)]
    } else {
        vec![s[0], s[1], s[2].map(|n| n * h), s[3].map(|n| n * w)]
    };
    Ok((out, float(d, "this op")?))
}

fn cat(inputs: &[(Shape, DType)], axis: usize) -> Inferred {
    let (first, d) = &inputs[0];
    check_axis(axis, first)?;
    let mut out = first.clone();
    for (s, _) in &inputs[1..] {
        let fits =
            s.len() == first.len() && (0..s.len()).all(|i| i == axis || same(s[i], first[i]));
        if !fits {
            return Err(format!("{} does not join {}", show(s), show(first)));
        }
        out[axis] = out[axis].zip(s[axis]).map(|(a, b)| a + b);
    }
    let d = inputs.iter().fold(*d, |acc, (_, d)| acc.promote(*d));
    Ok((out, d))
}

fn narrow((s, d): (&Shape, DType), axis: usize, start: usize, len: usize) -> Inferred {
    check_axis(axis, s)?;
    if s[axis].is_some_and(|n| start + len > n) {
        return Err(format!(
            "{len} elements from {start} exceed axis {axis} of {}",
            show(s)
        ));
    }
    let mut out = s.clone();
    out[axis] = Some(len);
    Ok((out, d))
}

fn flatten_from((s, d): (&Shape, DType), start: usize) -> Inferred {
    if start > s.len() {
        return Err(format!("axis {start} out of range for {}", show(s)));
    }
    let mut out = s[..start].to_vec();
    out.push(s[start..].iter().copied().product::<Option<usize>>());
    Ok((out, d))
}

fn squeeze((s, d): (&Shape, DType), axis: usize) -> Inferred {
    check_axis(axis, s)?;
    if !same(s[axis], Some(1)) {
        return Err(format!("axis {axis} of {} is not of size 1", show(s)));
    }
    let mut out = s.clone();
    out.remove(axis);
    Ok((out, d))
}

fn unsqueeze((s, d): (&Shape, DType), axis: usize) -> Inferred {
    if axis > s.len() {
        return Err(format!("axis {axis} out of range for {}", show(s)));
    }
    let mut out = s.clone();
    out.insert(axis, Some(1));
    Ok((out, d))
}

fn pad((s, d): (&Shape, DType), pads: &[(usize, usize)]) -> Inferred {
    if pads.len() != s.len() {
        return Err(format!(
            "{} (before, after) pairs for {}",
            pads.len(),
            show(s)
        ));
    }
    let out = s
        .iter()
        .zip(pads)
        .map(|(n, (a, b))| n.map(|n| n + a + b))
        .collect();
    Ok((out, d))
}

fn index_select((s, d): (&Shape, DType), axis: usize, indices: &[usize]) -> Inferred {
    check_axis(axis, s)?;
    if let Some(i) = indices.iter().find(|&&i| s[axis].is_some_and(|n| i >= n)) {
        return Err(format!(
            "index {i} out of range for axis {axis} of {}",
            show(s)
        ));
    }
    let mut out = s.clone();
    out[axis] = Some(indices.len());
    Ok((out, d))
}

fn index_add((s, d): &(Shape, DType), src: &Shape, axis: usize, indices: &[usize]) -> Inferred {
    check_axis(axis, s)?;
    let mut expected = s.clone();
    expected[axis] = Some(indices.len());
    let fits = src.len() == s.len() && src.iter().zip(&expected).all(|(a, b)| same(*a, *b));
    if !fits || indices.iter().any(|&i| s[axis].is_some_and(|n| i >= n)) {
        return Err(format!(
            "source {} and {} indices do not fit {} along axis {axis}",
            show(src),
            indices.len(),
            show(s)
        ));
    }
    Ok((s.clone(), float(*d, "index_add")?))
}

/// Layer normalisation's rule, the eager op's: input `[..., D]`, weight and bias `[D]`, one
/// float dtype for the three.
fn layer_norm(inputs: &[(Shape, DType)]) -> Inferred {
    let ((x, dx), (w, dw), (b, db)) = (&inputs[0], &inputs[1], &inputs[2]);
    let d = x.last().copied().flatten();
    let fits = |p: &Shape| p.len() == 1 && (d.is_none() || p[0].is_none() || p[0] == d);
    if x.is_empty() || d == Some(0) || !fits(w) || !fits(b) {
        return Err(format!(
            "layer_norm needs input [..., D] with weight and bias [D], got {}, {} and {}",
            show(x),
            show(w),
            show(b)
        ));
    }
    if dw != dx || db != dx {
        return Err(format!(
            "layer_norm needs one dtype for input, weight and bias, got {dx}, {dw} and {db}"
        ));
    }
    Ok((x.clone(), float(*dx, "layer_norm")?))
}

fn check_axis(a: usize, s: &Shape) -> Result<(), String> {
    if a < s.len() {
        Ok(())
    } else {
        Err(format!("axis {a} out of range for {}", show(s)))
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

/// Whether two sizes may be equal (a free one may be anything).
fn same(a: Option<usize>, b: Option<usize>) -> bool {
    a.zip(b).is_none_or(|(a, b)| a == b)
}

/// The output of a convolution (or of its transpose) of `x` `[N, C, H, W]` by `w`, with
/// PyTorch's size formulas; known sizes are checked against the weight and the groups.
fn conv_shape(x: &Shape, w: &Shape, o: &ConvOpts, transposed: bool) -> Result<Shape, String> {
    if x.len() != 4 || w.len() != 4 || o.groups == 0 {
        return Err(format!(
            "convolution takes [N, C, H, W] and a 4-D weight, got {} and {}",
            show(x),
            show(w)
        ));
    }
    let positive = o.stride.iter().chain(&o.dilation).all(|&v| v > 0)
        && w[2..].iter().all(|k| k.is_none_or(|k| k > 0));
    let output_padding_fits =
        !transposed || (0..2).all(|i| o.output_padding[i] < o.stride[i].max(o.dilation[i]));
    if !positive || !output_padding_fits {
        return Err(format!(
            "stride, dilation and kernel must be positive (and a transposed convolution's \
             output padding below the stride or the dilation), got {o:?} and weight {}",
            show(w)
        ));
    }
    let g = o.groups;
    if transposed && w[0].is_some_and(|c| c % g != 0) {
        return Err(format!("weight {} does not fit {g} group(s)", show(w)));
    }
    let (channels_in, channels_out) = if transposed {
        (w[0], w[1].map(|c| c * g))
    } else {
        (w[1].map(|c| c * g), w[0])
    };
    if !same(x[1], channels_in) || channels_out.is_some_and(|c| c % g != 0) {
        return Err(format!(
            "input {} and weight {} do not fit {g} group(s)",
            show(x),
            show(w)
        ));
    }
    let size = |i: usize| -> Result<Option<usize>, String> {
        let (Some(n), Some(k)) = (x[2 + i], w[2 + i]) else {
            return Ok(None);
        };
        let (s, p, d) = (o.stride[i], o.padding[i], o.dilation[i]);
        let span = d * (k - 1) + 1;
        let out = if transposed {
            ((n.max(1) - 1) * s + span + o.output_padding[i]).checked_sub(2 * p)
        } else {
            (n + 2 * p).checked_sub(span).map(|r| r / s + 1)
        };
        out.filter(|&v| v > 0).map(Some).ok_or_else(|| {
            format!(
                "a {k}-wide kernel with {o:?} leaves no output of {}",
                show(x)
            )
        })
    };
    Ok(vec![x[0], channels_out, size(0)?, size(1)?])
}

/// numpy broadcasting where some sizes are free: a free axis against a size above 1 takes it
/// (anything else would fail at run time), against 1 or another free axis stays free.
fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let n = a.len().max(b.len());
    let at = |s: &Shape, i: usize| (i + s.len()).checked_sub(n).map_or(Some(1), |j| s[j]);
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (Some(1), d) | (d, Some(1)) => Ok(d),
            (Some(x), Some(y)) if x == y => Ok(Some(x)),
            (None, d) | (d, None) => Ok(d),
            _ => Err(format!(
                "shapes {} and {} do not broadcast",
                show(a),
                show(b)
            )),
        })
        .collect()
}

/// numpy's matmul: a 1-D operand is a row (left) or a column (right) that the result drops.
fn matmul_shape(a: &Shape, b: &Shape) -> Result<Shape, String> {
    if a.is_empty() || b.is_empty() {
        return Err(format!(
            "matmul of a 0-d operand: {} @ {}",
            show(a),
            show(b)
        ));
    }
    if a.len() == 1 || b.len() == 1 {
        let a2 = if a.len() == 1 {
            vec![Some(1), a[0]]
        } else {
            a.clone()
        };
        let b2 = if b.len() == 1 {
            vec![b[0], Some(1)]
        } else {
            b.clone()
        };
        let mut out = matmul_shape(&a2, &b2)?;
        if b.len() == 1 {
            out.pop();
        }
        if a.len() == 1 {
            out.remove(out.len() - usize::from(b.len() != 1) - 1);
        }
        return Ok(out);
    }
    let (ka, kb) = (a[a.len() - 1], b[b.len() - 2]);
    if let (Some(x), Some(y)) = (ka, kb) {
        if x != y {
            return Err(format!(
                "inner dimensions differ: {} @ {}",
                show(a),
                show(b)
            ));
        }
    }
    let mut out = broadcast(&a[..a.len() - 2].to_vec(), &b[..b.len() - 2].to_vec())?;
    out.push(a[a.len() - 2]);
    out.push(b[b.len() - 1]);
    Ok(out)
}
