"""``ferrograd.utils``: ``utils.data`` (PyTorch's ``Dataset``, ``TensorDataset``,
``DataLoader``)."""

from . import data  # noqa: F401
