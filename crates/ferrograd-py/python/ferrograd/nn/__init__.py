"""Layers, networks and losses: the core's layers, with PyTorch's parameter names and
layouts, PyTorch's names (``Linear``, ``Conv2d``, ``CrossEntropyLoss``, ``Sequential``,
``ModuleList``, ``functional``, ``init``, ``utils``) and tinynn's (``Net``, ``Dense``,
``SoftmaxCrossEntropyLoss``).

Every layer is callable (``layer(x)``), runs in training mode until ``eval()``, and has
``parameters()``, ``named_parameters()``, ``state_dict()``, ``load_state_dict()``,
``save(path)`` / ``load(path)`` (safetensors, PyTorch's key names) and its parameters as
attributes (``dense.weight``). Layers written in Python subclass ``Module``.
"""

import numpy as _np

from .._core import Tensor
from .._core import (  # noqa: F401
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
    MultiheadAttention,
    Net,
    NLLLoss,
    Recurrent,
    ReLU,
    Reshape,
    RMSNorm,
    Sigmoid,
    SigmoidCrossEntropyLoss,
    Softmax,
    SoftmaxCrossEntropyLoss,
    Softplus,
    Tanh,
    TransformerEncoderLayer,
)

# The Rust crate's names of the losses, so either spelling works in either language.
SoftmaxCrossEntropy = SoftmaxCrossEntropyLoss
SigmoidCrossEntropy = SigmoidCrossEntropyLoss
Mse = MSELoss
Mae = MAELoss
Huber = HuberLoss
Nll = NLLLoss

# PyTorch's spellings of the same classes.
Linear = Dense
Conv2d = Conv2D
ConvTranspose2d = ConvTranspose2D
MaxPool2d = MaxPool2D
AvgPool2d = AvgPool2D


from ._module import Module, ModuleDict, ModuleList, Sequential  # noqa: E402,F401
from .losses import (  # noqa: E402,F401
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    L1Loss,
    SmoothL1Loss,
)
from . import functional, init, utils  # noqa: E402,F401
