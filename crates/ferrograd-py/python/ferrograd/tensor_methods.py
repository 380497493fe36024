"""PyTorch's smaller ``Tensor`` methods, each composed of the core's ops (so those that are
differentiable have derivatives of every order): ``rsqrt``, ``reciprocal``, ``log2``,
``log10``, ``clip``, ``clamp_min``, ``clamp_max``, ``select``, ``unbind``, ``unflatten``,
``expand_as``, ``new_full``, ``new_tensor``, ``nelement``, ``is_floating_point``, ``mT``,
``masked_select``, ``repeat_interleave``, ``sort``, ``argsort``, ``nonzero``, ``unique``,
``equal``, ``type``. Attached to ``Tensor`` when the package is imported."""

import math

import numpy as np

from . import _core
from ._core import Tensor
from .reshaping_and_reductions import _axis
from .return_types import sort


def rsqrt(self):
    """``1 / sqrt(x)``."""
    return self.sqrt().reciprocal()


def reciprocal(self):
    """``1 / x`` (integers become float32, as PyTorch's)."""
    return 1.0 / self


def log2(self):
    return self.log() * (1.0 / math.log(2.0))


def log10(self):
    return self.log() * (1.0 / math.log(10.0))


def clamp_min(self, min):  # noqa: A002 (PyTorch's argument name)
    return self.clamp(min=min)


def clamp_max(self, max):  # noqa: A002 (PyTorch's argument name)
    return self.clamp(max=max)


def select(self, dim, index):
    """The slice at ``index`` along ``dim``, that axis removed."""
    n = self.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"select: index {index} out of range for dimension {dim} of size {n}")
    return self.narrow(dim, index % n, 1).squeeze(dim)


def unbind(self, dim=0):
    """The slices along ``dim``, as a tuple."""
    return tuple(self.select(dim, i) for i in range(self.shape[dim]))


def unflatten(self, dim, sizes):
    """Axis ``dim`` split into ``sizes`` (one may be -1)."""
    d = _axis(self, dim)
    return self.reshape(tuple(self.shape[:d]) + tuple(sizes) + tuple(self.shape[d + 1 :]))


def expand_as(self, other):
    return self.expand(*other.shape)


def new_full(self, size, fill_value, dtype=None, requires_grad=False):
    return _core.full(tuple(size), fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad)


def new_tensor(self, data, dtype=None, requires_grad=False):
    return _core.tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)


def nelement(self):
    return self.numel()


def is_floating_point(self):
    return self.dtype in (_core.dtype.float32, _core.dtype.float64)


def m_t(self):
    """The last two axes swapped (PyTorch's ``mT``)."""
    return self.transpose(-2, -1)


def masked_select(self, mask):
    """The elements where ``mask`` is true (the two broadcast together), as a 1-D tensor."""
    bits = np.asarray(_core.tensor(mask).numpy(), dtype=bool)
    shape = np.broadcast_shapes(tuple(self.shape), bits.shape)
    picks = np.flatnonzero(np.broadcast_to(bits, shape))
    return self.expand(*shape).reshape(-1).index_select(0, picks.tolist())


def repeat_interleave(self, repeats, dim=None):
    """Each element (of the flattened tensor when ``dim`` is None) repeated ``repeats`` times
    in place, as PyTorch's."""
    t = self.reshape(-1) if dim is None else self
    d = 0 if dim is None else _axis(t, dim)
    counts = np.broadcast_to(np.asarray(repeats if not isinstance(repeats, Tensor) else repeats.numpy()), (t.shape[d],))
    return t.index_select(d, np.repeat(np.arange(t.shape[d]), counts).tolist())


