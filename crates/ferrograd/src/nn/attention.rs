//! Transformer layers with PyTorch's names, layouts and defaults (batch first): multi-head
//! attention, the encoder layer, and RMS normalisation. A PyTorch `state_dict` of the same
//! layer loads unchanged.

use std::sync::Arc;

use super::{
    expect_input, named, prefixed, Dense, Dropout, Layer, LayerNorm, Mode, Module, RngStream,
};
use crate::autograd::Param;
use crate::init;
use crate::ops::attention::{causal_mask, dropout_factors, Attention};
use crate::tensor::{with_default_rng, DType, Tensor};

/// PyTorch's `nn.MultiheadAttention` with `batch_first=True`: `in_proj_weight` `[3E, E]`
/// (the query, key and value projections stacked), `in_proj_bias` `[3E]`, `out_proj.weight`
/// `[E, E]`, `out_proj.bias` `[E]`; with keys and values of other widths
/// ([`MultiheadAttention::kdim_vdim`]) `q_proj_weight`, `k_proj_weight` and `v_proj_weight`
/// instead of `in_proj_weight`, and without biases ([`MultiheadAttention::without_bias`])
/// neither bias. Inputs are `[N, T, ·]`, or unbatched `[T, ·]` (results without the batch
/// axis).
///
/// ```
/// use ferrograd::prelude::*;
///
/// let mha = MultiheadAttention::new(16, 4);
/// let x = Tensor::ones(&[2, 5, 16], DType::F32);
/// let y = mha.attend(&x, &x, &x, &Attention::new().causal(true));
/// assert_eq!(y.shape(), &[2, 5, 16]);
/// assert_eq!(Layer::forward(&mha, &x, Mode::Eval).shape(), &[2, 5, 16]);
/// ```
pub struct MultiheadAttention {
    heads: usize,
    projection: Projection,
    in_proj_bias: Option<Param>,
    out_proj: Dense,
    /// On the attention probabilities, in training mode (PyTorch's `dropout`, default 0).
    dropout: Dropout,
}

/// The query, key and value projections: stacked in one `[3E, E]` parameter where the key
/// and value have the layer's width (PyTorch's `in_proj_weight`), else one parameter each
/// (`q_proj_weight` `[E, E]`, `k_proj_weight` `[E, kdim]`, `v_proj_weight` `[E, vdim]`).
enum Projection {
    Stacked(Param),
    Separate([Param; 3]),
}

impl MultiheadAttention {
    /// `heads` heads over width `embed_dim` (which they must divide); the projections drawn
    /// as PyTorch draws them (Xavier-uniform in, zero biases), from the generator that
    /// `manual_seed` seeds.
    pub fn new(embed_dim: usize, heads: usize) -> MultiheadAttention {
        assert!(
            heads > 0 && embed_dim.is_multiple_of(heads),
            "MultiheadAttention: {heads} heads do not divide the width {embed_dim}"
        );
        MultiheadAttention {
            heads,
            projection: Projection::drawn(embed_dim, [embed_dim; 2]),
            in_proj_bias: Some(Param::new(Tensor::zeros(&[3 * embed_dim], DType::F32))),
            out_proj: Dense::new(embed_dim, embed_dim),
            dropout: Dropout::new(0.0),
        }
    }

    /// Keys of width `kdim` and values of width `vdim` (PyTorch's `kdim`, `vdim`): where
    /// either differs from the layer's width the three projections are separate parameters,
    /// `q_proj_weight`, `k_proj_weight` `[E, kdim]` and `v_proj_weight` `[E, vdim]`, drawn
    /// again (each Xavier-uniform, as PyTorch's).
    pub fn kdim_vdim(mut self, kdim: usize, vdim: usize) -> Self {
        self.projection = Projection::drawn(self.width(), [kdim, vdim]);
        self
    }

    /// Without biases (PyTorch's `bias=False`): neither `in_proj_bias` nor `out_proj.bias`.
    pub fn without_bias(mut self) -> Self {
        self.in_proj_bias = None;
        self.out_proj = self.out_proj.without_bias();
        self
    }

