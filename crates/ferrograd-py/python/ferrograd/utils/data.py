"""``ferrograd.utils.data``: PyTorch's ``Dataset``, ``TensorDataset``, ``Subset``,
``random_split`` and ``DataLoader`` (``batch_size``, ``shuffle``, ``drop_last``, a seeded
``generator``, ``collate_fn``). A ``TensorDataset`` is batched by selecting rows of its
tensors in one op each, not by stacking samples one by one."""

import numpy as _np

from .. import _core
from .._core import Tensor


class Dataset:
    """A map-style dataset: ``__getitem__(i)`` and ``__len__()``."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} defines no __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} defines no __len__")


def _as_tensor(x):
    return x if isinstance(x, Tensor) else _core.tensor(_np.asarray(x))


class TensorDataset(Dataset):
    """Samples are rows of the tensors (each sample a tuple, one item per tensor)."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        self.tensors = tuple(_as_tensor(t) for t in tensors)
        n = self.tensors[0].shape[0] if self.tensors[0].ndim else None
        if n is None or any(t.ndim == 0 or t.shape[0] != n for t in self.tensors):
            raise ValueError("Size mismatch between tensors: each needs the same first axis")

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class Generator:
    """A seed for the orders a ``DataLoader`` shuffles in, as ``torch.Generator``: the same
    seed gives the same epochs."""

    def __init__(self, seed=None):
        self._seed = _fresh_seed() if seed is None else int(seed)
        self._epoch = 0

    def manual_seed(self, seed):
        self._seed, self._epoch = int(seed), 0
        return self

    def initial_seed(self):
        return self._seed

    def _permutation(self, n):
        order = _core.epoch_order(n, self._seed, self._epoch)
        self._epoch += 1
        return order


def _fresh_seed():
    """A seed drawn from the generator ``fg.manual_seed`` seeds."""
    return int(_core.rand(1, dtype=_core.dtype.float64).item() * 2**62)


def _check_generator(generator):
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(
            f"generator must be a ferrograd Generator (fg.Generator().manual_seed(seed)), not {type(generator).__name__}"
        )


def random_split(dataset, lengths, generator=None):
    """Random non-overlapping subsets of the given lengths (or fractions summing to 1)."""
    _check_generator(generator)
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) < 1e-9:
        counts = [int(n * f) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = (generator or Generator())._permutation(n)
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[start : start + length].tolist()))
        start += length
    return out


def default_collate(batch):
    """Samples into a batch: tensors and arrays stacked on a new first axis, numbers into a
    tensor, tuples and dicts field by field."""
    first = batch[0]
    if isinstance(first, Tensor):
        return _core.stack(list(batch), 0)
    if isinstance(first, _np.ndarray):
        return _core.tensor(_np.stack(batch))
    if isinstance(first, bool):
        return _core.tensor(list(batch))
    if isinstance(first, (int, float, _np.number)):
        return _core.tensor(_np.asarray(batch))
    if isinstance(first, dict):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, (tuple, list)):
        return (
            type(first)(default_collate(list(field)) for field in zip(*batch))
            if isinstance(first, tuple)
            else [default_collate(list(field)) for field in zip(*batch)]
        )
    return list(batch)


class DataLoader:
    """Batches of a dataset, as PyTorch's ``DataLoader``: each iteration is one epoch
    (reshuffled when ``shuffle``, from ``generator`` if given, else from the generator
    ``fg.manual_seed`` seeds). Loading runs in the calling thread (``num_workers`` is
    accepted and ignored)."""

    def __init__(
        self,
        dataset,
        batch_size=1,
        shuffle=False,
        sampler=None,
        batch_sampler=None,
        num_workers=0,
        collate_fn=None,
        pin_memory=False,
        drop_last=False,
        generator=None,
        **kwargs,
    ):
        if batch_size is None or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        _check_generator(generator)
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.drop_last, self.generator = drop_last, generator
        self.collate_fn = collate_fn or default_collate
        self.num_workers = num_workers

    def __len__(self):
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self):
        n = len(self.dataset)
        if self.sampler is not None:
            return _np.asarray(list(iter(self.sampler)), dtype=_np.int64)
        if self.shuffle:
            if self.generator is None:
                self.generator = Generator()
            return self.generator._permutation(n)
        return _np.arange(n, dtype=_np.int64)

    def _batches(self):
        if self.batch_sampler is not None:
            yield from (list(b) for b in self.batch_sampler)
            return
        order = self._order()
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                return
            yield idx

    def __iter__(self):
        fast = isinstance(self.dataset, TensorDataset) and self.collate_fn is default_collate
        for idx in self._batches():
            if fast:
                idx = _np.asarray(idx, dtype=_np.int64)
                yield tuple(t.index_select(0, idx) for t in self.dataset.tensors)
            else:
                yield self.collate_fn([self.dataset[int(i)] for i in idx])
