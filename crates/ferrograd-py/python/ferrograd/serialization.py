"""``fg.save`` and ``fg.load``, PyTorch's ``torch.save`` / ``torch.load`` habits: a flat state
dict (names to tensors) goes to a safetensors file, which PyTorch also reads; anything else
(a checkpoint dict of state dicts, an epoch number, a list, one tensor) and any file object
goes through pickle. ``load`` tells the two apart by their first bytes, and unpickles only
tensors, numpy arrays and plain containers unless ``weights_only=False``, as PyTorch's.

A save to a path never destroys what was there: the new file is written beside it and renamed
over it (its mode kept, a symbolic link written through), so a crash or a failing pickle leaves
the old checkpoint whole."""

import collections
import io
import math
import os
import pickle

import numpy as np

from . import _core, return_types
from ._core import Tensor

# The numpy element types a weights-only load rebuilds: plain numbers, whose every byte
# pattern is a valid value. Object, structured, subarray and void types are refused: numpy
# would read their bytes as pointers or build objects from them.
_PLAIN_DTYPES = frozenset("b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 f4 f8 c8 c16".split())


def _refuse(what):
    raise pickle.UnpicklingError(
        f"load: {what}, which weights_only=True does not load (pass weights_only=False only "
        "for a file you trust: unpickling runs code)"
    )


class _Dtype:
    """What a weights-only load makes of ``numpy.dtype(name, align, copy)`` and the BUILD
    state after it: a plain numeric type and its byte order, nothing else."""

    def __init__(self, name, align=False, copy=True):
        if type(name) is not str or name not in _PLAIN_DTYPES:
            _refuse(f"the file holds an array of dtype {name!r} (only {' '.join(sorted(_PLAIN_DTYPES))} are plain numbers)")
        if type(align) is not bool or type(copy) is not bool:
            _refuse("the file builds a dtype from arguments numpy never writes")
        self.name = name
        self.order = "="

    def __setstate__(self, state):
        # numpy writes (3, order, subarray, names, fields, elsize, alignment, flags), the
        # middle three None and the last three -1, -1, 0 for a plain type; anything else
        # describes fields, objects or flags that a plain number does not have.
        plain = (
            type(state) is tuple
            and len(state) == 8
            and state[0] == 3
            and type(state[1]) is str
            and state[1] in ("<", ">", "|", "=")
            and all(v is None for v in state[2:5])
            and all(type(v) is int for v in state[5:])
            and state[5:] == (-1, -1, 0)
        )
        if not plain:
            _refuse("the file gives a dtype fields, a subarray or flags")
        self.order = state[1]

    def numpy(self):
        return np.dtype(self.name).newbyteorder(self.order if self.order != "|" else "=")


class _NdarrayClass:
    """Stands for ``numpy.ndarray`` where a pickle names it (as ``_reconstruct``'s class)."""


class _Array:
    """What a weights-only load makes of numpy's ``_reconstruct(ndarray, shape, typecode)``
    and the BUILD state after it: a new array copied from the state's bytes, once its shape,
    dtype and length are checked. No numpy object is built from the file's state."""

    def __init__(self, cls, shape=None, typecode=None):
        del shape, typecode  # numpy's placeholders, replaced by the state
        if cls is not _NdarrayClass:
            _refuse("the file rebuilds an array of a class other than numpy.ndarray")
        self.array = None

    def __setstate__(self, state):
        if type(state) is not tuple or len(state) != 5 or state[0] != 1:
            _refuse("the file gives an array a state numpy never writes")
        _, shape, dtype, fortran, data = state
        if type(fortran) is not bool:
            _refuse("the file gives an array a state numpy never writes")
        self.array = _from_bytes(data, dtype, shape, "F" if fortran else "C")


