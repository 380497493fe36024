//! The ops a graph node can hold: data that says what the node computes, with each op's shape
//! rule and its evaluation (a call of the eager `Tensor` op) side by side. Gradients need no
//! rule here: a session evaluates nodes with the eager ops, and the eager engine differentiates
//! them, so the project keeps one table of derivatives.

use std::fmt;

use crate::autograd::Param;
use crate::ops::conv::ConvOpts;
use crate::tensor::{checked_numel, DType, Tensor};

/// A shape known at build time, axis by axis: `None` is a free axis (a batch fed at run time).
pub type Shape = Vec<Option<usize>>;

/// Element-wise functions of one input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    /// −x.
    Neg,
    /// eˣ.
    Exp,
    /// ln x.
    Log,
    /// √x.
    Sqrt,
    /// x².
    Square,
    /// |x|.
    Abs,
    /// tanh x.
    Tanh,
    /// 1 / (1 + e⁻ˣ).
    Sigmoid,
    /// max(x, 0).
    Relu,
    /// ln(1 + eˣ).
    Softplus,
    /// x Φ(x).
    Gelu,
    /// sin x.
    Sin,
    /// cos x.
    Cos,
    /// xᵖ.
    Powf(f64),
    /// x + s.
    AddScalar(f64),
    /// x · s.
    MulScalar(f64),
    /// x / s.
    DivScalar(f64),
    /// s − x.
    RsubScalar(f64),
    /// s / x.
    RdivScalar(f64),
    /// x for x > 0, slope · x otherwise.
    LeakyRelu(f64),
    /// x for x > 0, α(eˣ − 1) otherwise.
    Elu(f64),
    /// erf x.
    Erf,
    /// −1, 0 or 1.
    Sign,
    /// x limited to [min, max].
    Clamp(f64, f64),
}

impl Unary {
    fn apply(self, x: &Tensor) -> Tensor {
        match self {
            Unary::Neg => x.neg(),
            Unary::Exp => x.exp(),
            Unary::Log => x.log(),
            Unary::Sqrt => x.sqrt(),
            Unary::Square => x.square(),
            Unary::Abs => x.abs(),
            Unary::Tanh => x.tanh(),
            Unary::Sigmoid => x.sigmoid(),
            Unary::Relu => x.relu(),
            Unary::Softplus => x.softplus(),
            Unary::Gelu => x.gelu(),
            Unary::Sin => x.sin(),
            Unary::Cos => x.cos(),
            Unary::Powf(p) => x.powf(p),
            Unary::AddScalar(s) => x.add_scalar(s),
            Unary::MulScalar(s) => x.mul_scalar(s),
            Unary::DivScalar(s) => x.div_scalar(s),
            Unary::RsubScalar(s) => x.rsub_scalar(s),
            Unary::RdivScalar(s) => x.rdiv_scalar(s),
            Unary::LeakyRelu(s) => x.leaky_relu(s),
            Unary::Elu(a) => x.elu(a),
            Unary::Erf => x.erf(),
            Unary::Sign => x.sign(),
            Unary::Clamp(lo, hi) => x.clamp(lo, hi),
        }
    }
}

/// Element-wise functions of two inputs, with numpy broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// a + b.
    Add,
    /// a − b.
    Sub,
    /// a · b.
    Mul,
    /// a / b.
    Div,
    /// max(a, b).
    Maximum,
    /// min(a, b).
    Minimum,
    /// 1 where a == b, else 0 (no derivative).
    Eq,
    /// 1 where a < b, else 0 (no derivative).
    Lt,
    /// 1 where a > b, else 0 (no derivative).
    Gt,
    /// 1 where a ≠ b, else 0 (no derivative).
    Ne,
    /// 1 where a ≤ b, else 0 (no derivative).
    Le,
    /// 1 where a ≥ b, else 0 (no derivative).
    Ge,
}

