//! Scaled dot-product attention with PyTorch's semantics (`F.scaled_dot_product_attention`):
//! `softmax(q kᵀ · scale + mask) v` over the last two axes, leading axes broadcast.
//!
//! The forward pass is fused (`kernels::attention`: an online softmax over blocks of keys,
//! never the `[L, S]` matrix). The derivative recomputes the probabilities instead of storing
//! them. When its result will be differentiated again (a backward that builds a graph) it is
//! written with tensor ops, so second derivatives through attention work as through every
//! other op; otherwise (a plain backward, whose gradients are values) the same formula runs
//! as one fused kernel. Dropout on the weights is a pattern fixed by a key
//! (`kernels::attention::DropPattern`): the forward, the fused backward and the derivative
//! written with tensor ops all drop the same weights.

use smallvec::smallvec;

use crate::kernels::attention::{
    attention_backward as fused_backward, attention_forward, AttentionDims, AttentionGrads,
    AttentionInputs, DropPattern, Heads, Settings,
};
use crate::kernels::Float;
use crate::tensor::trace::{self, attrs};
use crate::tensor::{
    broadcast_shapes, filled, is_grad_enabled, numel_or_panic, record, with_dtype, BackwardCtx,
    DType, Element, InputGrads, Tensor,
};
use num_traits::{One, Zero};

/// The settings of an attention call: causal masking, an additive mask, the scale, dropout on
/// the weights.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let q = Tensor::ones(&[2, 4, 8], DType::F64);
/// let y = q.scaled_dot_product_attention(&q, &q, &Attention::new().causal(true));
/// assert_eq!(y.shape(), &[2, 4, 8]);
/// ```
#[derive(Clone, Default)]
pub struct Attention {
    causal: bool,
    mask: Option<Tensor>,
    scale: Option<f64>,
    dropout: Option<(f64, u64)>,
}

impl Attention {
    /// No mask, not causal, scale `1/√E`.
    pub fn new() -> Attention {
        Attention::default()
    }

    /// Query `i` attends to keys `0..=i` only (PyTorch's `is_causal`, aligned top-left).
    pub fn causal(mut self, on: bool) -> Attention {
        self.causal = on;
        self
    }

    /// An additive float mask broadcast to `[.., L, S]` (`-inf` hides a key). It may be
    /// tracked: its gradient is the scores'. An integer mask is refused when the attention
    /// runs (it would be added as 0 and 1, not read as PyTorch reads a boolean mask).
    pub fn mask(mut self, mask: &Tensor) -> Attention {
        self.mask = Some(mask.clone());
        self
    }

    /// The factor on `q kᵀ` (default `1/√E`); panics unless finite.
    pub fn scale(mut self, scale: f64) -> Attention {
        assert!(scale.is_finite(), "attention: scale {scale} must be finite");
        self.scale = Some(scale);
        self
    }

    /// Dropout on the attention weights (PyTorch's `dropout_p`): each weight is zeroed with
    /// probability `p` in [0, 1] and the kept ones scaled by 1 / (1 − p), in the pattern that
    /// `key` fixes (the same key drops the same weights, in the forward and in every
    /// derivative). Layers draw the key from their random stream; `p = 0` is no dropout.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let q = Tensor::ones(&[1, 4, 8], DType::F64);
    /// let eye = (0..16).map(|x| if x % 5 == 0 { 1.0 } else { 0.0 }).collect();
    /// let v = Tensor::from_vec(eye, &[1, 4, 4]);
    /// // With identity values, the output is the weights: 1/4 each, or 0 and 1/4 · 2 at p = ½.
    /// let w = q.scaled_dot_product_attention(&q, &v, &Attention::new().dropout(0.5, 7));
    /// assert!(w.to_vec::<f64>().iter().all(|&x| x == 0.0 || x == 0.5));
    /// ```
    pub fn dropout(mut self, p: f64, key: u64) -> Attention {
        assert!(
            (0.0..=1.0).contains(&p),
            "attention: dropout p = {p} must be in [0, 1]"
        );
        self.dropout = (p > 0.0).then_some((p, key));
        self
    }

    /// The dropout probability and key, if dropout was asked for.
    pub fn dropout_of(&self) -> Option<(f64, u64)> {
        self.dropout
    }

