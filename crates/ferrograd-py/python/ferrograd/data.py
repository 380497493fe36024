"""Data: MNIST from IDX files, one-hot targets, and tinynn's ``BatchIterator`` (whose
batches are tensors)."""

import collections as _collections

import numpy as _np

from . import _core
from ._core import Tensor


def load_mnist(directory="data/mnist", train=True):
    """``(images, labels)`` of MNIST (or Fashion-MNIST) from the IDX files in ``directory``:
    images float32 ``[N, 784]`` in [0, 1], labels int64 ``[N]``. ``scripts/fetch-data.sh``
    downloads them; a missing file raises ``OSError`` naming it."""
    return _core.load_mnist(str(directory), train)


def one_hot(labels, classes):
    """float32 rows with a 1 at each label."""
    labels = _np.asarray(labels, dtype=_np.int64)
    out = _np.zeros((labels.shape[0], classes), dtype=_np.float32)
    out[_np.arange(labels.shape[0]), labels] = 1.0
    return out


Batch = _collections.namedtuple("Batch", ["inputs", "targets"])
Batch.__doc__ = "One mini-batch: ``inputs`` and ``targets`` (a named tuple, as tinynn's)."


def _take(values, idx):
    if isinstance(values, Tensor):
        return values.index_select(0, idx)
    # The rows straight from numpy's buffer into a tensor: one copy, as the Rust iterator's
    # gather (numpy's indexing and then the tensor's conversion would copy twice).
    rows = _core.take_rows(values, idx) if values.ndim >= 1 else None
    return rows if rows is not None else _core.tensor(values[idx])


class BatchIterator:
    """tinynn's ``BatchIterator(batch_size=..., shuffle=True)``: calling it on inputs and
    targets (numpy arrays or tensors) yields the epoch's ``Batch``es.

    Each call is one epoch; shuffled epochs follow the same permutations as the Rust
    ``BatchIterator`` for the same ``seed`` (epoch 0, 1, ... in call order), so a Python
    run and a Rust run see the same batches.
    """

    def __init__(self, batch_size=32, shuffle=True, seed=0):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def __call__(self, inputs, targets):
        # Checked and counted now, not at the first batch: a generator would defer both.
        if not isinstance(inputs, Tensor):
            inputs = _np.asarray(inputs)
        if not isinstance(targets, Tensor):
            targets = _np.asarray(targets)
        n = len(inputs)
        if len(targets) != n:
            raise ValueError(f"{n} inputs but {len(targets)} targets")
        if self.shuffle:
            order = _core.epoch_order(n, self.seed, self.epoch)
        else:
            order = _np.arange(n, dtype=_np.int64)
        self.epoch += 1
        return self._batches(inputs, targets, order)

    def _batches(self, inputs, targets, order):
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield Batch(_take(inputs, idx), _take(targets, idx))