impl Binary {
    fn is_comparison(self) -> bool {
        matches!(
            self,
            Binary::Eq | Binary::Lt | Binary::Gt | Binary::Ne | Binary::Le | Binary::Ge
        )
    }
}

/// Reductions over axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Σ.
    Sum,
    /// Mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// What a node computes.
#[derive(Clone)]
pub enum Op {
    /// A value fed at run time, with an optional shape (`None` axes free) and dtype.
    Placeholder {
        /// The name errors and listings use.
        name: String,
        /// The shape fed values must have, when given.
        shape: Option<Shape>,
        /// The dtype fed values must have, when given.
        dtype: Option<DType>,
    },
    /// State that keeps its value across runs, updated by training ops.
    Variable {
        /// The name in listings and saved files.
        name: String,
        /// The value, a tracked leaf so that the eager engine differentiates it.
        param: Param,
    },
    /// A value fixed when the graph is built.
    Constant(Tensor),
    /// An element-wise function.
    Unary(Unary),
    /// An element-wise function of two inputs.
    Binary(Binary),
    /// The matrix product (batched, with broadcast batch axes).
    Matmul,
    /// A reduction over `axes` (`None`: all of them).
    Reduce {
        /// Which reduction.
        kind: Reduce,
        /// The reduced axes, or every axis.
        axes: Option<Vec<usize>>,
        /// Whether reduced axes stay as size 1.
        keepdim: bool,
    },
    /// The same elements in another shape.
    Reshape(Vec<usize>),
    /// Axes reordered.
    Permute(Vec<usize>),
    /// Repeated to a larger shape.
    BroadcastTo(Vec<usize>),
    /// Softmax along an axis.
    Softmax(usize),
    /// Log-softmax along an axis.
    LogSoftmax(usize),
    /// 2-D convolution of input 0 (`[N, C, H, W]`) by the weight input 1.
    Conv2d(ConvOpts),
    /// The transposed 2-D convolution of input 0 by the weight input 1.
    ConvTranspose2d(ConvOpts),
    /// Max (`max: true`) or average pooling over square windows.
    Pool {
        /// Max pooling, else average pooling.
        max: bool,
        /// Window size.
        kernel: usize,
        /// Step between windows.
        stride: usize,
        /// Padding on every side.
        padding: usize,
    },
    /// The inputs joined along an axis.
    Cat(usize),
    /// Elements `start..start + len` along `axis`.
    Narrow {
        /// The axis.
        axis: usize,
        /// The first element kept.
        start: usize,
        /// How many are kept.
        len: usize,
    },
    /// Axes from this one on merged into one.
    FlattenFrom(usize),
    /// A size-1 axis removed.
    Squeeze(usize),
    /// A size-1 axis inserted at this position.
    Unsqueeze(usize),
    /// Padded with a constant: `(before, after)` per axis.
    Pad(Vec<(usize, usize)>, f64),
    /// The entries at these positions along an axis.
    IndexSelect(usize, Vec<usize>),
    /// Input 1 where input 0 is non-zero, input 2 elsewhere (broadcast).
    WhereCond,
    /// The same values, cut from differentiation.
    StopGradient,
    /// The same values in another dtype.
    ToDtype(DType),
    /// A broadcast result summed back down to this shape.
    SumTo(Vec<usize>),
    /// Input 0 with input 1's entries added at these positions along an axis.
    IndexAdd(usize, Vec<usize>),
    /// The weight gradient of a convolution of input 0 for the output gradient input 1,
    /// with this kernel size.
    Conv2dWeight((usize, usize), ConvOpts),
    /// Average pooling to this output size.
    AdaptiveAvgPool2d(usize, usize),
    /// Nearest-neighbour upsampling by these factors.
    UpsampleNearest2d(usize, usize),
    /// The index of the largest (`max: true`) or smallest element along an axis, as i64.
    ArgExtremum {
        /// Largest, else smallest.
        max: bool,
        /// The axis.
        axis: usize,
    },
    /// The gradient of input 0 (a one-element value) with respect to input 1.
    Grad,
    /// One step of an optimizer on `vars` against the loss (input 0); the loss is its value.
    Minimize(super::train::Minimizer),
}