    /// Whether queries see only earlier keys.
    pub fn is_causal(&self) -> bool {
        self.causal
    }

    /// The additive mask, if one was given.
    pub fn mask_tensor(&self) -> Option<&Tensor> {
        self.mask.as_ref()
    }

    /// The scale given, if one was.
    pub fn scale_given(&self) -> Option<f64> {
        self.scale
    }

    /// The scale given, or `default` (the caller's `1/√E`).
    pub fn scale_or(&self, default: f64) -> f64 {
        self.scale.unwrap_or(default)
    }
}

/// The factors of attention dropout at rate `p` with `key` ([`Attention::dropout`]) over
/// weights of `shape` `[.., L, S]` (the leading axes flattened as the op's heads): 1 / (1 − p)
/// where a weight is kept, 0 where it is dropped. The op's forward drops the same weights.
pub(crate) fn dropout_factors(p: f64, key: u64, shape: &[usize], dtype: DType) -> Tensor {
    let n = shape.len();
    assert!(
        n >= 2,
        "attention dropout: weights [.., L, S], got {shape:?}"
    );
    let op = "scaled_dot_product_attention";
    let len = numel_or_panic(op, shape);
    let (l, s) = (shape[n - 2], shape[n - 1]);
    let d = AttentionDims {
        heads: len / (l * s).max(1),
        l,
        s,
        e: 0,
        ev: 0,
    };
    let pattern = DropPattern::new(p, key);
    with_dtype!(dtype, T => {
        let mut factors = filled(op, len, T::one());
        pattern.factors_into(d, &mut factors);
        Tensor::from_vec(factors, shape)
    })
}

/// `[L, S]` zeros with `-inf` above the diagonal: the causal mask, additive.
pub(crate) fn causal_mask(l: usize, s: usize, dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..l * s)
        .map(|x| {
            if x % s > x / s {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(v, &[l, s]).to_dtype(dtype)
}

/// The leading axes of `t` (all but the last two), or a panic naming the operand.
fn lead<'a>(what: &str, t: &'a Tensor) -> &'a [usize] {
    assert!(
        t.ndim() >= 2,
        "scaled_dot_product_attention: {what} must have at least 2 axes [.., rows, width], got {:?}",
        t.shape()
    );
    &t.shape()[..t.ndim() - 2]
}

/// `t` broadcast to `shape`, untracked and laid out contiguously: `t` itself when it already
/// is, a copy otherwise. The kernels read it through `contiguous_data`.
fn dense(t: &Tensor, shape: &[usize]) -> Tensor {
    t.detach().broadcast_to(shape).contiguous()
}

/// `t` broadcast to `shape` (`[.., rows, width]`), untracked, for [`heads_of`]: a view when the
/// elements of each row are contiguous (the heads of a projection split and transposed, an
/// operand broadcast over heads), a contiguous copy otherwise.
fn operand(t: &Tensor, shape: &[usize]) -> Tensor {
    let b = t.detach().broadcast_to(shape);
    let unit_rows = b.layout().strides.last() == Some(&1) || shape.last() <= Some(&1);
    if unit_rows {
        b
    } else {
        b.contiguous()
    }
}

/// The heads of an [`operand`] where they lie in its storage: one start per head (the
/// leading axes walked in order through their strides) and the row stride. An empty
/// operand addresses nothing (its strides are never used): its heads all start at 0.
fn heads_of<T: Element>(t: &Tensor) -> Heads<'_, T> {
    let l = t.layout();
    let n = l.shape.len();
    debug_assert!(
        l.strides[n - 1] == 1 || l.shape[n - 1] <= 1,
        "rows read in place"
    );
    if t.numel() == 0 {
        let heads = l.shape[..n - 2].iter().product();
        return Heads {
            data: t.buffer::<T>(),
            starts: vec![0; heads],
            rs: 0,
        };
    }
    let mut starts = vec![l.offset];
    for axis in 0..n - 2 {
        let (size, stride) = (l.shape[axis], l.strides[axis]);
        starts = starts
            .iter()
            .flat_map(|&s| (0..size).map(move |i| s + i * stride))
            .collect();
    }
    Heads {
        data: t.buffer::<T>(),
        starts,
        rs: l.strides[n - 2],
    }
}

