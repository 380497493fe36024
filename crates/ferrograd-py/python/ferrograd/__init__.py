"""ferrograd for Python: n-dimensional tensors on ferrograd's Rust kernels, reverse-mode
autodiff with higher-order gradients and custom gradients, and tinynn's training pipeline.

    import ferrograd as fg
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    grads = loss.backward()     # this pass's gradients; also added to w.grad (as PyTorch)
    w.grad                      # tensor([2., 4.])

Errors from the core (shape mismatches, bad axes) raise ``ValueError`` with the core's
message; file errors raise ``OSError`` naming the file.
"""

import functools as _functools
from builtins import bool as _builtin_bool
from importlib import metadata as _metadata

import numpy as _np

from . import _core
from . import reshaping_and_reductions as _reshaping_and_reductions  # noqa: F401 (attaches more)
from . import tensor_methods as _tensor_methods  # noqa: F401 (attaches PyTorch's smaller methods)
from ._core import (
    Gradients,
    Model,
    OpError,
    Tensor,
    arange,
    cat,
    dtype,
    full,
    get_num_threads,
    grad,
    is_grad_enabled,
    linspace,
    live_nodes,
    manual_seed,
    multinomial,
    ones,
    rand,
    randn,
    set_num_threads,
    tensor,
    zeros,
)
from .devices import backends, cuda, device
from .devices import on_cpu as _on_cpu
from .matrices import (  # noqa: E402,F401
    addmm,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    baddbmm,
    broadcast_tensors,
    cdist,
    column_stack,
    diag,
    diagonal,
    dstack,
    hstack,
    kron,
    meshgrid,
    tensordot,
    trace,
    tril_indices,
    triu_indices,
    vstack,
)
from .serialization import load, save

try:
    __version__ = _metadata.version("ferrograd")
except _metadata.PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

float32 = dtype.float32
float64 = dtype.float64
int64 = dtype.int64
bool = dtype.bool
float = float32
double = float64
long = int64


# PyTorch's creation functions take `device=` (the CPU only here).
tensor, zeros, ones, full, randn, rand, arange, linspace = map(
    _on_cpu, (tensor, zeros, ones, full, randn, rand, arange, linspace)
)


def from_numpy(array, requires_grad=False):
    """A tensor with ``array``'s values, dtype and shape (the values are copied)."""
    return tensor(array, requires_grad=requires_grad)


def stack(tensors, dim=0, axis=None):
    """The tensors stacked along a new axis ``dim`` (``axis`` is TensorFlow's name)."""
    return _core.stack(list(tensors), axis if axis is not None else dim)


def einsum(equation, *operands):
    """Einstein summation as PyTorch's ``einsum``: ``fg.einsum("bij,bjk->bik", a, b)``, or
    the operands as one list; ``...`` for broadcast axes, a repeated letter for a diagonal,
    without ``->`` the letters used once in alphabetical order."""
    if not isinstance(equation, str):
        raise TypeError("einsum: the equation comes first, as a string (PyTorch's sublist form is not supported)")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    return _core.einsum(equation, list(operands))


class set_grad_enabled:
    """Turns recording on this thread on or off: at once when called, and for a block as
    ``with fg.set_grad_enabled(False):`` (the previous setting comes back on exit)."""

    def __init__(self, mode):
        self._previous = _core.set_grad_enabled(_builtin_bool(mode))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _core.set_grad_enabled(self._previous)
        return False


class no_grad:
    """``with fg.no_grad():`` (or ``@fg.no_grad`` / ``@fg.no_grad()``): nothing inside records
    a graph.

    Scopes nest and restore the previous setting on exit, also when an exception leaves
    them. Recording is per thread, as in PyTorch.
    """

    _enabled = False

    def __new__(cls, func=None):
        if func is not None and callable(func):
            return cls()(func)  # used as a bare decorator
        return super().__new__(cls)

    def __init__(self, func=None):
        self._previous = []

    def __enter__(self):
        self._previous.append(_core.set_grad_enabled(self._enabled))
        return self

    def __exit__(self, *exc):
        _core.set_grad_enabled(self._previous.pop())
        return False

    def __call__(self, func):
        @_functools.wraps(func)
        def wrapper(*args, **kwargs):
            with type(self)():
                return func(*args, **kwargs)

        return wrapper


class enable_grad(no_grad):
    """Recording on, also inside a ``no_grad`` scope."""

    _enabled = True


