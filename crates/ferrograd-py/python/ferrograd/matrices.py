"""PyTorch's functions that build or take apart matrices and grids, composed of the core's
differentiable ops: ``diag``, ``diagonal``, ``trace``, ``tensordot``, ``kron``, ``addmm``,
``baddbmm``, ``cdist``, ``meshgrid``, ``broadcast_tensors``, the stacks (``hstack``,
``vstack``, ``dstack``, ``column_stack``, ``atleast_1d/2d/3d``) and ``tril_indices`` /
``triu_indices``."""

import numpy as np

from . import _core
from ._core import Tensor
from .reshaping_and_reductions import movedim


def _t(x):
    return x if isinstance(x, Tensor) else _core.tensor(x)


def _positions(values):
    """Positions for ``index_select`` / ``index_add`` (int64 even when there are none)."""
    return np.asarray(values, dtype=np.int64)


def diagonal(input, offset=0, dim1=0, dim2=1):
    """The elements ``[i, i + offset]`` of the matrices over axes ``dim1``, ``dim2``, as the
    last axis."""
    x = _t(input)
    if x.ndim < 2:
        raise RuntimeError(f"diagonal: expected a tensor of at least 2 dimensions, got {x.ndim}")
    t = movedim(x, (dim1, dim2), (-2, -1))
    rows, cols = t.shape[-2], t.shape[-1]
    first = max(0, -offset)
    length = max(0, min(rows - first, cols - first - offset))
    picks = [(first + i) * cols + first + i + offset for i in range(length)]
    flat = t.reshape(*t.shape[:-2], rows * cols)
    return flat.index_select(flat.ndim - 1, _positions(picks))


_diagonal = diagonal


def diag(input, diagonal=0):
    """A vector placed on diagonal ``diagonal`` of a square matrix, or a matrix's diagonal."""
    x = _t(input)
    if x.ndim == 2:
        return _diagonal(x, diagonal)
    if x.ndim != 1:
        raise RuntimeError(f"diag: expected a 1-D or 2-D tensor, got {x.ndim}-D")
    n = x.shape[0] + abs(diagonal)
    rows = range(max(0, -diagonal), max(0, -diagonal) + x.shape[0])
    picks = [r * n + r + diagonal for r in rows]
    return _core.zeros(n * n, dtype=x.dtype).index_add(0, _positions(picks), x).reshape(n, n)


def trace(input):
    """The sum of a matrix's diagonal."""
    x = _t(input)
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    return diagonal(x).sum()


def tensordot(a, b, dims=2):
    """The sum over the last ``dims`` axes of ``a`` and the first of ``b`` (or the axes of two
    lists), as one product."""
    a, b = _t(a), _t(b)
    if isinstance(dims, int):
        if not 0 <= dims <= min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims between 0 and {min(a.ndim, b.ndim)}, got {dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    if len(da) != len(db):
        raise RuntimeError(f"both dimension lists should have same length, got {da} and {db}")
    for x, ds in ((a, da), (b, db)):
        if any(not -x.ndim <= d < x.ndim for d in ds) or len({d % x.ndim for d in ds}) != len(ds):
            raise RuntimeError(f"tensordot: dims {ds} are not distinct dimensions of a {x.ndim}-D tensor")
    da, db = [d % a.ndim for d in da], [d % b.ndim for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[i]} in dim {i} "
                f"and second has size {b.shape[j]} in dim {j}"
            )
    keep_a = [d for d in range(a.ndim) if d not in da]
    keep_b = [d for d in range(b.ndim) if d not in db]
    k = int(np.prod([a.shape[d] for d in da]))
    lhs = a.permute(*keep_a, *da).reshape(int(np.prod([a.shape[d] for d in keep_a])), k)
    rhs = b.permute(*db, *keep_b).reshape(k, int(np.prod([b.shape[d] for d in keep_b])))
    return (lhs @ rhs).reshape(*[a.shape[d] for d in keep_a], *[b.shape[d] for d in keep_b])