    /// Dropout on the attention probabilities in training mode (PyTorch's `dropout`).
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout = Dropout::new(p);
        self
    }

    fn width(&self) -> usize {
        self.out_proj.weight().shape()[0]
    }

    /// `x` `[N, T, ·]` projected by the query's, key's or value's projection (`part` 0, 1, 2)
    /// and split into heads: `[N, H, T, E/H]`.
    fn project(&self, x: &Tensor, part: usize) -> Tensor {
        let e = self.width();
        let w = self.projection.weight(part, e);
        let b = self
            .in_proj_bias
            .as_ref()
            .map(|b| b.tensor().narrow(0, part * e, e));
        let y = x.linear(&w, b.as_ref());
        let (n, t) = (x.shape()[0], x.shape()[1]);
        y.reshape(&[n, t, self.heads, e / self.heads])
            .transpose(1, 2)
    }

    /// Checks the query, key or value (`part` 0, 1, 2) against its projection's width.
    fn check(&self, part: usize, x: &Tensor) {
        let width = self.projection.input_width(part);
        let fits = x.ndim() == 3 && x.shape()[2] == width;
        let what = ["query", "key", "value"][part];
        expect_input(
            &format!("{} {what}", self.name()),
            fits,
            &format!("[N, T, {width}] (or unbatched [T, {width}])"),
            x,
        );
    }

    /// Attention of `query` `[N, L, E]` over `key` and `value` `[N, S, E]`: `[N, L, E]`, in
    /// evaluation mode. `opts` masks (its mask broadcast to `[N, H, L, S]`: `[L, S]` for
    /// every batch and head, `[N, 1, 1, S]` for padded keys), makes it causal, or sets the
    /// scale.
    pub fn attend(&self, query: &Tensor, key: &Tensor, value: &Tensor, opts: &Attention) -> Tensor {
        self.attend_in(query, key, value, opts, Mode::Eval)
    }

    /// [`MultiheadAttention::attend`] in `mode`: in training, with dropout on the
    /// probabilities (in the fused op, the pattern's key drawn from the layer's stream).
    pub fn attend_in(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &Attention,
        mode: Mode,
    ) -> Tensor {
        if let Some([q, k, v]) = batch_of_one([query, key, value]) {
            return self.attend_in(&q, &k, &v, opts, mode).squeeze(0);
        }
        let (q, k, v) = self.heads_of(query, key, value);
        let y = q.scaled_dot_product_attention(&k, &v, &self.dropping(opts, mode));
        self.merge(&y, query)
    }

    /// [`MultiheadAttention::attend`] and the attention weights averaged over the heads,
    /// `[N, L, S]` (PyTorch's `need_weights=True`), in evaluation mode.
    pub fn attend_with_weights(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &Attention,
    ) -> (Tensor, Tensor) {
        self.attend_with_weights_in(query, key, value, opts, Mode::Eval)
    }

    /// [`MultiheadAttention::attend_with_weights`] in `mode`: in training the probabilities
    /// have dropout, and the weights returned are the dropped ones that weighed the values,
    /// as PyTorch's. One projection and one softmax serve both.
    pub fn attend_with_weights_in(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &Attention,
        mode: Mode,
    ) -> (Tensor, Tensor) {
        let (y, weights) = self.attend_with_head_weights_in(query, key, value, opts, mode);
        let heads = weights.ndim() - 3;
        (y, weights.mean_axes(&[heads], false))
    }

    /// [`MultiheadAttention::attend_with_weights_in`] with each head's weights, `[N, H, L,
    /// S]`, not their mean (PyTorch's `average_attn_weights=False`).
    pub fn attend_with_head_weights_in(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &Attention,
        mode: Mode,
    ) -> (Tensor, Tensor) {
        if let Some([q, k, v]) = batch_of_one([query, key, value]) {
            let (y, w) = self.attend_with_head_weights_in(&q, &k, &v, opts, mode);
            return (y.squeeze(0), w.squeeze(0));
        }
        let (q, k, v) = self.heads_of(query, key, value);
        let p = self.probabilities(&q, &k, opts);
        let weights = match self.dropping(opts, mode).dropout_of() {
            Some((rate, key)) => &p * &dropout_factors(rate, key, p.shape(), p.dtype()),
            None => p,
        };
        (self.merge(&weights.matmul(&v), query), weights)
    }

    /// `opts` with the layer's dropout in training (a key drawn from its stream).
    fn dropping(&self, opts: &Attention, mode: Mode) -> Attention {
        if mode == Mode::Train && self.dropout.p() > 0.0 {
            opts.clone()
                .dropout(self.dropout.p(), self.dropout.next_key())
        } else {
            opts.clone()
        }
    }

    /// The checked inputs projected and split into heads.
    fn heads_of(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> (Tensor, Tensor, Tensor) {
        for (part, x) in [query, key, value].into_iter().enumerate() {
            self.check(part, x);
        }
        (
            self.project(query, 0),
            self.project(key, 1),
            self.project(value, 2),
        )
    }

    /// The heads' outputs `[N, H, L, E/H]` joined and projected: `[N, L, E]`.
    fn merge(&self, y: &Tensor, query: &Tensor) -> Tensor {
        let (n, l) = (query.shape()[0], query.shape()[1]);
        let y = y.transpose(1, 2).reshape(&[n, l, self.width()]);
        Layer::forward(&self.out_proj, &y, Mode::Eval)
    }

    /// The attention probabilities `[N, H, L, S]` of projected heads, by their definition.
    fn probabilities(&self, q: &Tensor, k: &Tensor, opts: &Attention) -> Tensor {
        let dh = (self.width() / self.heads) as f64;
        let mut scores = &q.matmul(&k.transpose(-2, -1)) * opts.scale_or(1.0 / dh.sqrt());
        if let Some(m) = opts.mask_tensor() {
            scores = &scores + m;
        }
        if opts.is_causal() {
            let (l, s) = (q.shape()[2], k.shape()[2]);
            scores = &scores + &causal_mask(l, s, scores.dtype());
        }
        scores.softmax(-1)
    }
}