class inference_mode(no_grad):
    """PyTorch's ``inference_mode``: ``no_grad`` (``inference_mode(False)`` changes nothing)."""

    def __new__(cls, mode=True):
        if callable(mode):
            return cls()(mode)  # used as a bare decorator
        return super().__new__(cls)

    def __init__(self, mode=True):
        super().__init__()
        self._mode = _builtin_bool(mode)

    def __enter__(self):
        # Off inside, or with mode=False whatever was on stays.
        self._previous.append(_core.set_grad_enabled(_core.is_grad_enabled() and not self._mode))
        return self

    def __call__(self, func):
        @_functools.wraps(func)
        def wrapper(*args, **kwargs):
            with inference_mode(self._mode):
                return func(*args, **kwargs)

        return wrapper


def _as_tensor(x):
    return x if isinstance(x, Tensor) else tensor(x)


def custom_gradient(f=None, *, name=None):
    """Decorator for a function with a derivative of its own, as ``tf.custom_gradient``.

    The function takes tensors and returns ``(y, grad_fn)``; ``grad_fn(upstream)`` returns one
    gradient per argument (a tensor, or a tuple of them). If ``grad_fn`` takes a ``variables``
    argument, it is called as ``grad_fn(upstream, variables=[...])`` with the trainable
    leaves the function read besides its arguments (``None`` when there are none) and returns
    ``(argument_grads, variable_grads)``. When gradients are taken with ``create_graph=True``,
    ``grad_fn``'s own operations are recorded, so a custom gradient can be differentiated
    again (a ``custom_gradient`` inside ``grad_fn`` sets the second derivative).
    """

    def decorate(func):
        label = name or getattr(func, "__name__", "custom_gradient")

        @_functools.wraps(func)
        def wrapper(*args):
            return _core.custom_gradient_call(func, tuple(args), label)

        return wrapper

    return decorate(f) if f is not None else decorate


def gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, second_order=False):
    """Compares ``func``'s gradients at ``inputs`` (in float64) with central finite
    differences (and its second derivatives with ``second_order=True``). Returns True or
    raises ``ValueError`` naming the worst element."""
    return _core.gradcheck(func, list(inputs), eps, atol, rtol, second_order)


def gradgradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """``gradcheck`` of the second derivatives."""
    return gradcheck(func, inputs, eps, atol, rtol, second_order=True)


def detach(x):
    """``x`` cut from the graph (``stop_gradient``)."""
    return _as_tensor(x).detach()


stop_gradient = detach


def _unary(method):
    def op(x, *args, **kwargs):
        return getattr(_as_tensor(x), method)(*args, **kwargs)

    op.__name__ = method
    op.__doc__ = f"``x.{method}()`` for a tensor or anything ``fg.tensor`` accepts."
    return op


# One function per element-wise primitive of the core's table (exp, log, sqrt, abs, sign, sin,
# cos, tanh, sigmoid, relu, softplus, erf, log1p, expm1, neg, ...): a primitive added there
# is a function here too.
for _primitive, _constants, _domain in _core.elementwise_primitives():
    if not _constants:
        globals()[_primitive] = _unary(_primitive)
del _primitive, _constants, _domain

# And of two operands (torch.add, torch.maximum, torch.lt, ...).
for _primitive, _differentiable, _divisor in _core.binary_primitives():
    globals()[_primitive] = _unary(_primitive)
del _primitive, _differentiable, _divisor

gelu = _unary("gelu")
softmax = _unary("softmax")
log_softmax = _unary("log_softmax")
matmul = _unary("matmul")
clamp = _unary("clamp")
pad = _unary("pad")
index_select = _unary("index_select")
index_add = _unary("index_add")
narrow = _unary("narrow")
conv2d = _unary("conv2d")
conv_transpose2d = _unary("conv_transpose2d")
max_pool2d = _unary("max_pool2d")
avg_pool2d = _unary("avg_pool2d")
batch_norm = _unary("batch_norm")
argmax = _unary("argmax")
argmin = _unary("argmin")
transpose = _unary("transpose")
tril = _unary("tril")
triu = _unary("triu")
masked_fill = _unary("masked_fill")
topk = _unary("topk")
permute = _unary("permute")
flatten = _unary("flatten")
squeeze = _unary("squeeze")
unsqueeze = _unary("unsqueeze")
gather = _unary("gather")
flip = _unary("flip")
roll = _unary("roll")
var = _unary("var")
std = _unary("std")
logsumexp = _unary("logsumexp")
cumsum = _unary("cumsum")
sort = _unary("sort")
argsort = _unary("argsort")
unbind = _unary("unbind")
nonzero = _unary("nonzero")
unique = _unary("unique")
for _method in (
    "prod",
    "cumprod",
    "diff",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "tile",
    "ravel",
    "norm",
    "lerp",
    "logaddexp",
    "hypot",
    "logit",
    "scatter",
    "scatter_add",
    "take_along_dim",
    "nansum",
    "nanmean",
    "count_nonzero",
    "aminmax",
    "median",
    "trunc",
    "fix",
    "frac",
    "round",
    "fmod",
    "remainder",
    "nan_to_num",
    "signbit",
    "sgn",
):
    globals()[_method] = _unary(_method)