def argsort(self, dim=-1, descending=False, stable=False):
    """The positions that sort each row along ``dim`` (int64; ties in their order; NaN
    counts as the largest value, as PyTorch's)."""
    values = self.detach().numpy()
    if values.ndim == 0:
        return _core.tensor(np.int64(0))
    if values.dtype == np.bool_:
        values = values.astype(np.int64)
    if descending:
        # Reversed order without negating (an int64's minimum has no negation), NaN first.
        key = ~values if values.dtype.kind == "i" else np.where(np.isnan(values), -np.inf, -values)
    else:
        key = values
    return _core.tensor(np.argsort(key, axis=dim, kind="stable").astype(np.int64))


def sort_method(self, dim=-1, descending=False, stable=False):
    """``(values, indices)`` along ``dim``, the values differentiable (a gather)."""
    indices = self.argsort(dim, descending)
    return sort(self.gather(dim, indices), indices)


def nonzero(self, as_tuple=False):
    """The coordinates of the non-zero elements: ``[count, ndim]`` int64, or one 1-D
    tensor per axis with ``as_tuple``."""
    where = np.nonzero(np.atleast_1d(self.detach().numpy()))[: max(self.ndim, 1)]
    if self.ndim == 0:
        where = () if as_tuple else np.zeros((len(where[0]), 0), dtype=np.int64)
        return where if as_tuple else _core.tensor(where)
    if as_tuple:
        return tuple(_core.tensor(w.astype(np.int64)) for w in where)
    return _core.tensor(np.stack(where, axis=1).astype(np.int64).reshape(-1, self.ndim))


def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """The distinct values (sorted), and on request where each element's is and how many
    there are, as PyTorch's (of the flattened tensor; ``dim`` is not supported)."""
    if dim is not None:
        raise NotImplementedError("unique along a dim is not supported")
    values, inverse, counts = np.unique(self.detach().numpy(), return_inverse=True, return_counts=True)
    out = [_core.tensor(values)]
    if return_inverse:
        out.append(_core.tensor(inverse.reshape(self.shape).astype(np.int64)))
    if return_counts:
        out.append(_core.tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


# PyTorch's names of the tensor types, which programs compare `x.type()` with.
_TYPE_NAMES = {
    "float32": "torch.FloatTensor",
    "float64": "torch.DoubleTensor",
    "int64": "torch.LongTensor",
    "bool": "torch.BoolTensor",
}


def type_(self, dtype=None, non_blocking=False):
    """PyTorch's ``Tensor.type``: without an argument, the type's name as PyTorch spells it
    (``"torch.FloatTensor"``); with a dtype or a type name, the tensor in it."""
    del non_blocking
    if dtype is None:
        return _TYPE_NAMES[self.dtype.name]
    if isinstance(dtype, str):
        names = {v: k for k, v in _TYPE_NAMES.items()}
        name = dtype.replace(".cuda.", ".")
        if name not in names:
            raise TypeError(f"type: {dtype!r} is not a tensor type ({', '.join(names)})")
        dtype = names[name]
    return self.to(dtype)


def equal(self, other):
    """Whether both have the same shape and elements."""
    return tuple(self.shape) == tuple(other.shape) and bool((self == other).all())


for _name, _method in [
    ("rsqrt", rsqrt),
    ("reciprocal", reciprocal),
    ("log2", log2),
    ("log10", log10),
    ("clip", Tensor.clamp),
    ("clamp_min", clamp_min),
    ("clamp_max", clamp_max),
    ("select", select),
    ("unbind", unbind),
    ("unflatten", unflatten),
    ("expand_as", expand_as),
    ("new_full", new_full),
    ("new_tensor", new_tensor),
    ("nelement", nelement),
    ("is_floating_point", is_floating_point),
    ("masked_select", masked_select),
    ("repeat_interleave", repeat_interleave),
    ("argsort", argsort),
    ("sort", sort_method),
    ("nonzero", nonzero),
    ("unique", unique),
    ("equal", equal),
    ("type", type_),
]:
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _method)
if not hasattr(Tensor, "mT"):
    Tensor.mT = property(m_t)
del _name, _method
