"""``nn.Parameter``: a trainable leaf, as PyTorch's."""

from .._core import Tensor
from .._core import tensor as _tensor
from .._core import zeros as _zeros


class _ParameterType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.is_parameter


class Parameter(metaclass=_ParameterType):
    """A trainable leaf holding ``data``'s values (PyTorch's ``nn.Parameter(tensor)``): a
    module that assigns it to an attribute registers it. A ferrograd tensor that requires
    gradients is a parameter: ``Parameter(t)`` returns such a tensor, and
    ``isinstance(p, nn.Parameter)`` is true of every trainable leaf (a layer's weight too)."""

    def __new__(cls, data=None, requires_grad=True):
        base = _zeros(0) if data is None else data
        value = base.detach().numpy() if isinstance(base, Tensor) else base
        dtype = base.dtype if isinstance(base, Tensor) else None
        leaf = _tensor(value, dtype=dtype, requires_grad=True)
        leaf.requires_grad = requires_grad  # a frozen parameter is still one
        return leaf
