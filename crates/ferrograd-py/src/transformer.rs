//! Attention and the transformer layers for Python, with PyTorch's signatures and mask
//! conventions: `scaled_dot_product_attention` (a boolean mask marks the keys that take
//! part), `nn.MultiheadAttention` and `nn.TransformerEncoderLayer` (batch first; a boolean
//! `attn_mask` or key padding mask marks the keys that are hidden), `nn.RMSNorm`.

use std::sync::Arc;

use ferrograd::prelude::*;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{holds_bools, to_tensor};
use crate::guard::{self, HEAVY};
use crate::nn::{input, unsupported, PyLayer};
use crate::tensor::PyTensor;

/// An additive mask (0 where a key takes part, −∞ where it is hidden) from PyTorch's forms:
/// a float mask is already one; in a boolean mask `hidden` is the value that hides.
fn additive(
    mask: Option<&Bound<'_, PyAny>>,
    hidden: bool,
    dtype: DType,
) -> PyResult<Option<Tensor>> {
    let Some(m) = mask.filter(|m| !m.is_none()) else {
        return Ok(None);
    };
    if !holds_bools(m)? {
        let t = to_tensor(m, None)?;
        if !t.dtype().is_float() {
            return Err(PyTypeError::new_err(
                "an attention mask is boolean (which keys take part) or float (added to the \
                 scores), as PyTorch's: got integers",
            ));
        }
        return Ok(Some(t.to_dtype(dtype)));
    }
    let set = to_tensor(m, None)?.to_dtype(dtype);
    let hide = if hidden { set } else { set.rsub_scalar(1.0) };
    let inf = Tensor::full(&[], f64::NEG_INFINITY, dtype);
    guard::run(|| hide.where_cond(&inf, &Tensor::zeros(&[], dtype))).map(Some)
}

/// `scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
/// is_causal=False, scale=None)`, PyTorch's: `softmax(q kᵀ · scale + mask) v` over the last
/// two axes, leading axes broadcast. A boolean `attn_mask` is True where a key takes part.
/// With `dropout_p` > 0 the weights are dropped (whatever the mode, as PyTorch's function
/// does) in a pattern keyed by a draw from the generator `manual_seed` sets.
#[pyfunction]
#[pyo3(signature = (query, key, value, attn_mask=None, dropout_p=0.0, is_causal=false, scale=None))]
#[allow(clippy::too_many_arguments)]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    query: &Bound<'_, PyAny>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    attn_mask: Option<&Bound<'_, PyAny>>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> PyResult<PyTensor> {
    let q = to_tensor(query, None)?;
    let (k, v) = (
        to_tensor(key, Some(q.dtype()))?,
        to_tensor(value, Some(q.dtype()))?,
    );
    let mut opts = Attention::new().causal(is_causal);
    if let Some(m) = additive(attn_mask, false, q.dtype())? {
        opts = opts.mask(&m);
    }
    if let Some(s) = scale {
        opts = guard::run(|| opts.clone().scale(s))?;
    }
    if dropout_p != 0.0 {
        // A refused rate draws nothing from the generator.
        guard::run(|| opts.clone().dropout(dropout_p, 0))?;
        let key = with_default_rng(rng::RngCore::next_u64);
        opts = opts.dropout(dropout_p, key);
    }
    let heavy = q.numel().max(k.numel()) >= HEAVY;
    guard::run_heavy(py, heavy, || q.scaled_dot_product_attention(&k, &v, &opts)).map(PyTensor::new)
}

