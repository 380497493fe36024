"""Layers, networks and losses: the core's layers, with PyTorch's parameter names and
layouts, and tinynn's names (``Net``, ``Dense``, ``SoftmaxCrossEntropyLoss``).

Every layer is callable (``layer(x)``), runs in training mode until ``eval()``, and has
``parameters()``, ``named_parameters()``, ``state_dict()``, ``load_state_dict()``,
``save(path)`` / ``load(path)`` (safetensors, PyTorch's key names) and its parameters as
attributes (``dense.weight``).
"""

import numpy as _np

from ._core import Tensor
from ._core import (  # noqa: F401
    ELU,
    GELU,
    GRU,
    LSTM,
    RNN,
    AvgPool2D,
    BatchNorm1d,
    BatchNorm2d,
    Conv2D,
    ConvTranspose2D,
    Dense,
    Dropout,
    Dropout2d,
    Embedding,
    Flatten,
    HuberLoss,
    Layer,
    LayerNorm,
    LeakyReLU,
    Loss,
    MAELoss,
    MaxPool2D,
    MSELoss,
    Net,
    NLLLoss,
    Recurrent,
    ReLU,
    Reshape,
    Sigmoid,
    SigmoidCrossEntropyLoss,
    Softmax,
    SoftmaxCrossEntropyLoss,
    Softplus,
    Tanh,
)

# PyTorch's spellings of the same classes.
Linear = Dense
Conv2d = Conv2D
ConvTranspose2d = ConvTranspose2D
MaxPool2d = MaxPool2D
AvgPool2d = AvgPool2D


def Sequential(*layers):  # noqa: N802 (PyTorch's name)
    """The layers applied in order (a ``Net``)."""
    return Net(list(layers))


class Module:
    """Base class of layers written in Python, as PyTorch's ``nn.Module``: assign trainable
    tensors (``requires_grad=True``) and layers as attributes, define ``forward(x)``.

        class Scale(fg.nn.Module):
            def __init__(self):
                super().__init__()
                self.s = fg.tensor(2.0, requires_grad=True)

            def forward(self, x):
                return x * self.s

    A module can go into a ``Net`` beside the core's layers (its parameters are named by its
    position there, then by attribute: ``"1.s"``), and into ``Model`` and the optimizers.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"call Module.__init__() in {type(self).__name__}.__init__ first")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Tensor) and value.is_parameter:
            self._parameters[name] = value
        elif isinstance(value, (Layer, Module)):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def forward(self, x):
        raise NotImplementedError(f"{type(self).__name__} defines no forward")

    def __call__(self, x):
        return self.forward(x)

    def named_parameters(self, prefix=""):
        """``(name, parameter)`` pairs: this module's, then each sub-layer's (``"block.weight"``)."""
        out = [(prefix + n, p) for n, p in self._parameters.items()]
        for n, m in self._modules.items():
            out.extend((f"{prefix}{n}.{k}", v) for k, v in m.named_parameters())
        return out

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def train(self, mode=True):
        object.__setattr__(self, "training", mode)
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def state_dict(self):
        return {n: p.detach() for n, p in self.named_parameters()}

    def load_state_dict(self, state):
        """Loads values by name; every name must match in shape, or nothing changes."""
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(state))
        unknown = sorted(set(state) - set(params))
        wrong = [n for n in params if n in state and tuple(_np.shape(state[n])) != params[n].shape]
        if missing or unknown or wrong:
            raise ValueError(f"load_state_dict: missing {missing}, unknown {unknown}, wrong shape {wrong}")
        values = {n: _np.asarray(state[n], dtype=_np.dtype(p.dtype.name)) for n, p in params.items()}
        for n, p in params.items():
            p.data = values[n]
