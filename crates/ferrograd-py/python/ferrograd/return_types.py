"""The named tuples that ops return, as PyTorch's ``torch.return_types``: fields by name, and
picklable (their module is this one)."""

import collections

topk = collections.namedtuple("topk", ["values", "indices"])
max = collections.namedtuple("max", ["values", "indices"])  # noqa: A001 (PyTorch's name)
min = collections.namedtuple("min", ["values", "indices"])  # noqa: A001 (PyTorch's name)
sort = collections.namedtuple("sort", ["values", "indices"])
