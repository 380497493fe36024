"""Optimizers. tinynn's way: ``Model(net, loss, Adam(lr=1e-3))``. PyTorch's way:
``opt = Adam(net.parameters(), lr=1e-3)``; after ``loss.backward()``, ``opt.step()`` updates
each parameter from its ``.grad`` (or ``opt.step(grads)`` from the returned gradients), and
``opt.zero_grad()`` clears them. ``params`` may be PyTorch's parameter groups (dicts with
their own ``"lr"`` and ``"weight_decay"``); ``opt.param_groups`` is read at every step, which
is how ``lr_scheduler`` sets the rates."""

from .._core import SGD, Adagrad, Adam, AdamW, Momentum, Optimizer, RAdam, RMSProp  # noqa: F401
from . import lr_scheduler  # noqa: E402,F401

# PyTorch's spelling of RMSProp, and the Rust crate's names.
RMSprop = RmsProp = RMSProp
Sgd = SGD