/// The checked shapes of an attention call: the broadcast leading axes, `[L, E, S, Ev]`, and
/// the promoted float dtype (a panic naming the op where they do not fit).
fn attention_shapes(qkv: [&Tensor; 3], mask: Option<&Tensor>) -> (Vec<usize>, [usize; 4], DType) {
    let op = "scaled_dot_product_attention";
    let [q, k, v] = qkv;
    let (ql, kl, vl) = (lead("q", q), lead("k", k), lead("v", v));
    let (l, e) = (q.shape()[q.ndim() - 2], q.shape()[q.ndim() - 1]);
    let (s, ev) = (k.shape()[k.ndim() - 2], v.shape()[v.ndim() - 1]);
    assert!(
        k.shape()[k.ndim() - 1] == e && v.shape()[v.ndim() - 2] == s,
        "{op}: q {:?}, k {:?} and v {:?} do not fit ([.., L, E], [.., S, E], [.., S, Ev])",
        q.shape(),
        k.shape(),
        v.shape()
    );
    let mut batch = broadcast_shapes(ql, kl).and_then(|b| broadcast_shapes(&b, vl));
    if let Some(m) = mask {
        // PyTorch reads a boolean mask as "may attend"; an integer one here would be added
        // to the scores as the numbers 0 and 1, hiding nothing.
        assert!(
            m.dtype().is_float(),
            "{op}: the mask is {}; it must be an additive float mask (0 to keep a key, -inf to \
             hide it)",
            m.dtype()
        );
        batch = batch.and_then(|b| broadcast_shapes(&b, lead("mask", m)));
        let fits = broadcast_shapes(&m.shape()[m.ndim() - 2..], &[l, s]);
        assert!(
            fits.is_some_and(|f| f.as_slice() == [l, s]),
            "{op}: mask {:?} does not broadcast to [.., {l}, {s}]",
            m.shape()
        );
    }
    let Some(batch) = batch else {
        panic!(
            "{op}: leading axes of q {:?}, k {:?}, v {:?} do not broadcast",
            q.shape(),
            k.shape(),
            v.shape()
        )
    };
    let mut dtype = q.dtype().promote(k.dtype()).promote(v.dtype());
    if let Some(m) = mask {
        dtype = dtype.promote(m.dtype());
    }
    assert!(dtype.is_float(), "{op}: needs float operands, got {dtype}");
    (batch.to_vec(), [l, e, s, ev], dtype)
}

impl Tensor {
    /// `softmax(self kᵀ · scale + mask) v`: `self` (the queries) `[.., L, E]`, `k` `[.., S,
    /// E]`, `v` `[.., S, Ev]`, leading axes broadcast, the result `[.., L, Ev]`; as PyTorch's
    /// `F.scaled_dot_product_attention`. A query row hidden from every key (its mask row all
    /// −∞) is 0 and passes no gradient, as there.
    pub fn scaled_dot_product_attention(&self, k: &Tensor, v: &Tensor, opts: &Attention) -> Tensor {
        let _profiled = crate::tensor::profile::scope("scaled_dot_product_attention");
        let mask = opts.mask.as_ref().map(|m| match m.ndim() {
            // A 1-d mask, [S], applies to every row.
            0 | 1 => m.reshape(&[&[1][..], m.shape()].concat()),
            _ => m.clone(),
        });
        let mut inputs = vec![self, k, v];
        inputs.extend(mask.as_ref());
        let attrs = attrs![opts.causal, opts.scale, opts.dropout];
        trace::op("ScaledDotProductAttention", attrs, &inputs, || {
            self.attention_untraced(k, v, opts, &mask)
        })
    }