/// Unbatched inputs (`[T, ·]` each, as PyTorch's layer takes them) as a batch of one; None
/// when any input has another rank (which the layer then checks).
fn batch_of_one(inputs: [&Tensor; 3]) -> Option<[Tensor; 3]> {
    inputs
        .iter()
        .all(|x| x.ndim() == 2)
        .then(|| inputs.map(|x| x.unsqueeze(0)))
}

impl Projection {
    /// Projections from width `embed_dim` for queries of that width and keys and values of
    /// the widths `kv`, drawn as PyTorch draws them.
    fn drawn(embed_dim: usize, kv: [usize; 2]) -> Projection {
        let draw = |rows: usize, cols: usize| {
            let w = with_default_rng(|rng| init::xavier_uniform(&[rows, cols], DType::F32, rng));
            Param::new(w)
        };
        if kv == [embed_dim; 2] {
            Projection::Stacked(draw(3 * embed_dim, embed_dim))
        } else {
            let [k, v] = kv;
            Projection::Separate([embed_dim, k, v].map(|cols| draw(embed_dim, cols)))
        }
    }

    /// The weight of `part` (0 query, 1 key, 2 value), `[E, width]`.
    fn weight(&self, part: usize, embed_dim: usize) -> Tensor {
        match self {
            Projection::Stacked(w) => w.tensor().narrow(0, part * embed_dim, embed_dim),
            Projection::Separate(ws) => ws[part].tensor(),
        }
    }

    /// The width of the input that `part` projects.
    fn input_width(&self, part: usize) -> usize {
        match self {
            Projection::Stacked(w) => w.shape()[1],
            Projection::Separate(ws) => ws[part].shape()[1],
        }
    }

    fn params(&self) -> Vec<(String, Param)> {
        match self {
            Projection::Stacked(w) => named(&[("in_proj_weight", w)]),
            Projection::Separate([q, k, v]) => named(&[
                ("q_proj_weight", q),
                ("k_proj_weight", k),
                ("v_proj_weight", v),
            ]),
        }
    }
}

impl Module for MultiheadAttention {
    fn params(&self) -> Vec<(String, Param)> {
        let mut out = self.projection.params();
        out.extend(
            self.in_proj_bias
                .iter()
                .map(|b| ("in_proj_bias".to_string(), b.clone())),
        );
        out.extend(prefixed("out_proj", self.out_proj.params()));
        out
    }

    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        prefixed("dropout", self.dropout.rng_streams())
    }

    fn name(&self) -> String {
        format!("MultiheadAttention({}, {})", self.width(), self.heads)
    }
}

/// Self-attention without a mask.
impl Layer for MultiheadAttention {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        self.attend_in(x, x, x, &Attention::new(), mode)
    }
}

