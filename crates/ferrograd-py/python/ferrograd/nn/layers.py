"""PyTorch layers written in Python over the core's ops: ``Conv1d``, ``GroupNorm``,
``AdaptiveAvgPool2d``, ``Upsample``, ``Unflatten``, ``ReLU6``, ``ParameterList``,
``ParameterDict``, the activations of ``F`` as modules (``Hardtanh``, ``Mish``, ``GLU``,
``SELU``, ...), ``PReLU``, ``PixelShuffle``, the constant pads, ``CosineSimilarity``,
``PairwiseDistance`` and the recurrent cells ``RNNCell``, ``LSTMCell``, ``GRUCell`` (the
core's layers are in ``ferrograd._core``)."""

import math

from .. import _core
from .._core import full, ones, rand, zeros
from . import functional as F
from ._module import Module
from .parameter import Parameter


def _single(v):
    """PyTorch's one-axis size: an int or a sequence of one."""
    return (v,) if isinstance(v, int) else tuple(v)


class Conv1d(Module):
    """PyTorch's ``Conv1d`` over ``[N, C, L]``: ``weight`` ``[out, in/groups, k]`` and ``bias``
    ``[out]``, drawn as PyTorch draws them (U(±1/√(in/groups·k))), through ``F.conv1d``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__()

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

    return value if isinstance(value, Parameter) else Parameter(value)


_REQUIRED = object()


def _activation_module(name, function, doc, **defaults):
    """A module calling ``F.<function>`` with its constructor's arguments (PyTorch's names and
    defaults, ``_REQUIRED`` for those without one; ``inplace`` accepted and ignored, as
    results are new tensors here)."""

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        kwargs.pop("inplace", None)
        if len(args) > len(defaults) + 1:
            raise TypeError(
                f"{name}.__init__() takes {len(defaults) + 1} positional arguments but {len(args)} were given"
            )
        args = args[: len(defaults)]  # PyTorch's trailing positional `inplace`
        settings = dict(defaults)
        settings.update(zip(defaults, args))
        settings.update(kwargs)
        unknown = set(settings) - set(defaults)
        if unknown:
            raise TypeError(f"{name}.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        missing = [k for k, v in settings.items() if v is _REQUIRED]
        if missing:
            raise TypeError(f"{name}.__init__() missing required argument {missing[0]!r}")
        for k, v in settings.items():
            setattr(self, k, v)

    def forward(self, input):
        return function(input, **{k: getattr(self, k) for k in defaults})

    def extra_repr(self):
        return ", ".join(f"{k}={getattr(self, k)}" for k in defaults)

    return type(
        name,
        (Module,),
        {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc, "__module__": __name__},
    )


Hardtanh = _activation_module("Hardtanh", F.hardtanh, "``clamp(x, min_val, max_val)``.", min_val=-1.0, max_val=1.0)
Hardsigmoid = _activation_module("Hardsigmoid", F.hardsigmoid, "``relu6(x + 3) / 6``.")
Hardswish = _activation_module("Hardswish", F.hardswish, "``x · relu6(x + 3) / 6``.")
Mish = _activation_module("Mish", F.mish, "``x · tanh(softplus(x))``.")
LogSigmoid = _activation_module("LogSigmoid", F.logsigmoid, "``log σ(x)``, without overflow.")
Softmin = _activation_module("Softmin", F.softmin, "``softmax(−x)`` along ``dim``.", dim=None)
GLU = _activation_module("GLU", F.glu, "The first half along ``dim`` gated by σ of the second.", dim=-1)
CELU = _activation_module("CELU", F.celu, "``max(0, x) + min(0, α(e^(x/α) − 1))``.", alpha=1.0)
SELU = _activation_module("SELU", F.selu, "Scaled ELU with PyTorch's constants.")
Softsign = _activation_module("Softsign", F.softsign, "``x / (1 + |x|)``.")
Threshold = _activation_module(
    "Threshold", F.threshold, "``x`` above ``threshold``, else ``value``.", threshold=_REQUIRED, value=_REQUIRED
)
PixelShuffle = _activation_module(
    "PixelShuffle", F.pixel_shuffle, "``[.., C·r², H, W]`` → ``[.., C, H·r, W·r]``.", upscale_factor=_REQUIRED
)
PixelUnshuffle = _activation_module(
    "PixelUnshuffle", F.pixel_unshuffle, "The inverse of ``PixelShuffle``.", downscale_factor=_REQUIRED
)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class PReLU(Module):
    """``max(0, x) + weight · min(0, x)``: ``weight`` ``[num_parameters]`` (one, or one per
    channel), ``init`` at first."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()

        self.num_parameters = num_parameters
        self.weight = full((num_parameters,), init, dtype=dtype).requires_grad_()

    def forward(self, input):
        return F.prelu(input, self.weight)