def _from_bytes(data, dtype, shape, order):
    """A fresh native-order array of `shape` from `data`, after checking every part."""
    if not isinstance(dtype, _Dtype):
        _refuse("the file gives an array something other than a plain dtype")
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        _refuse("the file gives an array a shape that is not a tuple of sizes")
    if type(data) not in (bytes, bytearray):
        # An object array stores a list of objects here.
        _refuse("the file gives an array elements that are not raw bytes")
    dt = dtype.numpy()
    if math.prod(shape) * dt.itemsize != len(data):
        _refuse(f"the file gives an array of shape {shape} and dtype {dt} {len(data)} bytes")
    values = np.frombuffer(data, dtype=dt).reshape(shape, order=order)
    return values.astype(dt.newbyteorder("="), order="C", copy=True)


def _frombuffer(buffer, dtype, shape, order):
    """numpy's ``_frombuffer``, which pickle protocol 5 writes, checked as ``_Array``."""
    if type(order) is not str or order not in ("C", "F"):
        _refuse("the file gives an array an order numpy never writes")
    if isinstance(buffer, pickle.PickleBuffer):
        buffer = bytes(buffer)
    return _Built(_from_bytes(buffer, dtype, shape, order))


class _Built:
    """An array already checked and built, held until the result is walked."""

    def __init__(self, array):
        self.array = array


def _scalar(dtype, data):
    """numpy's ``scalar(dtype, bytes)`` (a pickled ``np.float32(2.0)``), checked."""
    return _from_bytes(data, dtype, (), "C")[()]


def _encode(text, encoding):
    """``_codecs.encode(text, "latin1")``: how pickle protocols 0 to 2 write bytes (PyTorch's
    ``torch.save`` writes protocol 2)."""
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        _refuse("the file calls _codecs.encode with arguments pickle never writes")
    return text.encode("latin1")


def _bytes(*args):
    """``bytes()``: how pickle protocols 0 to 2 write empty bytes."""
    if args:
        _refuse("the file calls bytes with arguments pickle never writes")
    return b""


def _set(items=()):
    """``set(list)``: how pickle protocols 0 to 2 write a set."""
    if type(items) is not list:
        _refuse("the file calls set with arguments pickle never writes")
    return set(items)


def _plain(value):
    """The numpy array a stand-in holds; a stand-in not yet given its bytes is refused."""
    if isinstance(value, (_Array, _Built)):
        if value.array is None:
            _refuse("the file uses an array before giving it its contents")
        return value.array
    if isinstance(value, _Dtype):
        return value.numpy()
    return value


def _tensor_of(values, dtype=None, requires_grad=False):
    """``ferrograd._core.tensor`` as a pickled tensor calls it: from an array only."""
    if not isinstance(values, (_Array, _Built)) or dtype is not None or type(requires_grad) is not bool:
        _refuse("the file builds a tensor from something other than a saved array")
    return _core.tensor(_plain(values), None, requires_grad)


def _frozen_leaf_of(values):
    if not isinstance(values, (_Array, _Built)):
        _refuse("the file builds a parameter from something other than a saved array")
    return _frozen_leaf(_plain(values))


# What a checkpoint pickled by ``save`` may refer to, and what each name becomes when loaded
# with weights_only: ferrograd tensors and numpy arrays through the checked stand-ins above,
# ordered dicts and the named tuples of ops as themselves.
_NUMPY_MODULES = ("numpy._core.multiarray", "numpy.core.multiarray")
_WEIGHTS_ONLY = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _encode,
    ("builtins", "bytes"): _bytes,
    ("__builtin__", "bytes"): _bytes,
    ("builtins", "set"): _set,
    ("__builtin__", "set"): _set,
    ("ferrograd._core", "tensor"): _tensor_of,
    ("ferrograd.serialization", "_frozen_leaf"): _frozen_leaf_of,
    ("numpy", "ndarray"): _NdarrayClass,
    ("numpy", "dtype"): _Dtype,
    **{(m, "_reconstruct"): _Array for m in _NUMPY_MODULES},
    **{(m, "scalar"): _scalar for m in _NUMPY_MODULES},
    **{(m, "_frombuffer"): _frombuffer for m in ("numpy._core.numeric", "numpy.core.numeric")},
    **{("ferrograd.return_types", n): getattr(return_types, n) for n in ("topk", "max", "min", "sort")},
}