impl Op {
    /// The op's name in listings.
    pub fn name(&self) -> String {
        match self {
            Op::Placeholder { name, .. } => format!("placeholder {name:?}"),
            Op::Variable { name, .. } => format!("variable {name:?}"),
            Op::Constant(t) => format!("constant {:?}", t.shape()),
            Op::Unary(u) => format!("{u:?}").to_lowercase(),
            Op::Binary(b) => format!("{b:?}").to_lowercase(),
            Op::Matmul => "matmul".into(),
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => match axes {
                None => format!("{kind:?}").to_lowercase(),
                Some(a) => format!(
                    "{}_axes({a:?}, keepdim={keepdim})",
                    format!("{kind:?}").to_lowercase()
                ),
            },
            Op::Reshape(s) => format!("reshape({s:?})"),
            Op::Permute(p) => format!("permute({p:?})"),
            Op::BroadcastTo(s) => format!("broadcast_to({s:?})"),
            Op::Softmax(a) => format!("softmax({a})"),
            Op::LogSoftmax(a) => format!("log_softmax({a})"),
            Op::Conv2d(o) => format!("conv2d({o:?})"),
            Op::ConvTranspose2d(o) => format!("conv_transpose2d({o:?})"),
            Op::Pool {
                max,
                kernel,
                stride,
                padding,
            } => format!(
                "{}_pool2d({kernel}, {stride}, {padding})",
                if *max { "max" } else { "avg" }
            ),
            Op::Cat(a) => format!("cat({a})"),
            Op::Narrow { axis, start, len } => format!("narrow({axis}, {start}, {len})"),
            Op::FlattenFrom(a) => format!("flatten_from({a})"),
            Op::Squeeze(a) => format!("squeeze({a})"),
            Op::Unsqueeze(a) => format!("unsqueeze({a})"),
            Op::Pad(p, v) => format!("pad({p:?}, {v})"),
            Op::IndexSelect(a, i) => format!("index_select({a}, {i:?})"),
            Op::WhereCond => "where_cond".into(),
            Op::StopGradient => "stop_gradient".into(),
            Op::ToDtype(d) => format!("to_dtype({d})"),
            Op::SumTo(s) => format!("sum_to({s:?})"),
            Op::IndexAdd(a, i) => format!("index_add({a}, {i:?})"),
            Op::Conv2dWeight(k, o) => format!("conv2d_weight({k:?}, {o:?})"),
            Op::AdaptiveAvgPool2d(h, w) => format!("adaptive_avg_pool2d({h}, {w})"),
            Op::UpsampleNearest2d(h, w) => format!("upsample_nearest2d({h}, {w})"),
            Op::ArgExtremum { max, axis } => {
                format!("{}({axis})", if *max { "argmax" } else { "argmin" })
            }
            Op::Grad => "grad".into(),
            Op::Minimize(m) => format!("minimize({})", m.describe()),
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

    /// The result's shape and dtype where every input's is known; where one is not, what the
    /// op alone fixes (a reshape's shape, a gradient's), the rest unknown.
    pub(crate) fn infer_partial(
        &self,
        inputs: &[(Option<Shape>, Option<DType>)],
    ) -> Result<(Option<Shape>, Option<DType>), String> {
        if let Op::Placeholder { shape, dtype, .. } = self {
            return Ok((shape.clone(), *dtype));
        }
        let all: Option<Vec<(Shape, DType)>> = inputs
            .iter()
            .map(|(s, d)| Some((s.clone()?, (*d)?)))
            .collect();
        if let Some(all) = all {
            return self.infer(&all).map(|(s, d)| (Some(s), Some(d)));
        }
        Ok(match self {
            Op::Placeholder { shape, dtype, .. } => (shape.clone(), *dtype),
            Op::Reshape(to) | Op::BroadcastTo(to) => (Some(known(to)), inputs[0].1),
            Op::Grad => {
                if let Some(of) = &inputs[0].0 {
                    one_element(of, "gradients need a one-element value to differentiate")?;
                }
                inputs[1].clone()
            }
            Op::Minimize(_) => (Some(Vec::new()), inputs[0].1),
            Op::Reduce {
                axes: None,
                keepdim: false,
                ..
            } => (Some(Vec::new()), inputs[0].1),
            _ => (None, None),
        })
    }

    /// The result's shape and dtype from the inputs', or why they do not fit.
    fn infer(&self, inputs: &[(Shape, DType)]) -> Result<(Shape, DType), String> {
        let float = |d: DType, what: &str| {
            if d.is_float() {
                Ok(d)
            } else {
                Err(format!("{what} needs a float input, got {d}"))
            }
        };
        match self {
            Op::Placeholder { .. } => unreachable!("a placeholder's shape and dtype are its own"),
            Op::Variable { param, .. } => Ok((known(&param.shape()), param.dtype())),
            Op::Constant(t) => Ok((known(t.shape()), t.dtype())),
            Op::Unary(_) | Op::Softmax(_) | Op::LogSoftmax(_) => {
                let (s, d) = &inputs[0];
                if let Op::Softmax(a) | Op::LogSoftmax(a) = self {
                    check_axis(*a, s)?;
                }
                Ok((s.clone(), float(*d, "this op")?))
            }
            Op::Binary(op) => {
                let ((a, da), (b, db)) = (&inputs[0], &inputs[1]);
                // Comparisons give a mask in the promoted dtype, integers included.
                let d = match op {
                    c if c.is_comparison() => da.promote(*db),
                    _ => float(da.promote(*db), "arithmetic")?,
                };
                Ok((broadcast(a, b)?, d))
            }
            Op::Matmul => {
                let ((a, da), (b, db)) = (&inputs[0], &inputs[1]);
                Ok((matmul_shape(a, b)?, float(da.promote(*db), "matmul")?))
            }
            Op::Reduce {
                axes,
                keepdim,
                kind,
            } => {
                let (s, d) = &inputs[0];
                let d = float(*d, &format!("{kind:?}").to_lowercase())?;
                let all: Vec<usize> = (0..s.len()).collect();
                let axes = axes.as_ref().unwrap_or(&all);
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
            Op::Reshape(to) => {
                let (s, d) = &inputs[0];
                // The known sizes must divide the target's count (free axes make up the rest).
                let fixed: Vec<usize> = s.iter().flatten().copied().collect();
                let (fixed, target) = match (checked_numel(&fixed), checked_numel(to)) {
                    (Some(f), Some(t)) => (f, t),
                    _ => {
                        return Err(format!(
                            "cannot reshape {} into {to:?}: too many elements",
                            show(s)
                        ))
                    }
                };
                let complete = s.iter().all(Option::is_some);
                if (complete && fixed != target)
                    || (!complete && fixed != 0 && !target.is_multiple_of(fixed))
                {
                    return Err(format!("cannot reshape {} into {to:?}", show(s)));
                }
                Ok((known(to), *d))
            }
            Op::Permute(p) => {
                let (s, d) = &inputs[0];
                let mut seen = vec![false; s.len()];
                let valid = p.len() == s.len()
                    && p.iter()
                        .all(|&i| i < s.len() && !std::mem::replace(&mut seen[i], true));
                if !valid {
                    return Err(format!("{p:?} is not a permutation of {}", show(s)));
                }
                Ok((p.iter().map(|&i| s[i]).collect(), *d))
            }
            Op::BroadcastTo(to) => {
                let (s, d) = &inputs[0];
                let lead = to.len().checked_sub(s.len());
                let fits = lead.is_some_and(|lead| {
                    s.iter()
                        .zip(&to[lead..])
                        .all(|(n, &t)| n.is_none_or(|n| n == 1 || n == t))
                });
                if !fits {
                    return Err(format!("cannot broadcast {} to {to:?}", show(s)));
                }
                Ok((known(to), *d))
            }
            Op::Conv2d(o) | Op::ConvTranspose2d(o) => {
                let ((x, dx), (w, dw)) = (&inputs[0], &inputs[1]);
                let d = float(dx.promote(*dw), "a convolution")?;
                Ok((
                    conv_shape(x, w, o, matches!(self, Op::ConvTranspose2d(_)))?,
                    d,
                ))
            }
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => {
                let (s, d) = &inputs[0];
                if s.len() != 4 || *kernel == 0 || *stride == 0 || *padding > kernel / 2 {
                    return Err(format!(
                        "pooling takes [N, C, H, W], a positive kernel and stride and padding up \
                         to half the kernel, got {}",
                        show(s)
                    ));
                }
                let out = |n: Option<usize>| -> Result<Option<usize>, String> {
                    let Some(n) = n else { return Ok(None) };
                    (n + 2 * padding)
                        .checked_sub(*kernel)
                        .map(|r| Some(r / stride + 1))
                        .ok_or_else(|| format!("a kernel of {kernel} does not fit {}", show(s)))
                };
                Ok((
                    vec![s[0], s[1], out(s[2])?, out(s[3])?],
                    float(*d, "pooling")?,
                ))
            }
            Op::Cat(axis) => {
                let (first, d) = &inputs[0];
                check_axis(*axis, first)?;
                let mut out = first.clone();
                for (s, _) in &inputs[1..] {
                    let fits = s.len() == first.len()
                        && (0..s.len()).all(|i| i == *axis || same(s[i], first[i]));
                    if !fits {
                        return Err(format!("{} does not join {}", show(s), show(first)));
                    }
                    out[*axis] = out[*axis].zip(s[*axis]).map(|(a, b)| a + b);
                }
                let d = inputs.iter().fold(*d, |acc, (_, d)| acc.promote(*d));
                Ok((out, d))
            }
            Op::Narrow { axis, start, len } => {
                let (s, d) = &inputs[0];
                check_axis(*axis, s)?;
                if s[*axis].is_some_and(|n| start + len > n) {
                    return Err(format!(
                        "{len} elements from {start} exceed axis {axis} of {}",
                        show(s)
                    ));
                }
                let mut out = s.clone();
                out[*axis] = Some(*len);
                Ok((out, *d))
            }
            Op::FlattenFrom(start) => {
                let (s, d) = &inputs[0];
                if *start > s.len() {
                    return Err(format!("axis {start} out of range for {}", show(s)));
                }
                let mut out = s[..*start].to_vec();
                out.push(s[*start..].iter().copied().product::<Option<usize>>());
                Ok((out, *d))
            }
            Op::StopGradient => Ok(inputs[0].clone()),
            Op::ToDtype(to) => Ok((inputs[0].0.clone(), *to)),
            Op::SumTo(to) => {
                let (s, d) = &inputs[0];
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
                Ok((known(to), float(*d, "sum_to")?))
            }
            Op::IndexAdd(axis, indices) => {
                let ((s, d), (src, _)) = (&inputs[0], &inputs[1]);
                check_axis(*axis, s)?;
                let mut expected = s.clone();
                expected[*axis] = Some(indices.len());
                let fits =
                    src.len() == s.len() && src.iter().zip(&expected).all(|(a, b)| same(*a, *b));
                if !fits || indices.iter().any(|&i| s[*axis].is_some_and(|n| i >= n)) {
                    return Err(format!(
                        "source {} and {} indices do not fit {} along axis {axis}",
                        show(src),
                        indices.len(),
                        show(s)
                    ));
                }
                Ok((s.clone(), float(*d, "index_add")?))
            }
            Op::Conv2dWeight((kh, kw), o) => {
                let ((x, dx), (dy, ddy)) = (&inputs[0], &inputs[1]);
                if x.len() != 4 || dy.len() != 4 || o.groups == 0 {
                    return Err(format!(
                        "takes [N, C, H, W] twice, got {} and {}",
                        show(x),
                        show(dy)
                    ));
                }
                let cg = x[1].map(|c| c / o.groups);
                Ok((
                    vec![dy[1], cg, Some(*kh), Some(*kw)],
                    float(dx.promote(*ddy), "conv2d_weight")?,
                ))
            }
            Op::Squeeze(axis) => {
                let (s, d) = &inputs[0];
                check_axis(*axis, s)?;
                if !same(s[*axis], Some(1)) {
                    return Err(format!("axis {axis} of {} is not of size 1", show(s)));
                }
                let mut out = s.clone();
                out.remove(*axis);
                Ok((out, *d))
            }
            Op::Unsqueeze(axis) => {
                let (s, d) = &inputs[0];
                if *axis > s.len() {
                    return Err(format!("axis {axis} out of range for {}", show(s)));
                }
                let mut out = s.clone();
                out.insert(*axis, Some(1));
                Ok((out, *d))
            }
            Op::Pad(pads, _) => {
                let (s, d) = &inputs[0];
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
                Ok((out, *d))
            }
            Op::IndexSelect(axis, indices) => {
                let (s, d) = &inputs[0];
                check_axis(*axis, s)?;
                if let Some(i) = indices.iter().find(|&&i| s[*axis].is_some_and(|n| i >= n)) {
                    return Err(format!(
                        "index {i} out of range for axis {axis} of {}",
                        show(s)
                    ));
                }
                let mut out = s.clone();
                out[*axis] = Some(indices.len());
                Ok((out, *d))
            }
            Op::WhereCond => {
                let ((c, _), (a, da), (b, db)) = (&inputs[0], &inputs[1], &inputs[2]);
                let d = float(da.promote(*db), "where_cond")?;
                Ok((broadcast(&broadcast(c, a)?, b)?, d))
            }
            Op::AdaptiveAvgPool2d(h, w) | Op::UpsampleNearest2d(h, w) => {
                let (s, d) = &inputs[0];
                if s.len() != 4 || *h == 0 || *w == 0 {
                    return Err(format!(
                        "takes [N, C, H, W] and positive sizes, got {}",
                        show(s)
                    ));
                }
                let out = match self {
                    Op::AdaptiveAvgPool2d(..) => vec![s[0], s[1], Some(*h), Some(*w)],
                    _ => vec![s[0], s[1], s[2].map(|n| n * h), s[3].map(|n| n * w)],
                };
                Ok((out, float(*d, "this op")?))
            }
            Op::ArgExtremum { axis, .. } => {
                let (s, d) = &inputs[0];
                float(*d, "argmax and argmin")?;
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
                let (of, d) = &inputs[0];
                if of.iter().any(|d| *d != Some(1)) {
                    return Err(format!(
                        "minimize needs a one-element loss, got {}",
                        show(of)
                    ));
                }
                Ok((Vec::new(), *d))
            }
        }
    }

    /// The op on evaluated inputs (leaves are evaluated by the session).
    pub(crate) fn eval(&self, x: &[Tensor]) -> Tensor {
        match self {
            Op::Unary(u) => u.apply(&x[0]),
            Op::Binary(b) => match b {
                Binary::Add => &x[0] + &x[1],
                Binary::Sub => &x[0] - &x[1],
                Binary::Mul => &x[0] * &x[1],
                Binary::Div => &x[0] / &x[1],
                Binary::Maximum => x[0].maximum(&x[1]),
                Binary::Minimum => x[0].minimum(&x[1]),
                Binary::Eq => x[0].eq(&x[1]),
                Binary::Lt => x[0].lt(&x[1]),
                Binary::Gt => x[0].gt(&x[1]),
                Binary::Ne => x[0].ne(&x[1]),
                Binary::Le => x[0].le(&x[1]),
                Binary::Ge => x[0].ge(&x[1]),
            },
            Op::Matmul => x[0].matmul(&x[1]),
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => {
                let all: Vec<usize> = (0..x[0].ndim()).collect();
                let axes = axes.as_deref().unwrap_or(&all);
                match kind {
                    Reduce::Sum => x[0].sum_axes(axes, *keepdim),
                    Reduce::Mean => x[0].mean_axes(axes, *keepdim),
                    Reduce::Max => x[0].max_axes(axes, *keepdim),
                    Reduce::Min => x[0].min_axes(axes, *keepdim),
                }
            }
            Op::Reshape(s) => x[0].reshape(s),
            Op::Permute(p) => x[0].permute(p),
            Op::BroadcastTo(s) => x[0].broadcast_to(s),
            Op::Softmax(a) => x[0].softmax(*a),
            Op::LogSoftmax(a) => x[0].log_softmax(*a),
            Op::Conv2d(o) => x[0].conv2d(&x[1], o),
            Op::ConvTranspose2d(o) => x[0].conv_transpose2d(&x[1], o),
            Op::Pool {
                max,
                kernel,
                stride,
                padding,
            } => {
                if *max {
                    x[0].max_pool2d(*kernel, *stride, *padding)
                } else {
                    x[0].avg_pool2d(*kernel, *stride, *padding)
                }
            }
            Op::Cat(axis) => Tensor::cat(&x.iter().collect::<Vec<_>>(), *axis),
            Op::Narrow { axis, start, len } => x[0].narrow(*axis, *start, *len),
            Op::FlattenFrom(a) => x[0].flatten_from(*a),
            Op::Squeeze(a) => x[0].squeeze(*a),
            Op::Unsqueeze(a) => x[0].unsqueeze(*a),
            Op::Pad(p, v) => x[0].pad(p, *v),
            Op::IndexSelect(a, i) => x[0].index_select(*a, i),
            Op::WhereCond => x[0].where_cond(&x[1], &x[2]),
            Op::StopGradient => x[0].detach(),
            Op::ToDtype(d) => x[0].to_dtype(*d),
            Op::SumTo(s) => x[0].sum_to(s),
            Op::IndexAdd(a, i) => x[0].index_add(*a, i, &x[1]),
            Op::Conv2dWeight(k, o) => x[0].conv2d_weight(&x[1], *k, o),
            Op::AdaptiveAvgPool2d(h, w) => x[0].adaptive_avg_pool2d(*h, *w),
            Op::UpsampleNearest2d(h, w) => x[0].upsample_nearest2d(*h, *w),
            Op::ArgExtremum { max: true, axis } => x[0].argmax(*axis),
            Op::ArgExtremum { max: false, axis } => x[0].argmin(*axis),
            Op::Constant(t) => t.clone(),
            Op::Placeholder { .. } | Op::Variable { .. } | Op::Grad | Op::Minimize(_) => {
                unreachable!("the session evaluates leaves, gradients and training ops")
            }
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
            Op::Unary(u) => write!(f, "{u:?}"),
            Op::Reduce {
                kind,
                axes,
                keepdim,
            } => write!(f, "Reduce({kind:?}, {axes:?}, {keepdim})"),
            _ => f.write_str(&self.name()),
        }
    }
}

/// A shape with every axis known.
pub(crate) fn known(s: &[usize]) -> Shape {
    s.iter().map(|&d| Some(d)).collect()
}

/// `[?, 784]`, or `[..]` when not even the rank is known.
pub(crate) fn show_opt(s: &Option<Shape>) -> String {
    s.as_ref().map_or("[..]".to_string(), show)
}

/// `[?, 784]`.
pub(crate) fn show(s: &Shape) -> String {
    let axes: Vec<String> = s
        .iter()
        .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", axes.join(", "))
}

fn check_axis(a: usize, s: &Shape) -> Result<(), String> {
    if a < s.len() {
        Ok(())
    } else {
        Err(format!("axis {a} out of range for {}", show(s)))
    }
}

/// `Err(what, shape)` unless `s` holds one element.
fn one_element(s: &Shape, what: &str) -> Result<(), String> {
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