class ConstantPad2d(Module):
    """``F.pad`` with ``value`` by ``padding`` (one int for all four sides, or
    ``(left, right, top, bottom)``)."""

    _sides = 4

    def __init__(self, padding, value=0.0):
        super().__init__()
        self.padding = (padding,) * self._sides if isinstance(padding, int) else tuple(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, value=self.value)


class ConstantPad1d(ConstantPad2d):
    _sides = 2


class ZeroPad2d(ConstantPad2d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class _RecurrentCell(Module):
    """``weight_ih [G·H, in]``, ``weight_hh [G·H, H]``, ``bias_ih``, ``bias_hh`` ``[G·H]``,
    drawn from U(±1/√H) as PyTorch draws them; inputs ``[N, in]`` or unbatched ``[in]``."""

    _gates = 1

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()

        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        bound = 1.0 / math.sqrt(hidden_size)
        draw = lambda *shape: ((rand(*shape) * 2 - 1) * bound).requires_grad_()  # noqa: E731
        g = self._gates * hidden_size
        self.weight_ih, self.weight_hh = draw(g, input_size), draw(g, hidden_size)
        self.bias_ih = draw(g) if bias else None
        self.bias_hh = draw(g) if bias else None
        self.to(*[a for a in (device, dtype) if a is not None])

    def _projections(self, x, h):
        return F.linear(x, self.weight_ih, self.bias_ih), F.linear(h, self.weight_hh, self.bias_hh)

    def _batched(self, x, state):
        """``x`` as ``[N, in]``, the state (zeros when None) as ``[N, H]``, and whether the
        input had no batch axis."""
        if x.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {x.ndim}D instead")
        single = x.ndim == 1
        x = x.unsqueeze(0) if single else x
        if state is None:
            return x, None, single
        return x, tuple(s.unsqueeze(0) if single else s for s in state), single

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


def _zeros_state(x, hidden_size):

    return zeros(x.shape[0], hidden_size, dtype=x.dtype)


class RNNCell(_RecurrentCell):
    """``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or ``nonlinearity="relu"``)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, state, single = self._batched(input, None if hx is None else (hx,))
        h = _zeros_state(x, self.hidden_size) if state is None else state[0]
        gi, gh = self._projections(x, h)
        out = (gi + gh).tanh() if self.nonlinearity == "tanh" else (gi + gh).relu()
        return out.squeeze(0) if single else out


class LSTMCell(_RecurrentCell):
    """PyTorch's gates ``i, f, g, o``: ``c' = f·c + i·g``, ``h' = o·tanh(c')``; returns
    ``(h', c')``."""

    _gates = 4

    def forward(self, input, hx=None):
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("LSTMCell: hx must be a tuple (h_0, c_0)")
        x, state, single = self._batched(input, hx)
        h, c = (_zeros_state(x, self.hidden_size),) * 2 if state is None else state
        gi, gh = self._projections(x, h)
        h, c = _core.lstm_cell(gi, gh, c)
        return (h.squeeze(0), c.squeeze(0)) if single else (h, c)


class GRUCell(_RecurrentCell):
    """PyTorch's gates ``r, z, n``: ``n = tanh(W_in x + b_in + r·(W_hn h + b_hn))``,
    ``h' = (1 − z)·n + z·h``."""

    _gates = 3

    def forward(self, input, hx=None):
        x, state, single = self._batched(input, None if hx is None else (hx,))
        h = _zeros_state(x, self.hidden_size) if state is None else state[0]
        gi, gh = self._projections(x, h)
        out = _core.gru_cell(gi, gh, h)
        return out.squeeze(0) if single else out
