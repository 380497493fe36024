"""TensorFlow's names for eager gradients (``GradientTape``, ``constant``, ``Variable``), so
that code written for ``tf.custom_gradient`` (seed 003) runs with ``tf.`` replaced by ``fg.``.

ferrograd records every op on a trainable leaf as it runs, so a tape has nothing to record:
``watch`` makes a tensor a trainable leaf in place and ``gradient`` differentiates the graph
the ops already built. Gradients of a result with several elements are those of its sum, as
TensorFlow's; a source the target does not depend on gets zeros (TensorFlow gives None).
"""

from . import _core
from ._core import Tensor, tensor


def constant(value, dtype=None):
    """A tensor holding ``value`` (float32 for Python floats)."""
    return tensor(value, dtype=dtype)


def Variable(initial_value, dtype=None, trainable=True):  # noqa: N802 (TensorFlow's name)
    """A trainable leaf holding ``initial_value``."""
    return tensor(initial_value, dtype=dtype, requires_grad=trainable)


def function(func=None, **_options):
    """``tf.function``: ferrograd runs eagerly, so the function is returned as it is."""
    return func if func is not None else (lambda f: f)


class GradientTape:
    """``with fg.GradientTape() as tape: ...`` then ``tape.gradient(y, x)``."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self.persistent = persistent

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def watch(self, tensors):
        """Makes each tensor a trainable leaf (in place) unless it already requires grad."""
        for t in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
            if not t.requires_grad:
                t.requires_grad_()

    def gradient(self, target, sources, output_gradients=None):
        """The gradient of ``target`` (summed over its elements, or weighted by
        ``output_gradients``) with respect to ``sources``: one tensor, or a list."""
        single = isinstance(sources, Tensor)
        srcs = [sources] if single else list(sources)
        if isinstance(target, Tensor):
            if output_gradients is None and target.numel() != 1:
                target = target.sum()
        elif output_gradients is None:
            target = [t.sum() for t in target]  # several targets: the gradient of their sum
        # A source the target does not reach gets zeros, as the tape always gave.
        grads = list(_core.grad(target, srcs, output_gradients, allow_unused=True, materialize_grads=True))
        return grads[0] if single else grads