/// The attention settings of a layer call: PyTorch's `attn_mask` (`[L, S]`, or `[N·H, L, S]`
/// one per sample and head; a boolean one True where hidden), key padding mask (`[N, S]`,
/// True where padded) and `is_causal`. `batch` is N, or None for unbatched inputs (masks
/// `[L, S]` or `[H, L, S]`, padding `[S]`).
fn layer_attention(
    (attn_mask, key_padding_mask): (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    is_causal: bool,
    dtype: DType,
    (batch, heads): (Option<usize>, usize),
) -> PyResult<Attention> {
    let shape_error = |what: &str, want: String, got: &[usize]| {
        guard::op_error(format!("{what} must be {want}, got {got:?}"))
    };
    let mut mask = additive(attn_mask, true, dtype)?;
    if let Some(m) = mask.take() {
        mask = Some(match (m.shape(), batch) {
            (&[_, _], _) => m,
            (&[nh, l, s], Some(n)) if nh == n * heads => m.reshape(&[n, heads, l, s]),
            (&[h, _, _], None) if h == heads => m,
            (other, _) => {
                let lead = batch.map_or(format!("{heads}"), |n| format!("{}", n * heads));
                return Err(shape_error(
                    "attn_mask",
                    format!("[L, S] or [{lead}, L, S]"),
                    other,
                ));
            }
        });
    }
    if let Some(p) = additive(key_padding_mask, true, dtype)? {
        let p = match (p.shape(), batch) {
            (&[n, s], Some(b)) if n == b => p.reshape(&[n, 1, 1, s]),
            (&[_], None) => p,
            (other, _) => {
                let want = batch.map_or("[S]".into(), |n| format!("[{n}, S]"));
                return Err(shape_error("key_padding_mask", want, other));
            }
        };
        mask = Some(match mask {
            Some(m) => guard::run(|| &m + &p)?,
            None => p,
        });
    }
    // As PyTorch, `is_causal` says that `attn_mask` is the causal mask; without one it is
    // applied directly (beside a key padding mask too).
    let causal = is_causal && attn_mask.is_none_or(|m| m.is_none());
    Ok(match mask {
        Some(m) => Attention::new().mask(&m).causal(causal),
        None => Attention::new().causal(causal),
    })
}

/// The batch size of `x` (PyTorch's layout: `[T, N, E]` unless `batch_first`), or None for
/// an unbatched `[T, E]`.
fn batch_size(x: &Tensor, batch_first: bool) -> Option<usize> {
    match *x.shape() {
        [n, _, _] if batch_first => Some(n),
        [_, n, _] => Some(n),
        _ => None,
    }
}

/// `x` as `[N, T, E]` from the layout a layer was built for (`[T, N, E]` unless
/// `batch_first`, PyTorch's default), and back.
fn batch_major(x: Tensor, batch_first: bool) -> Tensor {
    if batch_first || x.ndim() != 3 {
        x
    } else {
        x.transpose(0, 1)
    }
}

/// `MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
/// add_zero_attn=False, kdim=None, vdim=None, batch_first=False)`, PyTorch's parameters
/// (`in_proj_weight`, or `q_proj_weight`, `k_proj_weight`, `v_proj_weight` where `kdim` or
/// `vdim` differ from `embed_dim`; `in_proj_bias`, `out_proj.weight`, `out_proj.bias` unless
/// `bias=False`) and layout (`[L, N, E]` unless `batch_first`, or unbatched `[L, E]`).
#[pyclass(name = "MultiheadAttention", module = "ferrograd.nn", extends = PyLayer)]
pub struct PyMultiheadAttention {
    inner: Arc<MultiheadAttention>,
    batch_first: bool,
    heads: usize,
}

/// The arguments of `MultiheadAttention.forward` after the three inputs.
struct MhaCall<'a, 'py> {
    key_padding_mask: Option<&'a Bound<'py, PyAny>>,
    need_weights: bool,
    attn_mask: Option<&'a Bound<'py, PyAny>>,
    average_attn_weights: bool,
    is_causal: bool,
}

impl PyMultiheadAttention {
    fn run(
        slf: PyRef<'_, Self>,
        (query, key, value): (&Bound<'_, PyAny>, &Bound<'_, PyAny>, &Bound<'_, PyAny>),
        call: MhaCall<'_, '_>,
    ) -> PyResult<(PyTensor, Option<PyTensor>)> {
        let first = slf.batch_first;
        let q = input(query)?;
        let batch = batch_size(&q, first);
        let (q, k, v) = (
            batch_major(q, first),
            batch_major(input(key)?, first),
            batch_major(input(value)?, first),
        );
        let opts = layer_attention(
            (call.attn_mask, call.key_padding_mask),
            call.is_causal,
            q.dtype(),
            (batch, slf.heads),
        )?;
        let (inner, mode) = (slf.inner.clone(), slf.as_super().mode());
        let (need, average) = (call.need_weights, call.average_attn_weights);
        let (y, w) = guard::run_heavy(slf.py(), q.numel() >= HEAVY, || {
            if !need {
                return (inner.attend_in(&q, &k, &v, &opts, mode), None);
            }
            let (y, w) = if average {
                inner.attend_with_weights_in(&q, &k, &v, &opts, mode)
            } else {
                inner.attend_with_head_weights_in(&q, &k, &v, &opts, mode)
            };
            (y, Some(w))
        })?;
        Ok((PyTensor::new(batch_major(y, first)), w.map(PyTensor::new)))
    }
}

#[pymethods]
impl PyMultiheadAttention {
    #[new]
    #[pyo3(signature = (embed_dim, num_heads, dropout=0.0, bias=true, add_bias_kv=false, add_zero_attn=false, kdim=None, vdim=None, batch_first=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        embed_dim: usize,
        num_heads: usize,
        dropout: f64,
        bias: bool,
        add_bias_kv: bool,
        add_zero_attn: bool,
        kdim: Option<usize>,
        vdim: Option<usize>,
        batch_first: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        if add_bias_kv || add_zero_attn {
            return Err(unsupported(
                "MultiheadAttention with add_bias_kv or add_zero_attn",
            ));
        }
        let inner = Arc::new(guard::run(|| {
            let m = MultiheadAttention::new(embed_dim, num_heads).dropout(dropout);
            let m = match (kdim, vdim) {
                (None, None) => m,
                (k, v) => m.kdim_vdim(k.unwrap_or(embed_dim), v.unwrap_or(embed_dim)),
            };
            if bias {
                m
            } else {
                m.without_bias()
            }
        })?);
        let layer: Arc<dyn Layer> = inner.clone();
        let made_with = (
            embed_dim,
            num_heads,
            dropout,
            bias,
            add_bias_kv,
            add_zero_attn,
            kdim,
            vdim,
            batch_first,
        )
            .into_pyobject(py)?;
        let base = PyLayer::new(layer).made_with(made_with);
        Ok(
            PyClassInitializer::from(base).add_subclass(PyMultiheadAttention {
                inner,
                batch_first,
                heads: num_heads,
            }),
        )
    }

    /// `(output, weights)` as PyTorch's: `output` in the inputs' layout, with dropout on the
    /// probabilities in training mode; when `need_weights`, the weights that weighed the
    /// values (after that dropout), averaged over the heads `[N, L, S]` or with
    /// `average_attn_weights=False` each head's `[N, H, L, S]`; else None.
    #[pyo3(signature = (query, key, value, key_padding_mask=None, need_weights=true, attn_mask=None, average_attn_weights=true, is_causal=false))]
    #[allow(clippy::too_many_arguments)]
    fn forward(
        slf: PyRef<'_, Self>,
        query: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        key_padding_mask: Option<&Bound<'_, PyAny>>,
        need_weights: bool,
        attn_mask: Option<&Bound<'_, PyAny>>,
        average_attn_weights: bool,
        is_causal: bool,
    ) -> PyResult<(PyTensor, Option<PyTensor>)> {
        let call = MhaCall {
            key_padding_mask,
            need_weights,
            attn_mask,
            average_attn_weights,
            is_causal,
        };
        Self::run(slf, (query, key, value), call)
    }

    #[pyo3(signature = (query, key, value, key_padding_mask=None, need_weights=true, attn_mask=None, average_attn_weights=true, is_causal=false))]
    #[allow(clippy::too_many_arguments)]
    fn __call__(
        slf: &Bound<'_, Self>,
        query: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        key_padding_mask: Option<&Bound<'_, PyAny>>,
        need_weights: bool,
        attn_mask: Option<&Bound<'_, PyAny>>,
        average_attn_weights: bool,
        is_causal: bool,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let args = PyTuple::new(py, [query, key, value])?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("key_padding_mask", key_padding_mask)?;
        kwargs.set_item("need_weights", need_weights)?;
        kwargs.set_item("attn_mask", attn_mask)?;
        kwargs.set_item("average_attn_weights", average_attn_weights)?;
        kwargs.set_item("is_causal", is_causal)?;
        if let Some(out) = PyLayer::through_hooks(slf.as_any(), args, kwargs)? {
            return Ok(out.unbind());
        }
        let out = Self::forward(
            slf.borrow(),
            query,
            key,
            value,
            key_padding_mask,
            need_weights,
            attn_mask,
            average_attn_weights,
            is_causal,
        )?;
        Ok(out.into_pyobject(py)?.into_any().unbind())
    }

    /// Attention runs its hooks (as PyTorch's), from its own call.
    #[classattr]
    fn _calls_hooks() -> bool {
        true
    }
}

/// `TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
/// activation="relu", layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True)`,
/// PyTorch's parameters and layout (`[T, N, E]` unless `batch_first`, or unbatched `[T, E]`);
/// `activation` is `"relu"`, `"gelu"` or any callable of a tensor.
#[pyclass(name = "TransformerEncoderLayer", module = "ferrograd.nn", extends = PyLayer)]
pub struct PyTransformerEncoderLayer {
    inner: Arc<TransformerEncoderLayer>,
    settings: EncoderSettings,
}

/// What a `TransformerEncoderLayer` was built with.
#[derive(Clone)]
struct EncoderSettings {
    d_model: usize,
    nhead: usize,
    dim_feedforward: usize,
    dropout: f64,
    activation: Activation,
    layer_norm_eps: f64,
    norm_first: bool,
    bias: bool,
    batch_first: bool,
}

/// The feed-forward block's activation: the core's ReLU or GELU (for `"relu"`, `"gelu"`,
/// `F.relu` and `F.gelu`), or a Python callable.
#[derive(Clone)]
enum Activation {
    Relu,
    Gelu,
    Callable(Arc<Py<PyAny>>),
}

impl Activation {
    /// PyTorch's `activation` argument: `"relu"`, `"gelu"`, or a callable.
    fn from_py(activation: &Bound<'_, PyAny>) -> PyResult<Activation> {
        if let Ok(name) = activation.extract::<String>() {
            return match name.as_str() {
                "relu" => Ok(Activation::Relu),
                "gelu" => Ok(Activation::Gelu),
                other => Err(PyValueError::new_err(format!(
                    "activation should be relu/gelu, not {other}"
                ))),
            };
        }
        if !activation.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "activation should be \"relu\", \"gelu\" or a callable, not {}",
                activation.get_type().name()?
            )));
        }
        let functional = activation.py().import("ferrograd.nn.functional")?;
        Ok(if activation.is(&functional.getattr("relu")?) {
            Activation::Relu
        } else if activation.is(&functional.getattr("gelu")?) {
            Activation::Gelu
        } else {
            Activation::Callable(Arc::new(activation.clone().unbind()))
        })
    }
}

