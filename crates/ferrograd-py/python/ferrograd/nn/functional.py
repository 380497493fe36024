"""``ferrograd.nn.functional`` (``F``): PyTorch's functional names, arguments and numbers,
written with the core's differentiable ops (every function here has gradients of every
order, since the ops under it do)."""

import operator as _operator

import numpy as _np

from .. import _core
from .._core import Tensor


def _t(x):
    return x if isinstance(x, Tensor) else _core.tensor(x)


# ---- activations ----


def relu(input, inplace=False):
    return _t(input).relu()


def _bounded(x, lo, hi):
    """``x`` clamped to ``[lo, hi]`` with derivative 0 at the bounds as well as beyond them
    (PyTorch's hardtanh, relu6, hardsigmoid), NaN kept."""
    inside = (x > lo) & (x < hi)
    return inside.where_(x, x.clamp(lo, hi).detach())


def relu6(input, inplace=False):
    return _bounded(_t(input), 0.0, 6.0)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _t(input).leaky_relu(negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _t(input).elu(alpha)


def gelu(input, approximate="none"):
    """GELU: exact (``x·Φ(x)``) or, with ``approximate="tanh"``,
    ``½x(1 + tanh(√(2/π)(x + 0.044715x³)))`` as PyTorch's."""
    return _t(input).gelu(approximate)


def silu(input, inplace=False):
    x = _t(input)
    return x * x.sigmoid()


def sigmoid(input):
    return _t(input).sigmoid()


def tanh(input):
    return _t(input).tanh()


def softplus(input, beta=1.0, threshold=20.0):
    x = _t(input)
    if beta == 1.0:
        return x.softplus()
    return (x * beta).softplus() / beta


def _softmax_dim(x, dim):
    """``dim``, or without one PyTorch's implicit choice: 0 for 0-, 1- and 3-d input, else 1."""
    return dim if dim is not None else (0 if len(x.shape) in (0, 1, 3) else 1)


def softmax(input, dim=None, dtype=None):
    x = _t(input) if dtype is None else _t(input).to(dtype)
    return x.reshape(1).softmax(0).reshape(()) if len(x.shape) == 0 else x.softmax(_softmax_dim(x, dim))


def log_softmax(input, dim=None, dtype=None):
    x = _t(input) if dtype is None else _t(input).to(dtype)
    return x.reshape(1).log_softmax(0).reshape(()) if len(x.shape) == 0 else x.log_softmax(_softmax_dim(x, dim))


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes elements with probability ``p`` and scales the rest by ``1/(1−p)`` (training
    only), from the generator ``fg.manual_seed`` seeds."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    x = _t(input)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = (_core.rand(*x.shape, dtype=x.dtype) >= p).to(x.dtype)
    return x * keep / (1.0 - p)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """PyTorch's ``scaled_dot_product_attention``: ``softmax(q kᵀ · scale + mask) v`` over the
    last two axes (a boolean ``attn_mask`` is True where a key takes part), fused, with
    derivatives of every order."""
    return _core.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / √(mean(x²) + eps) · weight`` over the last axis (``eps``: the dtype's machine
    epsilon when None, as PyTorch's)."""
    x = _t(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or x.shape[-1] != shape[0]:
        raise ValueError(f"rms_norm: normalized_shape {shape} must be the last axis of {tuple(x.shape)}")
    return x.rms_norm(weight, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """``(x − mean) / √(var + eps) · weight + bias`` over the last axis, one fused op."""
    x = _t(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or x.shape[-1] != shape[0]:
        raise ValueError(f"layer_norm: normalized_shape {shape} must be the last axis of {tuple(x.shape)}")
    return x.layer_norm(weight, bias, eps)


# ---- linear maps, convolution, pooling ----


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``, weight ``[out, in]`` as PyTorch's. A bias ``[out]`` is
    added as the product is stored; any other bias that broadcasts (a number, ``[1]``,
    ``[1, out]``) is added afterwards, as PyTorch accepts those too."""
    x = _t(input)
    if bias is None or tuple(getattr(bias, "shape", ())) == (_t(weight).shape[0],):
        return x.linear(weight, bias)
    return x.linear(weight) + bias


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's ``conv2d``: sizes an int or a pair ``(height, width)``, ``padding`` also
    ``"same"`` (stride 1) or ``"valid"``."""
    return _t(input).conv2d(weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's ``conv1d`` over ``[N, C, L]`` (or unbatched ``[C, L]``) with ``weight``
    ``[out, in/groups, k]``: the 2-d convolution of a height-1 image, so its derivatives are
    the 2-d one's."""
    x = _t(input)
    unbatched = x.ndim == 2
    x = x.unsqueeze(0) if unbatched else x
    one = lambda v: (1, v) if isinstance(v, int) else (1, v[0])  # noqa: E731
    pad = padding if isinstance(padding, str) else (0, one(padding)[1])
    y = (
        x.unsqueeze(2)
        .conv2d(_t(weight).unsqueeze(2), bias, stride=one(stride), padding=pad, dilation=one(dilation), groups=groups)
        .squeeze(2)
    )
    return y.squeeze(0) if unbatched else y


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """PyTorch's ``group_norm``: the channels of ``[N, C, *]`` in ``num_groups`` groups, each
    group normalised over its channels and positions, then ``weight`` and ``bias`` per
    channel."""
    x = _t(input)
    n, c = x.shape[0], x.shape[1]
    if c % num_groups:
        raise ValueError(f"group_norm: {num_groups} groups do not divide {c} channels")
    if x.numel() == 0:
        return x * 1.0
    grouped = x.reshape(n, num_groups, -1)
    centered = grouped - grouped.mean(-1, keepdim=True)
    scale = (centered.square().mean(-1, keepdim=True) + eps).rsqrt()
    y = (centered * scale).reshape(*x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * _t(weight).reshape(*per_channel)
    if bias is not None:
        y = y + _t(bias).reshape(*per_channel)
    return y


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _t(input).conv_transpose2d(
        weight,
        bias,
        stride=stride,
        padding=padding,
        output_padding=output_padding,
        groups=groups,
        dilation=dilation,
    )


def max_pool2d(input, kernel_size, stride=None, padding=0):
    """Sizes an int or a pair ``(height, width)``; the stride defaults to the kernel size."""
    return _t(input).max_pool2d(kernel_size, None if stride in (None, []) else stride, padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0):
    return _t(input).avg_pool2d(kernel_size, None if stride in (None, []) else stride, padding)


def adaptive_avg_pool2d(input, output_size):
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    return _t(input).adaptive_avg_pool2d(size)


def pad(input, pad, mode="constant", value=None):
    """PyTorch's ``pad``: ``(left, right, top, bottom, ...)`` from the last axis backwards;
    constant padding only."""
    if mode != "constant":
        raise ValueError(f"pad: mode {mode!r} is not supported (constant only)")
    if len(pad) % 2:
        raise ValueError(f"pad: {tuple(pad)} must have an even length")
    x = _t(input)
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    return x.pad(pairs, 0.0 if value is None else float(value))


def embedding(input, weight, padding_idx=None):
    """Rows of ``weight`` at the integer indices ``input`` (any shape): ``[*input.shape, D]``.
    The rows read at ``padding_idx`` pass no gradient to ``weight``, as PyTorch's."""
    idx = _np.asarray(_t(input).numpy())
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers (int64), got {idx.dtype}")
    w = _t(weight)
    flat = idx.reshape(-1).astype(_np.int64, copy=False)
    rows = w.index_select(0, flat)
    if padding_idx is not None:
        if isinstance(padding_idx, bool):
            raise TypeError("embedding: padding_idx must be an integer, got a bool")
        padding_idx = _operator.index(padding_idx)
        n = w.shape[0]
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx {padding_idx} is not an index of {n} rows")
        pad = flat == padding_idx % n
        if pad.any():
            rows = _core.tensor(pad[:, None]).where_(rows.detach(), rows)
    return rows.reshape(*idx.shape, w.shape[1])


def one_hot(tensor, num_classes=-1):
    """int64 rows with a 1 at each class index (``num_classes``: the largest index + 1 when
    -1), as PyTorch's."""
    idx = _np.asarray(_t(tensor).numpy())
    if idx.dtype.kind not in "iu":
        raise TypeError("one_hot is only applicable to index tensors (int64)")
    n = int(idx.max()) + 1 if num_classes < 0 and idx.size else max(num_classes, 0)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"one_hot: class values must be in [0, {n})")
    out = _np.zeros(idx.shape + (n,), dtype=_np.int64)
    _np.put_along_axis(out, idx[..., None], 1, axis=-1)
    return _core.tensor(out)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    x = _t(input)
    norm = (x.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return x / norm.clamp(min=eps)


# ---- losses (PyTorch's reductions: "mean", "sum", "none") ----


def _reduce(per, reduction):
    if reduction == "mean":
        return per.mean()
    if reduction == "sum":
        return per.sum()
    if reduction == "none":
        return per
    raise ValueError(f"{reduction!r} is not a valid value for reduction")


def mse_loss(input, target, reduction="mean"):
    x = _t(input)
    return _reduce((x - _target_like(target, x)).square(), reduction)


def l1_loss(input, target, reduction="mean"):
    x = _t(input)
    return _reduce((x - _target_like(target, x)).abs(), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    x = _t(input)
    d = (x - _target_like(target, x)).abs()
    if beta == 0.0:
        return _reduce(d, reduction)
    small = (d < beta).to(x.dtype)
    per = small * d.square() * (0.5 / beta) + (1.0 - small) * (d - 0.5 * beta)
    return _reduce(per, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    return smooth_l1_loss(input, target, reduction, beta=delta) * delta


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    """``−[p·t·log σ(x) + (1−t)·log(1−σ(x))]`` computed without overflow (as PyTorch's)."""
    x = _t(input)
    t = _target_like(target, x)
    # log σ(x) = −softplus(−x), log(1 − σ(x)) = −softplus(x)
    if pos_weight is None:
        per = t * (-x).softplus() + (1.0 - t) * x.softplus()
    else:
        per = _target_like(pos_weight, x) * t * (-x).softplus() + (1.0 - t) * x.softplus()
    if weight is not None:
        per = per * _target_like(weight, x)
    return _reduce(per, reduction)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """On probabilities; each log is clamped at −100 as PyTorch's."""
    x = _t(input)
    t = _target_like(target, x)
    per = -(t * x.log().clamp(min=-100.0) + (1.0 - t) * (1.0 - x).log().clamp(min=-100.0))
    if weight is not None:
        per = per * _target_like(weight, x)
    return _reduce(per, reduction)


def _target_like(target, x):
    t = _t(target)
    return t if t.dtype == x.dtype else t.to(x.dtype)


def _classes_last(x):
    """``[N, C, d1, ...]`` as ``[N·d1·..., C]`` (PyTorch's class axis is 1)."""
    if x.ndim == 1:
        return x.unsqueeze(0)
    if x.ndim > 2:
        x = x.permute(0, *range(2, x.ndim), 1)
    return x.reshape(-1, x.shape[-1])


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    x = _t(input)
    return _class_loss(_classes_last(x), target, weight, ignore_index, reduction, 0.0, x.shape)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """PyTorch's ``cross_entropy``: logits ``[N, C]`` or ``[N, C, d1, ...]`` (or ``[C]``)
    against class indices (int64, ``[N]`` or ``[N, d1, ...]``, entries equal to
    ``ignore_index`` left out) or class probabilities of the logits' shape; per-class
    ``weight``; ``label_smoothing`` mixes the target with the uniform distribution."""
    x = _t(input)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    logp = _classes_last(x).log_softmax(-1)
    t = _t(target)
    if t.dtype.is_floating_point:
        probs = _classes_last(_target_like(t, x))
        classes = logp.shape[-1]
        if label_smoothing:
            probs = probs * (1.0 - label_smoothing) + label_smoothing / classes
        w = 1.0 if weight is None else _target_like(weight, x)
        per = -(logp * probs * w).sum(-1)
        if reduction == "none":
            return _unreduced(per, None, x.shape)
        return _reduce(per, reduction)
    return _class_loss(logp, t, weight, ignore_index, reduction, label_smoothing, x.shape)


def _class_loss(logp, target, weight, ignore_index, reduction, smoothing, shape=None):
    """The loss of log-probabilities ``[M, C]`` against class indices, as PyTorch's
    ``nll_loss`` (and ``cross_entropy``'s smoothing): a weighted mean over the entries that
    are not ``ignore_index``."""
    m, classes = logp.shape
    if _core.func_is_recording() and weight is None and not smoothing:
        # Under ``vmap`` or ``jvp`` the targets stay a tensor: the core's loss reads and
        # checks them by its own ops, which the transform follows.
        t = _t(target)
        out = _core.NLLLoss(ignore_index=ignore_index, reduction=reduction)(logp, t.reshape(-1))
        return _unreduced(out, t, shape) if reduction == "none" else out
    idx = _np.asarray(_t(target).numpy()).reshape(-1)
    if idx.dtype.kind not in "iu":
        raise TypeError("class-index targets must be int64")
    if idx.size != m:
        raise ValueError(f"expected {m} class indices, got target of {idx.size}")
    valid = idx != ignore_index
    if _np.any((idx[valid] < 0) | (idx[valid] >= classes)):
        raise IndexError(f"target values must be in [0, {classes}) (or ignore_index={ignore_index})")
    targets = _core.tensor(idx.astype(_np.int64, copy=False))
    if weight is None and not smoothing:
        # The core's loss picks each row's entry (one read per row, and its derivative
        # scatters back): a row left out is never read, and no −∞ elsewhere in a row meets a
        # factor 0 (a one-hot product would make it NaN).
        out = _core.NLLLoss(ignore_index=ignore_index, reduction=reduction)(logp, targets)
        return _unreduced(out, idx, shape) if reduction == "none" else out
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction!r} is not a valid value for reduction")
    # Each row's picked term from the core (0 where left out), weighted by its class.
    per = _core.NLLLoss(ignore_index=ignore_index, reduction="none")(logp, targets)
    class_w = _np.ones(classes) if weight is None else _np.asarray(_t(weight).numpy(), dtype=_np.float64)
    row_w = class_w[_np.where(valid, idx, 0)] * valid
    if weight is not None:
        per = per * _core.tensor(row_w, dtype=logp.dtype)
    if smoothing:
        # The uniform part over the rows that count (a row left out is zeroed first).
        kept = logp if valid.all() else logp.masked_fill(_core.tensor(~valid[:, None]), 0.0)
        spread = kept if weight is None else kept * _core.tensor(class_w, dtype=logp.dtype)
        per = per * (1.0 - smoothing) - spread.sum(-1) * (smoothing / classes)
    if reduction == "mean":
        total = float(row_w.sum())
        # Nothing counted: NaN, as PyTorch's 0/0, with gradients 0 rather than NaN.
        return per.sum() + float("nan") if total == 0.0 else per.sum() / total
    if reduction == "sum":
        return per.sum()
    return _unreduced(per, idx, shape)


def _unreduced(per, idx, shape):
    """An unreduced class loss (one value per row) in the shape of the logits' ``[N, d1, ...]``
    without the classes (axis 1), or of the flat targets when the logits' shape is not given."""
    if shape is None:
        out_shape = idx.shape
    else:
        out_shape = (shape[0],) + tuple(shape[2:]) if len(shape) > 1 else ()
    return per.reshape(*out_shape) if out_shape else per.reshape(())


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Upsampling of ``[N, C, H, W]``: ``mode="nearest"`` by a whole ``scale_factor`` (or to
    a ``size`` that is a whole multiple of the input's), as PyTorch's; other modes and
    fractional factors are not supported."""
    x = _t(input)
    if mode != "nearest":
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (nearest is)")
    if x.ndim != 4:
        raise NotImplementedError(f"interpolate: {x.ndim}-d input is not supported ([N, C, H, W] is)")
    h, w = x.shape[2], x.shape[3]
    if size is not None:
        sh, sw = (size, size) if isinstance(size, int) else tuple(size)
        factors = {sh / h, sw / w}
    elif scale_factor is not None:
        factors = set(scale_factor) if isinstance(scale_factor, (tuple, list)) else {scale_factor}
    else:
        raise ValueError("interpolate: either size or scale_factor should be defined")
    if len(factors) != 1 or not float(next(iter(factors))).is_integer() or next(iter(factors)) < 1:
        raise NotImplementedError(f"interpolate: scale factors {sorted(factors)} (one whole factor is supported)")
    return x.upsample_nearest2d(int(next(iter(factors))))


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """PyTorch's ``kl_div``: ``target · (log target − input)`` with ``input`` log-probabilities
    (0 where ``target`` is 0), or ``exp(target) · (target − input)`` with ``log_target``;
    ``reduction`` "mean" (over elements), "batchmean" (over the first axis), "sum", "none"."""
    x, t = _t(input), _t(target)
    if log_target:
        pointwise = t.exp() * (t - x)
    else:
        safe = (t > 0).where_(t, 1.0)
        pointwise = (t > 0).where_(t * (safe.log() - x), 0.0)
    if reduction == "none":
        return pointwise
    if reduction == "sum":
        return pointwise.sum()
    if reduction == "batchmean":
        return pointwise.sum() / x.shape[0]
    if reduction == "mean":
        return pointwise.mean()
    raise ValueError(f"{reduction!r} is not a valid value for reduction")


# ---- more activations and distances, composed of the core's ops ----


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _bounded(_t(input), min_val, max_val)


def hardsigmoid(input, inplace=False):
    return relu6(_t(input) + 3.0) / 6.0


def hardswish(input, inplace=False):
    x = _t(input)
    return x * relu6(x + 3.0) / 6.0


def mish(input, inplace=False):
    x = _t(input)
    return x * softplus(x).tanh()


def logsigmoid(input):
    return -softplus(-_t(input))


def softmin(input, dim=None, dtype=None):
    return softmax(-_t(input), dim, dtype)


def glu(input, dim=-1):
    """The first half along ``dim`` gated by the sigmoid of the second."""
    x = _t(input)
    if x.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    n = x.shape[dim]
    if n % 2:
        raise RuntimeError(f"glu: Halving dimension must be even, but dimension {dim % x.ndim} is size {n}")
    return x.narrow(dim, 0, n // 2) * x.narrow(dim, n // 2, n // 2).sigmoid()


def celu(input, alpha=1.0, inplace=False):
    x = _t(input)
    return x.relu() + ((x.clamp(max=0.0) / alpha).exp() - 1.0).clamp(max=0.0) * alpha


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(input, inplace=False):
    x = _t(input)
    return (x.relu() + (x.clamp(max=0.0).exp() - 1.0) * _SELU_ALPHA) * _SELU_SCALE


def softsign(input):
    x = _t(input)
    return x / (x.abs() + 1.0)


def threshold(input, threshold, value, inplace=False):
    """``value`` where ``x ≤ threshold``, else ``x`` (NaN kept)."""
    x = _t(input)
    return (x <= threshold).where_(value, x)


def prelu(input, weight):
    """``max(0, x) + weight · min(0, x)``, ``weight`` one value or one per channel (axis 1)."""
    x, w = _t(input), _t(weight)
    if w.numel() > 1 and x.ndim >= 2:
        w = w.reshape(-1, *([1] * (x.ndim - 2)))
    return x.relu() + w * x.clamp(max=0.0)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``x1·x2 / (max(‖x1‖, eps) · max(‖x2‖, eps))`` along ``dim``, as PyTorch's."""
    a, b = _t(x1), _t(x2)
    na = a.norm(2, dim=dim, keepdim=True).clamp(min=eps)
    nb = b.norm(2, dim=dim, keepdim=True).clamp(min=eps)
    return ((a / na) * (b / nb)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``‖x1 − x2 + eps‖_p`` over the last axis."""
    return (_t(x1) - _t(x2) + eps).norm(p, dim=-1, keepdim=keepdim)


def pixel_shuffle(input, upscale_factor):
    """``[.., C·r², H, W]`` → ``[.., C, H·r, W·r]``."""
    x, r = _t(input), upscale_factor
    if x.ndim < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {x.ndim} dimension(s)"
        )
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise RuntimeError(
            f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    x = x.reshape(-1, c // (r * r), r, r, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """``[.., C, H·r, W·r]`` → ``[.., C·r², H, W]``."""
    x, r = _t(input), downscale_factor
    if x.ndim < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with {x.ndim} dimension(s)"
        )
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise RuntimeError(
            f"pixel_unshuffle expects height and width to be divisible by downscale_factor {r}, got {h}×{w}"
        )
    x = x.reshape(-1, c, h // r, r, w // r, r).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(*lead, c * r * r, h // r, w // r)