def kron(input, other):
    """The Kronecker product: every element of ``input`` times the whole of ``other``."""
    a, b = _t(input), _t(other)
    n = max(a.ndim, b.ndim)
    sa, sb = (1,) * (n - a.ndim) + tuple(a.shape), (1,) * (n - b.ndim) + tuple(b.shape)
    spread_a = a.reshape(*[s for pair in zip(sa, (1,) * n) for s in pair])
    spread_b = b.reshape(*[s for pair in zip((1,) * n, sb) for s in pair])
    return (spread_a * spread_b).reshape(*[x * y for x, y in zip(sa, sb)])


def _product(ranks, mat1, mat2, op):
    if mat1.ndim != ranks or mat2.ndim != ranks:
        raise RuntimeError(f"{op}: expected {ranks}-D tensors, got {mat1.ndim}-D and {mat2.ndim}-D")
    return mat1 @ mat2


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta · input + alpha · (mat1 @ mat2)`` (``input`` ignored when ``beta`` is 0)."""
    return _scaled_sum(input, _product(2, mat1, mat2, "addmm"), beta, alpha)


def _scaled_sum(input, product, beta, alpha):
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    base = _t(input)
    return (base if beta == 1 else base * beta) + product


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``addmm`` over a batch of products."""
    return _scaled_sum(input, _product(3, batch1, batch2, "baddbmm"), beta, alpha)


def cdist(x1, x2, p=2.0):
    """The p-norm distances between the rows of ``x1`` ``[.., P, M]`` and of ``x2``
    ``[.., R, M]``: ``[.., P, R]`` (derivative 0 at distance 0, as PyTorch's)."""
    return (_t(x1).unsqueeze(-2) - _t(x2).unsqueeze(-3)).norm(p, dim=-1)


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids of 1-D tensors (``indexing="xy"``: the first two axes swapped, as
    numpy's)."""
    ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    if any(t.ndim > 1 for t in ts):
        raise RuntimeError("torch.meshgrid: Expected 0D or 1D tensor in the tensor list")
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.numel() for t in ts]
    grids = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = -1
        grids.append(t.reshape(*view).expand(*shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def broadcast_tensors(*tensors):
    ts = [_t(t) for t in tensors]
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in ts])
    return tuple(t.expand(*shape) for t in ts)


def atleast_1d(*tensors):
    out = [t.reshape(1) if t.ndim == 0 else t for t in map(_t, tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors):
    out = [t.reshape(1, -1) if t.ndim < 2 else t for t in map(_t, tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors):
    def lift(t):
        return t.reshape(1, -1, 1) if t.ndim < 2 else t.unsqueeze(-1) if t.ndim == 2 else t

    out = [lift(t) for t in map(_t, tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def hstack(tensors):
    ts = [atleast_1d(t) for t in tensors]
    return _core.cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return _core.cat([atleast_2d(t) for t in tensors], 0)


def dstack(tensors):
    return _core.cat([atleast_3d(t) for t in tensors], 2)


def column_stack(tensors):
    return _core.cat([t.reshape(-1, 1) if t.ndim <= 1 else t for t in map(_t, tensors)], 1)


def _indices(pick, row, col, offset):
    r, c = pick(row, offset, col)
    return _core.tensor(np.stack([r, c]).astype(np.int64).reshape(2, -1))


def tril_indices(row, col, offset=0, dtype=None):
    """The positions on and below diagonal ``offset`` of a ``row × col`` matrix, ``[2, N]``
    int64, row by row."""
    return _indices(np.tril_indices, row, col, offset)


def triu_indices(row, col, offset=0, dtype=None):
    return _indices(np.triu_indices, row, col, offset)


for _name, _method in [("diagonal", diagonal), ("diag", diag), ("trace", trace), ("kron", kron)]:
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _method)
del _name, _method