impl EncoderSettings {
    fn build(&self) -> PyResult<Arc<TransformerEncoderLayer>> {
        guard::run(|| {
            let l = TransformerEncoderLayer::new(self.d_model, self.nhead);
            let l = if self.bias { l } else { l.without_bias() };
            let l = l
                .dim_feedforward(self.dim_feedforward)
                .dropout(self.dropout)
                .layer_norm_eps(self.layer_norm_eps)
                .norm_first(self.norm_first);
            Arc::new(match &self.activation {
                Activation::Relu => l,
                Activation::Gelu => l.gelu(),
                Activation::Callable(f) => l.activation(call_python(f.clone(), self.batch_first)),
            })
        })
    }
}

/// A Python callable as a function of tensors: it runs with the GIL taken back, sees the
/// layer's layout (`[T, N, F]` unless `batch_first`, as in PyTorch), and an exception it
/// raises reaches the caller unchanged.
fn call_python(
    f: Arc<Py<PyAny>>,
    batch_first: bool,
) -> impl Fn(&Tensor) -> Tensor + Send + Sync + 'static {
    move |h| {
        Python::attach(|py| {
            let y = f
                .bind(py)
                .call1((PyTensor::new(batch_major(h.clone(), batch_first)),));
            y.and_then(|y| to_tensor(&y, None))
                .map(|y| batch_major(y, batch_first))
                .unwrap_or_else(|e| guard::raise_through(e, "TransformerEncoderLayer activation"))
        })
    }
}

