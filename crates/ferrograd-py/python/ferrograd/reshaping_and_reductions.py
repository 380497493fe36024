"""More of PyTorch's ``Tensor`` methods, each composed of the core's differentiable ops (so
their derivatives have every order): products (``prod`` by halving), ``diff``, ``movedim``,
``swapaxes``, ``tile``, ``ravel``, ``type_as``, ``norm``,
``lerp``, ``logaddexp``, ``hypot``, ``logit``, ``scatter`` and ``scatter_add``,
``take_along_dim``, ``nansum``, ``nanmean``, ``count_nonzero``, ``aminmax``, ``median``,
``var_mean``, ``std_mean``, the roundings (``round`` half to even, ``trunc``, ``sgn``: zero
derivative, as PyTorch's), ``frac``, ``fmod``, ``remainder``, ``nan_to_num``,
``signbit``; and the in-place forms (``exp_``, ``masked_fill_``, ``scatter_``, ...)
of the out-of-place ones. Attached to ``Tensor`` when the package is imported."""

import collections
import math

import numpy as np

from . import _core
from ._core import Tensor

aminmax_result = collections.namedtuple("aminmax", ["min", "max"])
median_result = collections.namedtuple("median", ["values", "indices"])


def _zero_derivative(name, values):
    """``values(x)`` (a numpy function) as an op of ``x`` whose derivative is 0, as PyTorch's
    roundings have: connected to the graph, so a backward through it gives zeros."""

    def op(x):
        from . import custom_gradient

        def run(t):
            with np.errstate(all="ignore"):  # ±inf and NaN pass through as themselves
                out = _core.tensor(values(t.detach().numpy()), dtype=t.dtype)
            return out, lambda up: _core.zeros(*up.shape, dtype=up.dtype)

        run.__name__ = name
        return custom_gradient(run)(x) if x.requires_grad else run(x)[0]

    return op


def _axis(t, dim):
    if not -max(t.ndim, 1) <= dim < max(t.ndim, 1):
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-max(t.ndim, 1)}, {max(t.ndim, 1) - 1}], but got {dim})"
        )
    return dim % max(t.ndim, 1)


def _halving_product(t, d):
    """The product along axis ``d``, kept with length 1: pairs multiplied until one is left
    (log₂ n products, each differentiable)."""
    n = t.shape[d]
    if n == 0:
        shape = list(t.shape)
        shape[d] = 1
        return _core.ones(*shape, dtype=t.dtype)
    while n > 1:
        h = n // 2
        paired = t.narrow(d, 0, h) * t.narrow(d, h, h)
        t = paired if n % 2 == 0 else _core.cat([paired, t.narrow(d, 2 * h, 1)], d)
        n = t.shape[d]
    return t


def prod(self, dim=None, keepdim=False, dtype=None):
    """The product of the elements (along ``dim``)."""
    t = self if dtype is None else self.to(dtype)
    if dim is None:
        return _halving_product(t.reshape(-1), 0).reshape(())
    d = _axis(t, dim)
    if t.ndim == 0:
        return t
    out = _halving_product(t, d)
    return out if keepdim else out.squeeze(d)


def diff(self, n=1, dim=-1, prepend=None, append=None):
    """Differences of neighbours along ``dim``, ``n`` times."""
    if n < 0:
        raise RuntimeError(f"diff expects n to be non-negative, got {n}")
    if self.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = _axis(self, dim)
    t = _core.cat([p for p in (prepend, self, append) if p is not None], d)
    for _ in range(n):
        if t.shape[d] == 0:
            break
        t = t.narrow(d, 1, t.shape[d] - 1) - t.narrow(d, 0, t.shape[d] - 1)
    return t