/// PyTorch's `nn.TransformerEncoderLayer` with `batch_first=True`: self-attention and a
/// feed-forward block, each with a residual connection and a LayerNorm, after (post-norm, the
/// default) or before (`norm_first`). Names: `self_attn.*`, `linear1.*`, `linear2.*`,
/// `norm1.*`, `norm2.*`. PyTorch's defaults: feed-forward width 2048, dropout 0.1 (on the
/// attention probabilities, after the attention, inside and after the feed-forward block),
/// ReLU, LayerNorm eps 1e-5.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let enc = TransformerEncoderLayer::new(16, 4).dim_feedforward(32).dropout(0.0).gelu();
/// let x = Tensor::ones(&[2, 5, 16], DType::F32);
/// let y = enc.forward_masked(&x, Mode::Eval, &Attention::new().causal(true));
/// assert_eq!(y.shape(), &[2, 5, 16]);
/// ```
pub struct TransformerEncoderLayer {
    self_attn: MultiheadAttention,
    linear1: Dense,
    linear2: Dense,
    norm1: LayerNorm,
    norm2: LayerNorm,
    dropout: Dropout,
    dropout1: Dropout,
    dropout2: Dropout,
    activation: Activation,
    norm_first: bool,
}

/// The feed-forward block's activation: ReLU (PyTorch's default), exact GELU, or any
/// function of a tensor (PyTorch's callable `activation`).
#[derive(Clone)]
enum Activation {
    Relu,
    Gelu,
    Custom(Arc<dyn Fn(&Tensor) -> Tensor + Send + Sync>),
}

impl TransformerEncoderLayer {
    /// Width `d_model`, `heads` attention heads, PyTorch's defaults for the rest.
    pub fn new(d_model: usize, heads: usize) -> TransformerEncoderLayer {
        TransformerEncoderLayer {
            self_attn: MultiheadAttention::new(d_model, heads).dropout(0.1),
            linear1: Dense::new(d_model, 2048),
            linear2: Dense::new(2048, d_model),
            norm1: LayerNorm::new(d_model),
            norm2: LayerNorm::new(d_model),
            dropout: Dropout::new(0.1),
            dropout1: Dropout::new(0.1),
            dropout2: Dropout::new(0.1),
            activation: Activation::Relu,
            norm_first: false,
        }
    }

    /// The feed-forward block's hidden width (the weights are drawn again; without biases
    /// if the layer has none).
    pub fn dim_feedforward(mut self, hidden: usize) -> Self {
        let d = self.self_attn.width();
        let biased = self.linear1.bias().is_some();
        let dense = |i, o| {
            let l = Dense::new(i, o);
            if biased {
                l
            } else {
                l.without_bias()
            }
        };
        (self.linear1, self.linear2) = (dense(d, hidden), dense(hidden, d));
        self
    }

    /// Dropout probability on the attention probabilities, after the attention, inside and
    /// after the feed-forward block (the weights are kept).
    pub fn dropout(mut self, p: f64) -> Self {
        (self.dropout, self.dropout1, self.dropout2) =
            (Dropout::new(p), Dropout::new(p), Dropout::new(p));
        self.self_attn.dropout = Dropout::new(p);
        self
    }

    /// GELU (exact, PyTorch's `activation="gelu"`) in the feed-forward block instead of ReLU.
    pub fn gelu(mut self) -> Self {
        self.activation = Activation::Gelu;
        self
    }

    /// `f` as the feed-forward block's activation (PyTorch's callable `activation`); it must
    /// keep the shape.
    pub fn activation(mut self, f: impl Fn(&Tensor) -> Tensor + Send + Sync + 'static) -> Self {
        self.activation = Activation::Custom(Arc::new(f));
        self
    }

    /// `eps` in both LayerNorms (PyTorch's `layer_norm_eps`, default 1e-5).
    pub fn layer_norm_eps(mut self, eps: f64) -> Self {
        self.norm1 = self.norm1.eps(eps);
        self.norm2 = self.norm2.eps(eps);
        self
    }

    /// Without biases in the attention, the feed-forward block and the LayerNorms
    /// (PyTorch's `bias=False`).
    pub fn without_bias(mut self) -> Self {
        self.self_attn = self.self_attn.without_bias();
        self.linear1 = self.linear1.without_bias();
        self.linear2 = self.linear2.without_bias();
        self.norm1 = self.norm1.without_bias();
        self.norm2 = self.norm2.without_bias();
        self
    }