#[pymethods]
impl PyTransformerEncoderLayer {
    #[new]
    #[pyo3(signature = (d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=None, layer_norm_eps=1e-5, batch_first=false, norm_first=false, bias=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        d_model: usize,
        nhead: usize,
        dim_feedforward: usize,
        dropout: f64,
        activation: Option<&Bound<'_, PyAny>>,
        layer_norm_eps: f64,
        batch_first: bool,
        norm_first: bool,
        bias: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let made_with = (
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation.map(|a| a.clone().unbind()),
            layer_norm_eps,
            batch_first,
            norm_first,
            bias,
        )
            .into_pyobject(py)?;
        let activation = match activation {
            Some(a) => Activation::from_py(a)?,
            None => Activation::Relu,
        };
        let settings = EncoderSettings {
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            norm_first,
            bias,
            batch_first,
        };
        let inner = settings.build()?;
        let layer: Arc<dyn Layer> = inner.clone();
        Ok(
            PyClassInitializer::from(PyLayer::new(layer).made_with(made_with))
                .add_subclass(PyTransformerEncoderLayer { inner, settings }),
        )
    }

    /// The layer on `src` in the layer's mode and layout, with PyTorch's masks.
    #[pyo3(signature = (src, src_mask=None, src_key_padding_mask=None, is_causal=false))]
    fn forward(
        slf: PyRef<'_, Self>,
        src: &Bound<'_, PyAny>,
        src_mask: Option<&Bound<'_, PyAny>>,
        src_key_padding_mask: Option<&Bound<'_, PyAny>>,
        is_causal: bool,
    ) -> PyResult<PyTensor> {
        let first = slf.settings.batch_first;
        let x = input(src)?;
        let batch = batch_size(&x, first);
        let x = batch_major(x, first);
        let opts = layer_attention(
            (src_mask, src_key_padding_mask),
            is_causal,
            x.dtype(),
            (batch, slf.settings.nhead),
        )?;
        let mode = slf.as_super().mode();
        let inner = slf.inner.clone();
        guard::run_heavy(slf.py(), x.numel() >= HEAVY, || {
            inner.forward_masked(&x, mode, &opts)
        })
        .map(|y| PyTensor::new(batch_major(y, first)))
    }

    #[pyo3(signature = (src, src_mask=None, src_key_padding_mask=None, is_causal=false))]
    fn __call__(
        slf: &Bound<'_, Self>,
        src: &Bound<'_, PyAny>,
        src_mask: Option<&Bound<'_, PyAny>>,
        src_key_padding_mask: Option<&Bound<'_, PyAny>>,
        is_causal: bool,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("src_mask", src_mask)?;
        kwargs.set_item("src_key_padding_mask", src_key_padding_mask)?;
        kwargs.set_item("is_causal", is_causal)?;
        let args = PyTuple::new(py, [src])?;
        if let Some(out) = PyLayer::through_hooks(slf.as_any(), args, kwargs)? {
            return Ok(out.unbind());
        }
        let out = Self::forward(slf.borrow(), src, src_mask, src_key_padding_mask, is_causal)?;
        Ok(Py::new(py, out)?.into_any())
    }

    /// The encoder layer runs its hooks (as PyTorch's), from its own call.
    #[classattr]
    fn _calls_hooks() -> bool {
        true
    }
}

/// `RMSNorm(normalized_shape, eps=None)`: `weight` `[D]`; without `eps`, the input dtype's
/// machine epsilon, as PyTorch's.
#[pyclass(name = "RMSNorm", module = "ferrograd.nn", extends = PyLayer)]
pub struct PyRMSNorm;

#[pymethods]
impl PyRMSNorm {
    #[new]
    #[pyo3(signature = (normalized_shape, eps=None))]
    fn new(
        py: Python<'_>,
        normalized_shape: usize,
        eps: Option<f64>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let layer: Arc<dyn Layer> = guard::run(|| -> Arc<dyn Layer> {
            let l = RMSNorm::new(normalized_shape);
            Arc::new(match eps {
                Some(e) => l.eps(e),
                None => l,
            })
        })?;
        let made_with = (normalized_shape, eps).into_pyobject(py)?;
        let base = PyLayer::new(layer).made_with(made_with);
        Ok(PyClassInitializer::from(base).add_subclass(PyRMSNorm))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, m)?)?;
    m.add_class::<PyMultiheadAttention>()?;
    m.add_class::<PyTransformerEncoderLayer>()?;
    m.add_class::<PyRMSNorm>()?;
    Ok(())
}