    fn attention_untraced(
        &self,
        k: &Tensor,
        v: &Tensor,
        opts: &Attention,
        mask: &Option<Tensor>,
    ) -> Tensor {
        let op = "scaled_dot_product_attention";
        let (batch, [l, e, s, ev], dtype) = attention_shapes([self, k, v], mask.as_ref());
        // With E = 0 every score is an empty sum, 0 whatever the scale: 1/√0 would make it
        // 0·∞ = NaN, where PyTorch gives the mean of the values.
        let scale = opts
            .scale
            .unwrap_or(if e == 0 { 1.0 } else { 1.0 / (e as f64).sqrt() });
        let heads: usize = batch.iter().product();
        let d = AttentionDims { heads, l, s, e, ev };
        // The scores q·kᵀ and the weighted sum of the values.
        crate::tensor::profile::note_product_flops([heads, l, s, e.saturating_add(ev)]);
        let pattern = opts.dropout.map(|(p, key)| DropPattern::new(p, key));
        let with = |tail: [usize; 2]| [&batch[..], &tail].concat();
        let out_shape = with([l, ev]);
        let len = numel_or_panic(op, &out_shape);
        let out = with_dtype!(dtype, T => {
            let mut out = filled(op, len, T::zero());
            if len > 0 {
                // (An empty output reads nothing: its operands may be any size.)
                let cast = |t: &Tensor| t.to_dtype(dtype);
                let (q, kk, vv) = (
                    operand(&cast(self), &with([l, e])),
                    operand(&cast(k), &with([s, e])),
                    operand(&cast(v), &with([s, ev])),
                );
                let dense_mask = mask.as_ref().map(|m| dense(&cast(m), &with([l, s])));
                let dense_mask = dense_mask.as_ref().map(|m| m.contiguous_data::<T>());
                let inputs = AttentionInputs {
                    q: heads_of::<T>(&q),
                    k: heads_of::<T>(&kk),
                    v: heads_of::<T>(&vv),
                    mask: dense_mask.as_deref(),
                };
                let settings = Settings {
                    scale: T::from_f64(scale),
                    causal: opts.causal,
                    dropout: pattern,
                };
                attention_forward(&inputs, d, settings, &mut out);
            }
            Tensor::from_vec(out, &out_shape)
        });
        let mut inputs = vec![self, k, v];
        inputs.extend(mask.as_ref());
        let opts = Attention {
            mask: mask.clone(),
            ..opts.clone()
        };
        record(op, out, &inputs, move |c, up| {
            if opts.mask.is_some() && c.needs(3) {
                // A mask that takes a gradient: the derivative in tensor ops gives it too.
                return attention_grads(c, up, &opts, true);
            }
            let [q, k, v] = [0, 1, 2].map(|i| c.input(i));
            let (dq, dk, dv) = up.scaled_dot_product_attention_backward(q, k, v, c.out(), &opts);
            let mut grads: InputGrads = smallvec![
                c.needs(0).then_some(dq),
                c.needs(1).then_some(dk),
                c.needs(2).then_some(dv),
            ];
            if opts.mask.is_some() {
                grads.push(None);
            }
            grads
        })
    }

    /// The gradients of [`Tensor::scaled_dot_product_attention`] of `q`, `k` and `v` (with
    /// `opts`; its result was `out`) given this gradient of that result: `(dq, dk, dv)`,
    /// PyTorch's attention backward. One fused pass over the heads; under a graph that is
    /// recorded, the same derivative in tensor ops, differentiable again. The mask takes no
    /// gradient here.
    pub fn scaled_dot_product_attention_backward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        opts: &Attention,
    ) -> (Tensor, Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("scaled_dot_product_attention_backward");
        let mut inputs = vec![self, q, k, v, out];
        inputs.extend(opts.mask.as_ref());
        let attrs = attrs![opts.causal, opts.scale, opts.dropout];
        trace::op("AttentionBackward", attrs, &inputs, || {
            let mut given = vec![q.clone(), k.clone(), v.clone()];
            given.extend(opts.mask.clone());
            let needs = [true, true, true, false];
            let c = BackwardCtx {
                inputs: &given,
                out,
                needs: &needs[..given.len()],
            };
            let mut grads = attention_grads(&c, self, opts, is_grad_enabled()).into_iter();
            let mut next = || grads.next().flatten().expect("q, k and v take gradients");
            (next(), next(), next())
        })
    }
}