    /// LayerNorm before each block (pre-norm) instead of after the residual sum.
    pub fn norm_first(mut self, on: bool) -> Self {
        self.norm_first = on;
        self
    }

    fn feed_forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        let h = Layer::forward(&self.linear1, x, mode);
        let h = match &self.activation {
            Activation::Relu => h.relu(),
            Activation::Gelu => h.gelu(),
            Activation::Custom(f) => f(&h),
        };
        let h = Layer::forward(&self.dropout, &h, mode);
        let h = Layer::forward(&self.linear2, &h, mode);
        Layer::forward(&self.dropout2, &h, mode)
    }

    fn self_attention(&self, x: &Tensor, mode: Mode, opts: &Attention) -> Tensor {
        let y = self.self_attn.attend_in(x, x, x, opts, mode);
        Layer::forward(&self.dropout1, &y, mode)
    }

    /// The layer on `x` `[N, T, E]` with the attention settings `opts` (a causal or padding
    /// mask).
    pub fn forward_masked(&self, x: &Tensor, mode: Mode, opts: &Attention) -> Tensor {
        let norm = |n: &LayerNorm, x: &Tensor| Layer::forward(n, x, mode);
        if self.norm_first {
            let x = x + &self.self_attention(&norm(&self.norm1, x), mode, opts);
            &x + &self.feed_forward(&norm(&self.norm2, &x), mode)
        } else {
            let x = norm(&self.norm1, &(x + &self.self_attention(x, mode, opts)));
            norm(&self.norm2, &(&x + &self.feed_forward(&x, mode)))
        }
    }
}

impl Module for TransformerEncoderLayer {
    fn params(&self) -> Vec<(String, Param)> {
        let mut out = prefixed("self_attn", self.self_attn.params());
        out.extend(prefixed("linear1", self.linear1.params()));
        out.extend(prefixed("linear2", self.linear2.params()));
        out.extend(prefixed("norm1", self.norm1.params()));
        out.extend(prefixed("norm2", self.norm2.params()));
        out
    }

    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        let mut out = prefixed("self_attn", self.self_attn.rng_streams());
        out.extend(prefixed("dropout", self.dropout.rng_streams()));
        out.extend(prefixed("dropout1", self.dropout1.rng_streams()));
        out.extend(prefixed("dropout2", self.dropout2.rng_streams()));
        out
    }

    fn name(&self) -> String {
        format!("TransformerEncoderLayer({})", self.self_attn.name())
    }
}

/// The layer without a mask.
impl Layer for TransformerEncoderLayer {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        self.forward_masked(x, mode, &Attention::new())
    }
}

/// PyTorch's `nn.RMSNorm`: `x / √(mean(x²) + eps) · weight` over the last axis; `weight`
/// `[D]`, ones at first. Without an `eps`, the input dtype's machine epsilon, as PyTorch's
/// default.
pub struct RMSNorm {
    weight: Param,
    eps: Option<f64>,
}

impl RMSNorm {
    /// Normalises a last axis of `features` entries.
    pub fn new(features: usize) -> RMSNorm {
        RMSNorm {
            weight: Param::new(Tensor::ones(&[features], DType::F32)),
            eps: None,
        }
    }

    /// A fixed `eps` instead of the dtype's machine epsilon; panics unless finite and not
    /// negative.
    pub fn eps(mut self, eps: f64) -> Self {
        assert!(
            eps.is_finite() && eps >= 0.0,
            "RMSNorm: eps {eps} must be finite and not negative"
        );
        self.eps = Some(eps);
        self
    }
}

impl Module for RMSNorm {
    fn params(&self) -> Vec<(String, Param)> {
        named(&[("weight", &self.weight)])
    }

    fn name(&self) -> String {
        format!("RMSNorm({})", self.weight.numel())
    }
}

impl Layer for RMSNorm {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let features = self.weight.numel();
        let fits = x.ndim() >= 1 && x.shape()[x.ndim() - 1] == features;
        expect_input(&self.name(), fits, &format!("[..., {features}]"), x);
        x.rms_norm(Some(&self.weight.tensor()), self.eps)
    }
}
