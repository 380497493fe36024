"""PyTorch layers written in Python over the core's ops: ``Conv1d``, ``GroupNorm``,
``AdaptiveAvgPool2d``, ``Upsample``, ``Unflatten``, ``ReLU6``, ``ParameterList``,
``ParameterDict`` (the core's layers are in ``ferrograd._core``)."""

import math

from . import functional as F
from ._module import Module


def _single(v):
    """PyTorch's one-axis size: an int or a sequence of one."""
    return (v,) if isinstance(v, int) else tuple(v)


class Conv1d(Module):
    """PyTorch's ``Conv1d`` over ``[N, C, L]``: ``weight`` ``[out, in/groups, k]`` and ``bias``
    ``[out]``, drawn as PyTorch draws them (U(±1/√(in/groups·k))), through ``F.conv1d``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True):
        super().__init__()
        from .. import rand

        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1d: {groups} groups do not divide {in_channels} → {out_channels} channels")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _single(kernel_size), _single(stride), _single(dilation)
        self.padding = padding if isinstance(padding, str) else _single(padding)
        (k,) = self.kernel_size
        bound = 1.0 / math.sqrt(in_channels // groups * k)
        draw = lambda *shape: ((rand(*shape) * 2 - 1) * bound).requires_grad_()  # noqa: E731
        self.weight = draw(out_channels, in_channels // groups, k)
        self.bias = draw(out_channels) if bias else None

    def forward(self, input):
        padding = self.padding if isinstance(self.padding, str) else self.padding[0]
        return F.conv1d(input, self.weight, self.bias, self.stride[0], padding, self.dilation[0], self.groups)

    def extra_repr(self):
        # As PyTorch prints a convolution: what differs from the defaults.
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,):
            s += f", padding={self.padding}"
        s += "" if self.dilation == (1,) else f", dilation={self.dilation}"
        s += "" if self.groups == 1 else f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class GroupNorm(Module):
    """PyTorch's ``GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)``: ``weight``
    (ones) and ``bias`` (zeros) per channel, through ``F.group_norm``."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True):
        super().__init__()
        from .. import ones, zeros

        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: {num_groups} groups do not divide {num_channels} channels")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = ones(num_channels, requires_grad=True) if affine else None
        self.bias = zeros(num_channels, requires_grad=True) if affine else None

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to ``output_size`` (an int or a pair) whatever the input's size."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class Upsample(Module):
    """``F.interpolate`` as a layer: nearest-neighbour upsampling by a whole ``scale_factor``
    or to a ``size`` that is a whole multiple."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self):
        if self.size is not None:
            what = f"size={self.size}"
        elif isinstance(self.scale_factor, (tuple, list)):
            what = f"scale_factor={tuple(float(f) for f in self.scale_factor)}"
        else:
            what = f"scale_factor={float(self.scale_factor)}"
        return f"{what}, mode='{self.mode}'"


class Unflatten(Module):
    """Axis ``dim`` split into ``unflattened_size``."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class ReLU6(Module):
    """``min(max(x, 0), 6)``."""

    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, input):
        return F.relu6(input)


class ParameterList(Module):
    """Parameters in a list, registered under ``"0"``, ``"1"``, ... so modules and optimizers
    find them."""

    def __init__(self, values=None):
        super().__init__()
        for v in values or []:
            self.append(v)

    def append(self, value):
        setattr(self, str(len(self._parameters)), _as_parameter(value))
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, idx):
        return list(self._parameters.values())[idx]

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList has no forward: use its parameters")


class ParameterDict(Module):
    """Parameters by name, registered so modules and optimizers find them."""

    def __init__(self, parameters=None):
        super().__init__()
        items = parameters.items() if hasattr(parameters, "items") else parameters or []
        for k, v in items:
            self[k] = v

    def __setitem__(self, key, value):
        if key not in self._parameters and hasattr(self, key):
            raise KeyError(f"attribute '{key}' already exists")
        setattr(self, key, _as_parameter(value))

    def __getitem__(self, key):
        return self._parameters[key]

    def __contains__(self, key):
        return key in self._parameters

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict has no forward: use its parameters")


def _as_parameter(value):
    from . import Parameter

    return value if isinstance(value, Parameter) else Parameter(value)