/// [`Tensor::scaled_dot_product_attention_backward`] in tensor ops, with no event of its own
/// (the reference its tangent rule pushes tangents through): `a` is the gradient, q, k, v,
/// the result and the mask when there is one.
pub(crate) fn attention_backward_composite(a: &[Tensor], opts: &Attention) -> Vec<Tensor> {
    let given = a[1..4].iter().chain(a.get(5)).cloned().collect::<Vec<_>>();
    let needs = [true, true, true, false];
    let c = BackwardCtx {
        inputs: &given,
        out: &a[4],
        needs: &needs[..given.len()],
    };
    let grads = attention_grads(&c, &a[0], opts, true);
    grads.into_iter().take(3).flatten().collect()
}

/// The gradients the context asks for, given `up`: in tensor ops when `recorded` (or for an
/// empty attention), otherwise from the fused kernel.
fn attention_grads(
    c: &BackwardCtx<'_>,
    up: &Tensor,
    opts: &Attention,
    recorded: bool,
) -> InputGrads {
    let mask = opts.mask.as_ref();
    let [q, k, v] = [0, 1, 2].map(|i| c.input(i));
    let (batch, [l, e, s, ev], dtype) = attention_shapes([q, k, v], mask);
    let scale = opts
        .scale
        .unwrap_or(if e == 0 { 1.0 } else { 1.0 / (e as f64).sqrt() });
    let (causal, masked) = (opts.causal, mask.is_some());
    if recorded || l * s * e * ev == 0 {
        let shape = [&batch[..], &[l, s]].concat();
        let factors = opts
            .dropout
            .map(|(p, key)| dropout_factors(p, key, &shape, dtype));
        let rule = Rule {
            scale,
            causal,
            masked,
            dropout: factors.as_ref(),
        };
        return attention_backward(c, up, rule);
    }
    let heads: usize = batch.iter().product();
    let fused = Fused {
        batch: &batch,
        d: AttentionDims { heads, l, s, e, ev },
        dtype,
        scale,
        causal,
        masked,
        dropout: opts.dropout.map(|(p, key)| DropPattern::new(p, key)),
    };
    with_dtype!(dtype, T => fused.backward::<T>(c, up))
}

/// What the fused backward needs of the forward call.
struct Fused<'a> {
    batch: &'a [usize],
    d: AttentionDims,
    dtype: DType,
    scale: f64,
    causal: bool,
    masked: bool,
    dropout: Option<DropPattern>,
}

impl Fused<'_> {
    /// The derivative of [`attention_backward`], as values: one kernel pass over the heads,
    /// then each gradient summed back to its input's shape (an operand broadcast over heads
    /// gets the sum of theirs).
    fn backward<T: Float + Element>(&self, c: &BackwardCtx<'_>, up: &Tensor) -> InputGrads {
        let Fused {
            d, dtype, masked, ..
        } = *self;
        let with = |tail: [usize; 2]| [self.batch, &tail].concat();
        let cast = |t: &Tensor| t.to_dtype(dtype);
        let (q, k, v) = (
            operand(&cast(c.input(0)), &with([d.l, d.e])),
            operand(&cast(c.input(1)), &with([d.s, d.e])),
            operand(&cast(c.input(2)), &with([d.s, d.ev])),
        );
        let mask = masked.then(|| dense(&cast(c.input(3)), &with([d.l, d.s])));
        let mask = mask.as_ref().map(|m| m.contiguous_data::<T>());
        let (up, out) = (
            operand(&cast(up), &with([d.l, d.ev])),
            operand(c.out(), &with([d.l, d.ev])),
        );
        let inputs = AttentionInputs {
            q: heads_of::<T>(&q),
            k: heads_of::<T>(&k),
            v: heads_of::<T>(&v),
            mask: mask.as_deref(),
        };
        // (The kernel writes every element of these: the fill only initialises them.)
        let op = "scaled_dot_product_attention backward";
        let (mut dq, mut dk, mut dv) = (
            filled(op, d.heads * d.l * d.e, T::zero()),
            filled(op, d.heads * d.s * d.e, T::zero()),
            filled(op, d.heads * d.s * d.ev, T::zero()),
        );
        let mut dmask = (masked && c.needs(3)).then(|| vec![T::zero(); d.heads * d.l * d.s]);
        let grads = AttentionGrads {
            dq: &mut dq,
            dk: &mut dk,
            dv: &mut dv,
            dmask: dmask.as_deref_mut(),
        };
        let settings = Settings {
            scale: T::from_f64(self.scale),
            causal: self.causal,
            dropout: self.dropout,
        };
        let (out, up) = (heads_of::<T>(&out), heads_of::<T>(&up));
        fused_backward(&inputs, (&out, &up), d, settings, grads);
        let back = |g: Vec<T>, tail: [usize; 2], i: usize| {
            let x = c.input(i);
            c.needs(i).then(|| {
                Tensor::from_vec(g, &with(tail))
                    .sum_to(x.shape())
                    .to_dtype(x.dtype())
            })
        };
        let mut out: InputGrads = smallvec![
            back(dq, [d.l, d.e], 0),
            back(dk, [d.s, d.e], 1),
            back(dv, [d.s, d.ev], 2),
        ];
        if masked {
            out.push(dmask.and_then(|m| back(m, [d.l, d.s], 3)));
        }
        out
    }
}

