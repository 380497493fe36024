"""PyTorch's ``torch.utils.checkpoint``: run a piece of a model without keeping its
activations, and run it again during backward."""

from .. import _core


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """``function(*args)``, its graph not kept: the backward pass runs ``function`` again to
    get its gradients (to ``args`` and to the parameters it reads). ``function`` returns one
    tensor. ``use_reentrant`` and ``preserve_rng_state`` are PyTorch's switches, accepted;
    keyword arguments are passed to ``function``."""
    del use_reentrant, preserve_rng_state
    if kwargs:
        return _core.checkpoint(lambda *xs: function(*xs, **kwargs), args)
    return _core.checkpoint(function, args)