class _WeightsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        found = _WEIGHTS_ONLY.get((module, name))
        if found is None:
            _refuse(f"the file refers to {module}.{name}")
        return found

    def persistent_load(self, pid):
        _refuse("the file refers to a persistent object")


def _arrays_in(obj, seen):
    """`obj` with every stand-in replaced by its array; lists and dicts changed in place (so
    shared and cyclic references stay so), tuples and sets rebuilt."""
    key = id(obj)
    if key in seen:
        return seen[key]
    if isinstance(obj, (_Array, _Built, _Dtype)):
        seen[key] = _plain(obj)
    elif isinstance(obj, list):
        seen[key] = obj
        obj[:] = [_arrays_in(v, seen) for v in obj]
    elif isinstance(obj, dict):
        seen[key] = obj
        for k in list(obj):
            if isinstance(k, (_Array, _Built, _Dtype)):
                _refuse("the file uses an array as a dict key")
            obj[k] = _arrays_in(obj[k], seen)
    elif isinstance(obj, tuple):
        items = [_arrays_in(v, seen) for v in obj]
        seen[key] = type(obj)._make(items) if hasattr(type(obj), "_make") else tuple(items)
    elif isinstance(obj, (set, frozenset)):
        if any(isinstance(v, (_Array, _Built, _Dtype)) for v in obj):
            _refuse("the file puts an array in a set")
        seen[key] = obj
    else:
        seen[key] = obj
    return seen[key]


def _load_weights(stream):
    loaded = _WeightsUnpickler(stream).load()
    try:
        return _arrays_in(loaded, {})
    except RecursionError:
        raise pickle.UnpicklingError("load: the file nests containers too deeply") from None


def _is_state_dict(obj):
    return (
        isinstance(obj, dict)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items())
    )


def _frozen_leaf(values):
    """A parameter whose gradients are off (``requires_grad = False``), from its values: how
    a pickled frozen parameter comes back."""
    leaf = _core.tensor(values, requires_grad=True)
    leaf.requires_grad = False
    return leaf


def _is_safetensors(head):
    # A safetensors file starts with its header's length (8 bytes) and the header's "{".
    return len(head) == 9 and head[8:9] == b"{"


def save(obj, f):
    """Writes ``obj`` to ``f`` (a path or a binary file object). A dict of named tensors (what
    ``module.state_dict()`` gives) saved to a path is a safetensors file, which
    ``safetensors.torch.load_file`` reads too; anything else is pickled, as ``torch.save``
    pickles it (tensors as their values). A path is replaced only once the whole new file is
    written: an object that cannot be pickled, or a crash, leaves the old file as it was."""
    if hasattr(f, "write"):
        pickle.dump(obj, f, protocol=4)
        return
    path = os.fspath(f)
    if _is_state_dict(obj):
        _core.save_tensors(dict(obj), path)
        return
    _core.write_file(pickle.dumps(obj, protocol=4), path)


def load(f, map_location=None, weights_only=True):
    """What ``save`` wrote to ``f`` (a path or a binary file object): a safetensors file (also
    PyTorch's, or ``Module.save``'s) as a dict of tensors, a pickle as the object it holds.
    With ``weights_only`` (the default, as PyTorch's) a pickle may hold only tensors, numpy
    arrays of plain numbers and plain containers; anything else is refused before it runs.
    ``map_location`` is accepted for PyTorch's scripts (the CPU is the only device)."""
    del map_location
    # As PyTorch's, anything but an explicit False (None included) keeps the allow-list.
    unpickle = (lambda s: pickle.Unpickler(s).load()) if weights_only is False else _load_weights
    if hasattr(f, "read"):
        data = f.read()
        if _is_safetensors(data[:9]):
            return _core.load_tensor_bytes(data)
        return unpickle(io.BytesIO(data))
    path = os.fspath(f)
    with open(path, "rb") as stream:
        if _is_safetensors(stream.read(9)):
            return _core.load_tensors(path)
        stream.seek(0)
        return unpickle(stream)