del _method
var_mean = _reshaping_and_reductions.var_mean
std_mean = _reshaping_and_reductions.std_mean
rsqrt = _unary("rsqrt")
reciprocal = _unary("reciprocal")
clip = _unary("clamp")
bmm = _unary("matmul")
mm = _unary("matmul")
split = _unary("split")
chunk = _unary("chunk")
clone = _unary("clone")
numel = _unary("numel")


def empty(*size, dtype=None, requires_grad=False, device=None):
    """PyTorch's ``empty``: here filled with zeros (nothing is left uninitialised)."""
    return zeros(*size, dtype=dtype, requires_grad=requires_grad, device=device)


def empty_like(x, dtype=None, requires_grad=False, device=None):
    return zeros_like(x, dtype=dtype, requires_grad=requires_grad, device=device)


def isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    """Where ``|a − b| ≤ atol + rtol·|b|`` element by element (NaNs equal with ``equal_nan``)."""
    a, b = _as_tensor(a), _as_tensor(b)
    close = (a - b).abs() <= (b.abs() * rtol + atol)
    close = close | (a == b)  # equal infinities
    return close | (a.isnan() & b.isnan()) if equal_nan else close


def outer(a, b):
    """``a[i] · b[j]`` of two vectors."""
    a, b = _as_tensor(a), _as_tensor(b)
    return a.reshape(-1, 1) * b.reshape(1, -1)


def dot(a, b):
    """The sum of the products of two vectors (1-D, of one length)."""
    a, b = _as_tensor(a), _as_tensor(b)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise OpError(f"dot: expects two 1-D tensors of one length, got {tuple(a.shape)} and {tuple(b.shape)}")
    return (a * b).sum()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """PyTorch's ``F.scaled_dot_product_attention`` (also ``fg.nn.functional``'s)."""
    return _core.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


def where(condition, input=None, other=None):  # noqa: A002 (PyTorch's argument name)
    """``input`` where ``condition`` is non-zero, else ``other`` (broadcast); with the
    condition alone, the indices of its non-zero elements, one tensor per axis (PyTorch's
    ``torch.where(condition)``, ``nonzero(as_tuple=True)``)."""
    if input is None and other is None:
        return _as_tensor(condition).nonzero(as_tuple=True)
    if input is None or other is None:
        raise TypeError("where: give both input and other, or neither")
    return _as_tensor(condition).where_(input, other)


def allclose(a, b, rtol=1e-5, atol=1e-8):
    return _as_tensor(a).allclose(b, rtol, atol)


def max(input, dim=None, keepdim=False):  # noqa: A001 (PyTorch's name)
    """PyTorch's ``torch.max``: the largest element of ``input``; along ``dim``, the named
    tuple ``(values, indices)``; with a tensor as second argument, ``maximum``."""
    if isinstance(dim, Tensor):
        return maximum(input, dim)  # noqa: F821 (made by the loop above)
    return _as_tensor(input).max() if dim is None else _as_tensor(input).max(dim, keepdim)


def min(input, dim=None, keepdim=False):  # noqa: A001 (PyTorch's name)
    """PyTorch's ``torch.min``, as ``max``."""
    if isinstance(dim, Tensor):
        return minimum(input, dim)  # noqa: F821 (made by the loop above)
    return _as_tensor(input).min() if dim is None else _as_tensor(input).min(dim, keepdim)


