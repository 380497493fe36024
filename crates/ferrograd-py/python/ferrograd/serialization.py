"""``fg.save`` and ``fg.load``, PyTorch's ``torch.save`` / ``torch.load`` habits: a flat state
dict (names to tensors) goes to a safetensors file, which PyTorch also reads; anything else
(a checkpoint dict of state dicts, an epoch number, a list, one tensor) and any file object
goes through pickle. ``load`` tells the two apart by their first bytes, and unpickles only
tensors, numpy arrays and plain containers unless ``weights_only=False``, as PyTorch's.

A save to a path never destroys what was there: the new file is written beside it and renamed
over it (its mode kept, a symbolic link written through), so a crash or a failing pickle leaves
the old checkpoint whole."""

import io
import os
import pickle

from . import _core, _weights_only
from ._core import Tensor


def _is_state_dict(obj):
    return (
        isinstance(obj, dict)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items())
    )


def _frozen_leaf(values):
    """A parameter whose gradients are off (``requires_grad = False``), from its values: how
    a pickled frozen parameter comes back (``Tensor.__reduce__`` names this function)."""
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
    unpickle = (lambda s: pickle.Unpickler(s).load()) if weights_only is False else _weights_only.load
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
