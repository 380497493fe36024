"""PyTorch's ``torch.utils.checkpoint``: run a piece of a model without keeping its
activations, and run it again during backward."""

from .. import _core
from .._core import Tensor


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """``function(*args, **kwargs)``, its graph not kept: the backward pass runs ``function``
    again to get its gradients (to the tensor arguments and to the parameters it reads),
    drawing the random numbers it drew the first time (dropout masks), so the gradients are
    those of the result returned. ``function`` returns one tensor; arguments that are not
    tensors are passed as they are. ``use_reentrant`` and ``preserve_rng_state`` are
    PyTorch's switches, accepted (the draws are always kept)."""
    del use_reentrant, preserve_rng_state
    at = [i for i, a in enumerate(args) if isinstance(a, Tensor)]

    def run(*tensors):
        full = list(args)
        for i, t in zip(at, tensors):
            full[i] = t
        return function(*full, **kwargs)

    return _core.checkpoint(run, tuple(args[i] for i in at))