def sum(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The sum over ``dim`` (every axis when None); ``axis``/``keepdims`` are numpy's and
    TensorFlow's names."""
    dim = axis if axis is not None else dim
    return _as_tensor(x).sum(dim, keepdim if keepdims is None else keepdims)


def mean(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The mean over ``dim`` (every axis when None)."""
    dim = axis if axis is not None else dim
    return _as_tensor(x).mean(dim, keepdim if keepdims is None else keepdims)


def reshape(x, shape):
    """``x`` in a new shape (one axis may be -1)."""
    return _as_tensor(x).reshape(tuple(shape))


# ---- PyTorch's other creation functions and predicates ----


def _like(make, what):
    def like(x, dtype=None, requires_grad=False):
        x = _as_tensor(x)
        return make(*x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)

    like.__name__ = f"{make.__name__}_like"
    like.__doc__ = f"{what} in ``x``'s shape, of ``x``'s dtype unless ``dtype`` is given."
    return like


zeros_like = _on_cpu(_like(zeros, "Zeros"))
ones_like = _on_cpu(_like(ones, "Ones"))
randn_like = _on_cpu(_like(randn, "N(0, 1) draws from the generator ``manual_seed`` sets"))
rand_like = _on_cpu(_like(rand, "U[0, 1) draws from the generator ``manual_seed`` sets"))


@_on_cpu
def full_like(x, fill_value, dtype=None, requires_grad=False):
    """``fill_value`` in ``x``'s shape and dtype (or ``dtype``)."""
    x = _as_tensor(x)
    return full(x.shape, fill_value, dtype=dtype or x.dtype, requires_grad=requires_grad)


@_on_cpu
def randint(low=0, high=None, size=None, dtype=None):
    """Integers drawn uniformly from ``[low, high)`` (``randint(high, size)`` from 0), int64
    unless ``dtype`` says otherwise, from the generator ``manual_seed`` sets."""
    if high is None:  # randint(high, size=...)
        low, high = 0, low
    elif size is None:  # randint(high, size)
        low, high, size = 0, low, high
    if size is None:
        raise TypeError("randint: a size is needed")
    if high <= low:
        raise ValueError(f"randint: empty range [{low}, {high})")
    size = (size,) if isinstance(size, int) else tuple(size)
    u = rand(*size, dtype=float64)
    drawn = (u * (high - low)).floor().clamp(max=high - low - 1) + low
    return drawn.to(dtype or int64)


@_on_cpu
def randperm(n, dtype=None):
    """A random permutation of ``0 .. n-1`` (int64), from the generator ``manual_seed`` sets."""
    return _core.shuffle(arange(n, dtype=int64)).to(dtype or int64)


@_on_cpu
def eye(n, m=None, dtype=None, requires_grad=False):
    """The ``n × m`` identity matrix (``m = n`` when None)."""
    return tensor(_np.eye(n, m), dtype=dtype or float32, requires_grad=requires_grad)


def is_tensor(obj):
    return isinstance(obj, Tensor)


@_on_cpu
def as_tensor(data, dtype=None):
    """``data`` itself when it is a tensor of that dtype, else a new tensor of it."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype):
        return data
    return tensor(data, dtype=dtype) if not isinstance(data, Tensor) else data.to(dtype)


def isnan(x):
    return _as_tensor(x).isnan()


def isinf(x):
    return _as_tensor(x).isinf()


def isfinite(x):
    return _as_tensor(x).isfinite()


def logical_not(x):
    return _as_tensor(x).logical_not()


def equal(a, b):
    """Whether ``a`` and ``b`` have the same shape and the same values."""
    a, b = _as_tensor(a), _as_tensor(b)
    return tuple(a.shape) == tuple(b.shape) and _builtin_bool((a == b).all())


# TensorFlow's names, so that code written for tf.custom_gradient and tf.GradientTape
# (seed 003) runs with `tf.` replaced by `fg.`.
from ._tape import GradientTape, Variable, constant, function  # noqa: E402

reduce_sum = sum
reduce_mean = mean

# `from ferrograd import *` leaves Python's builtins (sum, abs, float) alone.
import builtins as _builtins  # noqa: E402

from . import autograd, data, func, graph, jit, math, metrics, nn, onnx, optim, profiler, random, return_types, utils  # noqa: E402
from .utils.data import Generator  # noqa: E402 (torch.Generator)

__all__ = [n for n in dir() if not n.startswith("_") and not hasattr(_builtins, n)]
