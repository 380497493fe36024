"""Layers, networks and losses: the core's layers, with PyTorch's parameter names and
layouts, and tinynn's names (``Net``, ``Dense``, ``SoftmaxCrossEntropyLoss``).

Every layer is callable (``layer(x)``), runs in training mode until ``eval()``, and has
``parameters()``, ``named_parameters()``, ``state_dict()``, ``load_state_dict()``,
``save(path)`` / ``load(path)`` (safetensors, PyTorch's key names) and its parameters as
attributes (``dense.weight``).
"""

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
