"""Optimizers. tinynn's way: ``Model(net, loss, Adam(lr=1e-3))``. PyTorch's way:
``opt = Adam(net.parameters(), lr=1e-3)``; after ``loss.backward()``, ``opt.step()`` updates
each parameter from its ``.grad`` (or ``opt.step(grads)`` from the returned gradients)."""

from ._core import SGD, Adagrad, Adam, AdamW, Momentum, Optimizer, RAdam, RMSProp  # noqa: F401
