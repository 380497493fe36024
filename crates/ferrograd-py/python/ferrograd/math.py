"""Element-wise math under TensorFlow's module name (``fg.math.log``)."""

from . import abs, cos, exp, log, sigmoid, sin, softplus, sqrt, square, tanh  # noqa: F401
