"""``ferrograd.utils``: ``utils.data`` (PyTorch's ``Dataset``, ``TensorDataset``,
``DataLoader``) and ``utils.checkpoint``."""

from . import checkpoint, data  # noqa: F401