def movedim(self, source, destination):
    """Axes ``source`` moved to ``destination`` (ints or sequences), the others in order."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({src} dims) should contain the same number of dims as destination ({dst} dims)"
        )
    src, dst = [_axis(self, s) for s in src], [_axis(self, s) for s in dst]
    if self.ndim == 0:
        return self
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim")
    order = [None] * self.ndim
    for s, t in zip(src, dst):
        order[t] = s
    rest = iter(a for a in range(self.ndim) if a not in src)
    return self.permute(*[o if o is not None else next(rest) for o in order])


def swapaxes(self, axis0, axis1):
    return self.transpose(axis0, axis1)


def tile(self, *dims):
    """Repeats, with ones prepended to ``dims`` when it is shorter than the shape."""
    dims = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
    dims = (1,) * (self.ndim - len(dims)) + tuple(dims)
    return self.repeat(*dims)


def ravel(self):
    return self.reshape(-1)


def type_as(self, other):
    return self.to(other.dtype)


def _safe_root(s, p=2.0):
    """``s^(1/p)`` with derivative 0 where s is 0 (PyTorch's norms at the zero vector), not
    ∞·0."""
    positive = s > 0
    base = positive.where_(s, _core.ones((), dtype=s.dtype))
    return positive.where_(base.sqrt() if p == 2 else base ** (1.0 / p), s * 0)


def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector p-norm over ``dim`` (every axis when None): ``"fro"`` and 2, 1, any
    positive number, ``inf``, ``-inf``, or 0 (the count of non-zeros)."""
    x = self if dtype is None else self.to(dtype)
    dims = tuple(range(x.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    a = x.abs()
    if p in ("fro", 2, 2.0):
        return _safe_root((x * x).sum(dims, keepdim=keepdim))
    if p == math.inf:
        return a.amax(dims, keepdim=keepdim)
    if p == -math.inf:
        return a.amin(dims, keepdim=keepdim)
    if p == 0:
        return (x != 0).to(x.dtype).sum(dims, keepdim=keepdim)
    if p == 1:
        return a.sum(dims, keepdim=keepdim)
    if isinstance(p, str) or p < 0:
        raise ValueError(f'norm: p={p!r} is not supported ("fro", inf, -inf or a number ≥ 0)')
    return _safe_root((a**p).sum(dims, keepdim=keepdim), p)


def lerp(self, end, weight):
    """``self + weight · (end − self)``, or ``end − (1 − weight)·(end − self)`` from weight
    0.5 on (exact at both ends), as PyTorch's."""
    step = end - self
    if not isinstance(weight, Tensor):
        return self + weight * step if abs(weight) < 0.5 else end - (1.0 - weight) * step
    return (weight.abs() < 0.5).where_(self + weight * step, end - (1.0 - weight) * step)


def logaddexp(self, other):
    """``log(eˣ + eʸ)`` without overflow (±∞ where both are)."""
    other = other if isinstance(other, Tensor) else _core.tensor(other, dtype=self.dtype)
    m = self.maximum(other).detach()
    m = m.isinf().where_(_core.zeros((), dtype=m.dtype), m)
    return m + ((self - m).exp() + (other - m).exp()).log()


def hypot(self, other):
    """``√(x² + y²)`` scaled by the larger magnitude (no overflow or underflow); infinite
    where either is, NaN or not."""
    other = other if isinstance(other, Tensor) else _core.tensor(other, dtype=self.dtype)
    big = self.abs().maximum(other.abs()).detach()
    scale = ((big == 0) | big.isinf()).where_(_core.ones((), dtype=big.dtype), big)
    a, b = self / scale, other / scale
    out = (a * a + b * b).sqrt() * scale
    return (self.isinf() | other.isinf()).where_(_core.tensor(math.inf, dtype=out.dtype), out)


def logit(self, eps=None):
    """``log(p / (1 − p))``, ``p`` clamped to ``[eps, 1 − eps]`` when ``eps`` is given."""
    p = self if eps is None else self.clamp(eps, 1.0 - eps)
    return (p / (1.0 - p)).log()


def _scatter_targets(self, dim, index, src_shape, op):
    """Where each element of ``index`` lands in ``self`` flattened, checked as PyTorch
    checks it."""
    idx = np.asarray(index.numpy()) if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"{op}(): Expected dtype int64 for index")
    if self.ndim == 0:
        # A 0-d tensor scatters as one element of a vector.
        if idx.ndim > 1 or idx.size > 1:
            raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as self tensor")
        if idx.size and idx.reshape(-1)[0] != 0:
            raise RuntimeError(f"{op}(): index {int(idx.reshape(-1)[0])} is out of bounds for dimension 0 with size 1")
        return np.zeros(idx.size, np.int64), idx.shape
    d = _axis(self, dim)
    if idx.ndim != self.ndim or (src_shape is not None and len(src_shape) != idx.ndim):
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as self tensor")
    for a in range(idx.ndim):
        if (a != d and idx.shape[a] > self.shape[a]) or (src_shape is not None and idx.shape[a] > src_shape[a]):
            raise RuntimeError(
                f"{op}(): Expected index {tuple(idx.shape)} to be smaller than self {tuple(self.shape)} apart from dimension {d} and to be smaller size than src {tuple(src_shape or ())}"
            )
    n = self.shape[d]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise RuntimeError(
            f"{op}(): index {int(idx.min() if idx.min() < 0 else idx.max())} is out of bounds for dimension {d} with size {n}"
        )
    grids = list(np.indices(idx.shape))
    grids[d] = idx
    return np.ravel_multi_index(grids, self.shape).reshape(-1) if idx.size else np.zeros(0, np.int64), idx.shape


def _source(self, index_shape, src, value):
    if src is None and value is None:
        raise TypeError("scatter(): give src or value")
    if src is None or not isinstance(src, Tensor):
        return _core.full(tuple(index_shape), src if src is not None else value, dtype=self.dtype)
    if src.dtype != self.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype ({self.dtype} and {src.dtype})")
    return src[tuple(slice(0, s) for s in index_shape)] if src.ndim else src.reshape(*index_shape)


def scatter_add(self, dim, index, src):
    """``self`` with ``src[i][j]`` added at ``[index[i][j]][j]`` (along ``dim``): repeated
    positions add up. Differentiable in ``self`` and ``src``."""
    targets, shape = _scatter_targets(self, dim, index, tuple(src.shape), "scatter_add")
    if self.ndim == 0:
        values = _source(self, shape, src, None).reshape(-1)
        return self.reshape(-1).index_add(0, targets, values).reshape(*self.shape)
    # The core's op, with the index as a tensor: transforms that record (vmap, jvp) follow it.
    index = index if isinstance(index, Tensor) else _core.tensor(np.asarray(index, dtype=np.int64))
    return self._scatter_add(_axis(self, dim), index, _source(self, shape, src, None))


def scatter(self, dim, index, src=None, value=None, reduce=None):
    """``self`` with ``src[i][j]`` (or ``value``) written at ``[index[i][j]][j]`` along
    ``dim`` (a repeated position keeps the last write); ``reduce="add"`` adds instead."""
    if reduce == "add":
        index_shape = np.shape(index.numpy() if isinstance(index, Tensor) else index)
        return scatter_add(self, dim, index, _source(self, index_shape, src, value))
    if reduce is not None:
        raise RuntimeError(f'scatter(): reduce={reduce!r} is not supported ("add" or None)')
    src_shape = tuple(src.shape) if isinstance(src, Tensor) else None
    targets, shape = _scatter_targets(self, dim, index, src_shape, "scatter")
    values = _source(self, shape, src, value).reshape(-1)
    # The last write of each position: the first of the reversed order.
    last = (len(targets) - 1 - np.unique(targets[::-1], return_index=True)[1]).astype(np.int64)
    kept, at = targets[last], last
    hit = np.zeros(int(np.prod(self.shape)), dtype=bool)
    hit[kept] = True
    flat = self.reshape(-1).masked_fill(_core.tensor(hit), 0)
    return flat.index_add(0, kept, values.index_select(0, at)).reshape(*self.shape)


def take_along_dim(self, indices, dim=None):
    """``gather`` with ``indices`` broadcast against ``self`` (flattened when ``dim`` is
    None)."""
    if dim is None:
        return self.reshape(-1).gather(0, indices.reshape(-1))
    d = _axis(self, dim)
    shape = list(
        np.broadcast_shapes(
            tuple(s for a, s in enumerate(self.shape) if a != d),
            tuple(s for a, s in enumerate(indices.shape) if a != d),
        )
    )
    with_axis = lambda n: shape[:d] + [n] + shape[d:]  # noqa: E731
    return self.expand(*with_axis(self.shape[d])).gather(d, indices.expand(*with_axis(indices.shape[d])))


def _not_nan(self):
    return self.isnan().where_(_core.zeros((), dtype=self.dtype), self)


def nansum(self, dim=None, keepdim=False):
    t = _not_nan(self)
    return t.sum() if dim is None else t.sum(dim, keepdim=keepdim)


def nanmean(self, dim=None, keepdim=False):
    count = (~self.isnan()).to(self.dtype)
    if dim is None:
        return nansum(self) / count.sum()
    return nansum(self, dim, keepdim) / count.sum(dim, keepdim=keepdim)


def count_nonzero(self, dim=None):
    ones = (self != 0).long()
    return ones.sum() if dim is None else ones.sum(dim)


def aminmax(self, *, dim=None, keepdim=False):
    if dim is None:
        return aminmax_result(self.amin(), self.amax())
    return aminmax_result(self.amin(dim, keepdim=keepdim), self.amax(dim, keepdim=keepdim))


def median(self, dim=None, keepdim=False):
    """The lower of the two middle values (PyTorch's), NaN where a row holds one; along
    ``dim`` with the index it came from."""
    if dim is None:
        if self.numel() == 0:
            return _core.tensor(math.nan, dtype=self.dtype)
        return median(self.reshape(-1), 0).values
    d = _axis(self, dim)
    if self.ndim == 0:
        return median_result(self, _core.tensor(0))
    if self.shape[d] == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size.")
    order = self.argsort(d)
    n = self.shape[d]
    at = order.narrow(d, (n - 1) // 2, 1)
    nan = self.isnan()
    has_nan = nan.any(d, keepdim=True)
    first_nan = nan.long().argmax(d, keepdim=True)
    at = has_nan.where_(first_nan, at)
    values = self.gather(d, at)
    if not keepdim:
        values, at = values.squeeze(d), at.squeeze(d)
    return median_result(values, at)


def var_mean(self, dim=None, unbiased=None, keepdim=False, *, correction=1):
    correction = correction if unbiased is None else int(bool(unbiased))
    return self.var(dim, correction=correction, keepdim=keepdim), (
        self.mean() if dim is None else self.mean(dim, keepdim=keepdim)
    )


def std_mean(self, dim=None, unbiased=None, keepdim=False, *, correction=1):
    correction = correction if unbiased is None else int(bool(unbiased))
    # `std` itself, whose gradient is 0 where the elements are equal (a square root of the
    # variance would make it NaN there).
    return self.std(dim, correction=correction, keepdim=keepdim), (
        self.mean() if dim is None else self.mean(dim, keepdim=keepdim)
    )


def trunc(self):
    """Toward zero (derivative 0)."""
    return _trunc(self) if self.is_floating_point() else self


_trunc = _zero_derivative("trunc", np.trunc)


def frac(self):
    return self - trunc(self)


def round_half_even(self, decimals=0):
    """To the nearest integer (or ``decimals`` places), halves to even, as PyTorch's
    (derivative 0; integers unchanged)."""
    if not self.is_floating_point():
        return self
    scale = 10.0**decimals
    return _zero_derivative("round", lambda v: np.round(v * scale) / scale if decimals else np.round(v))(self)


def remainder(self, other):
    """The remainder with the sign of ``other`` (Python's and PyTorch's ``%``)."""
    return self % other


def fmod(self, other):
    """The remainder with the sign of ``self`` (C's fmod): ``%``'s, less ``other`` where
    their signs differ; ``self`` itself where ``other`` is infinite."""
    other = (
        other
        if isinstance(other, Tensor)
        else _core.tensor(other, dtype=self.dtype if self.is_floating_point() else None)
    )
    r = self % other
    flip = (r != 0) & ((r < 0) != (self < 0))
    r = flip.where_(r - other, r)
    if not self.is_floating_point() and not other.is_floating_point():
        return r
    return (other.isinf() & self.isfinite()).where_(self, r)


def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
    """NaN, +∞ and −∞ replaced (by default: 0, the dtype's largest and smallest finite)."""
    if not self.is_floating_point():
        return self
    big = float(np.finfo(np.float32 if self.dtype == _core.dtype.float32 else np.float64).max)
    t = self.isnan().where_(_core.tensor(float(nan), dtype=self.dtype), self)
    t = (t == math.inf).where_(_core.tensor(big if posinf is None else float(posinf), dtype=self.dtype), t)
    return (t == -math.inf).where_(_core.tensor(-big if neginf is None else float(neginf), dtype=self.dtype), t)


def signbit(self):
    """True where the sign bit is set (−0.0 included)."""
    if not self.is_floating_point():
        return self < 0
    return _core.tensor(np.signbit(self.detach().numpy()))


def sgn(self):
    """The sign (derivative 0)."""
    return _sgn(self) if self.is_floating_point() else self.sign()


_sgn = _zero_derivative("sgn", np.sign)


def _in_place(name):
    method = getattr(Tensor, name)

    def in_place(self, *args, **kwargs):
        return self._in_place_(method(self, *args, **kwargs), name + "_")

    in_place.__name__ = name + "_"
    in_place.__doc__ = f"``{name}`` written into this tensor (PyTorch's in-place ``{name}_``)."
    return in_place


_METHODS = [
    ("prod", prod),
    ("diff", diff),
    ("movedim", movedim),
    ("moveaxis", movedim),
    ("swapaxes", swapaxes),
    ("swapdims", swapaxes),
    ("tile", tile),
    ("ravel", ravel),
    ("type_as", type_as),
    ("norm", norm),
    ("lerp", lerp),
    ("logaddexp", logaddexp),
    ("hypot", hypot),
    ("logit", logit),
    ("scatter", scatter),
    ("scatter_add", scatter_add),
    ("take_along_dim", take_along_dim),
    ("nansum", nansum),
    ("nanmean", nanmean),
    ("count_nonzero", count_nonzero),
    ("aminmax", aminmax),
    ("median", median),
    ("trunc", trunc),
    ("fix", trunc),
    ("frac", frac),
    ("round", round_half_even),
    ("fmod", fmod),
    ("remainder", remainder),
    ("nan_to_num", nan_to_num),
    ("signbit", signbit),
    ("sgn", sgn),
]
# In-place forms, for the out-of-place methods that keep the shape.
_IN_PLACE = [
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "abs",
    "neg",
    "sign",
    "floor",
    "trunc",
    "frac",
    "round",
    "relu",
    "sigmoid",
    "tanh",
    "sin",
    "cos",
    "erf",
    "square",
    "reciprocal",
    "pow",
    "masked_fill",
    "index_add",
    "scatter",
    "scatter_add",
    "clamp_min",
    "clamp_max",
    "lerp",
    "fmod",
    "remainder",
    "nan_to_num",
    "cumsum",
    "cumprod",
    "tril",
    "triu",
    "logit",
    "hypot",
]

for _name, _method in _METHODS:
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _method)
for _name in _IN_PLACE:
    if hasattr(Tensor, _name) and not hasattr(Tensor, _name + "_"):
        setattr(Tensor, _name + "_", _in_place(_name))
del _name, _method