/// What the derivative written with tensor ops needs of the forward call: the dropout
/// factors `D` (1 / (1 − p) where a weight is kept, 0 where dropped) as a tensor.
struct Rule<'a> {
    scale: f64,
    causal: bool,
    masked: bool,
    dropout: Option<&'a Tensor>,
}

/// The softmax of `scores` over the last axis, with every row whose scores are all −∞ (a
/// query hidden from every key) 0 and cut from the graph: the fused kernels' weights, and
/// PyTorch's, where a softmax would give 0/0.
fn attention_weights(scores: &Tensor) -> Tensor {
    if scores.numel() == 0 {
        return scores.softmax(-1);
    }
    let hidden = scores
        .detach()
        .max_axes(&[-1], true)
        .eq_scalar(f64::NEG_INFINITY);
    if hidden.sum().item() == 0.0 {
        return scores.softmax(-1);
    }
    scores
        .masked_fill(&hidden, 0.0)
        .softmax(-1)
        .masked_fill(&hidden, 0.0)
}

/// The derivative, from the probabilities recomputed with tensor ops (so that it is itself
/// differentiable): with `P = softmax(S)`, `S = q kᵀ · scale + mask` and the dropout factors
/// `D` (1 without dropout), `dv = (P ⊙ D)ᵀ up`, `dS = P ⊙ (dP − rowsum(dP ⊙ P))` with
/// `dP = (up vᵀ) ⊙ D`, `dq = dS k · scale`, `dk = dSᵀ q · scale`, `dmask = dS`, each summed
/// back to its input's shape.
fn attention_backward(c: &BackwardCtx<'_>, up: &Tensor, rule: Rule<'_>) -> InputGrads {
    let Rule {
        scale,
        causal,
        masked,
        dropout,
    } = rule;
    let (q, k, v) = (c.input(0), c.input(1), c.input(2));
    let mut scores = &q.matmul(&k.transpose(-2, -1)) * scale;
    if masked {
        scores = &scores + c.input(3);
    }
    if causal {
        let (l, s) = (q.shape()[q.ndim() - 2], k.shape()[k.ndim() - 2]);
        scores = &scores + &causal_mask(l, s, scores.dtype());
    }
    let p = attention_weights(&scores);
    let mut dp = up.matmul(&v.transpose(-2, -1));
    let mut weights = p.clone();
    if let Some(factors) = dropout {
        dp = &dp * factors;
        weights = &p * factors;
    }
    let ds = &p * &(&dp - &(&dp * &p).sum_axes(&[-1], true));
    // Each gradient in its input's dtype (the computation ran in the promoted one).
    let mut grads: InputGrads = smallvec![
        c.needs(0).then(|| (&ds.matmul(k) * scale)
            .sum_to(q.shape())
            .to_dtype(q.dtype())),
        c.needs(1).then(|| {
            let dk = &ds.transpose(-2, -1).matmul(q) * scale;
            dk.sum_to(k.shape()).to_dtype(k.dtype())
        }),
        c.needs(2).then(|| weights
            .transpose(-2, -1)
            .matmul(up)
            .sum_to(v.shape())
            .to_dtype(v.dtype())),
    ];
    if masked {
        let m = c.input(3);
        grads.push(c.needs(3).then(|| ds.sum_to(m.shape()).to_dtype(m.dtype())));
    }
    grads
}
