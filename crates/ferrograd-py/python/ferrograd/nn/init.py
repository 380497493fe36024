"""``ferrograd.nn.init``: PyTorch's initialisers, with its names, fans and gains. Each
replaces the tensor's values in place (a parameter keeps its identity) from the generator
``fg.manual_seed`` seeds, and returns the tensor."""

import math as _math

import numpy as _np

from .. import _core, no_grad


def _fill(tensor, values):
    with _no_grad():
        tensor.data = _np.asarray(values, dtype=_np.dtype(tensor.dtype.name)).reshape(tensor.shape)
    return tensor


def _no_grad():

    return no_grad()


def _draw(shape, normal):
    draw = _core.randn if normal else _core.rand
    return draw(*shape, dtype=_core.dtype.float64).numpy()


def calculate_gain(nonlinearity, param=None):
    """PyTorch's recommended gains: 1 for linear and sigmoid, 5/3 for tanh, √2 for relu,
    √(2/(1+a²)) for leaky relu (a = ``param``, default 0.01), 3/4 for selu."""
    linear = (
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "sigmoid",
    )
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return _math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return _math.sqrt(2.0 / (1.0 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor):
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ValueError("fan in and fan out can not be computed for a tensor with fewer than 2 dimensions")
    field = int(_np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * field, shape[0] * field


def _fan(tensor, mode):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode {mode!r} is not 'fan_in' or 'fan_out'")
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0):
    return _fill(tensor, a + (b - a) * _draw(tensor.shape, False))


def normal_(tensor, mean=0.0, std=1.0):
    return _fill(tensor, mean + std * _draw(tensor.shape, True))


def constant_(tensor, val):
    return _fill(tensor, _np.full(tuple(tensor.shape), float(val)))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * _math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * _math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    std = calculate_gain(nonlinearity, a) / _math.sqrt(_fan(tensor, mode))
    bound = _math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    std = calculate_gain(nonlinearity, a) / _math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal values redrawn until each lies in ``[a, b]`` (an interval holding too little of
    the distribution to draw from in 100 rounds is an error)."""
    if not (a < b and std > 0):
        raise ValueError(f"trunc_normal_: needs a < b and std > 0, got a={a}, b={b}, std={std}")
    values = mean + std * _draw(tensor.shape, True)
    outside = (values < a) | (values > b)
    for _ in range(100):
        if not outside.any():
            return _fill(tensor, values)
        values[outside] = mean + std * _draw((int(outside.sum()),), True)
        outside = (values < a) | (values > b)
    raise ValueError(f"trunc_normal_: [{a}, {b}] holds too little of N({mean}, {std}²) to draw from")


def orthogonal_(tensor, gain=1.0):
    """A (semi-)orthogonal matrix over the first axis and the rest flattened, as PyTorch's."""
    rows = tensor.shape[0]
    cols = int(_np.prod(tensor.shape[1:]))
    flat = _draw((rows, cols), True)
    if rows < cols:
        flat = flat.T
    q, r = _np.linalg.qr(flat)
    q *= _np.sign(_np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q)
