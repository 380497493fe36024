"""Layers, networks and losses: the core's layers, with PyTorch's parameter names and
layouts, PyTorch's names (``Linear``, ``Conv2d``, ``CrossEntropyLoss``, ``Sequential``,
``ModuleList``, ``functional``, ``init``, ``utils``) and tinynn's (``Net``, ``Dense``,
``SoftmaxCrossEntropyLoss``).

Every layer is callable (``layer(x)``), runs in training mode until ``eval()``, and has
``parameters()``, ``named_parameters()``, ``state_dict()``, ``load_state_dict()``,
``save(path)`` / ``load(path)`` (safetensors, PyTorch's key names) and its parameters as
attributes (``dense.weight``). Layers written in Python subclass ``Module``.
"""

from .._core import (  # noqa: F401
    ELU,
    GELU,
    GRU,
    LSTM,
    RNN,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    ConvTranspose2d,
    Dense,
    Dropout,
    Dropout2d,
    Embedding,
    Flatten,
    HuberLoss,
    Identity,
    Layer,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    Loss,
    MAELoss,
    MaxPool2d,
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
    SiLU,
    Softmax,
    SoftmaxCrossEntropyLoss,
    Softplus,
    Tanh,
    Tensor,
    TransformerEncoderLayer,
)

# The Rust crate's names, so either spelling works in either language.
SoftmaxCrossEntropy = SoftmaxCrossEntropyLoss
SigmoidCrossEntropy = SigmoidCrossEntropyLoss
Mse = MseLoss = MSELoss
Mae = MaeLoss = MAELoss
Huber = HuberLoss
Nll = NllLoss = NLLLoss
Relu = ReLU
LeakyRelu = LeakyReLU
Elu = ELU
Gelu = GELU
Silu = SiLU
Rnn = RNN
Lstm = LSTM
Gru = GRU

# PyTorch's spellings of the same classes (``Linear`` is its own class: ``Dense`` keeps
# tinynn's initialisation, ``Linear`` draws PyTorch's).
Conv2D = Conv2d
ConvTranspose2D = ConvTranspose2d
MaxPool2D = MaxPool2d
AvgPool2D = AvgPool2d


from ._module import Module, ModuleDict, ModuleList, Sequential  # noqa: E402,F401
from .layers import (  # noqa: E402,F401
    CELU,
    GLU,
    SELU,
    AdaptiveAvgPool2d,
    ConstantPad1d,
    ConstantPad2d,
    Conv1d,
    CosineSimilarity,
    GroupNorm,
    GRUCell,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LogSigmoid,
    LSTMCell,
    Mish,
    PairwiseDistance,
    ParameterDict,
    ParameterList,
    PixelShuffle,
    PixelUnshuffle,
    PReLU,
    ReLU6,
    RNNCell,
    Softmin,
    Softsign,
    Threshold,
    Unflatten,
    Upsample,
    ZeroPad2d,
)
from .losses import (  # noqa: E402,F401
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    KLDivLoss,
    L1Loss,
    SmoothL1Loss,
)
from .parameter import Parameter  # noqa: E402,F401
from .transformer import Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder  # noqa: E402,F401

CrossEntropy = CrossEntropyLoss


def _embedding_from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, **kwargs):
    """``Embedding.from_pretrained(embeddings, freeze=True, padding_idx=None)``: a table
    holding ``embeddings`` ``[count, dim]`` (its dtype kept), not trained when ``freeze``."""
    refused = [k for k in ("sparse", "scale_grad_by_freq") if kwargs.pop(k, False)]
    if max_norm is not None or refused or kwargs.pop("norm_type", 2.0) != 2.0 or kwargs:
        raise NotImplementedError(
            f"from_pretrained with max_norm, norm_type, sparse or scale_grad_by_freq is not supported "
            f"(given {refused + sorted(kwargs) + (['max_norm'] if max_norm is not None else [])})"
        )
    rows, dim = embeddings.shape
    layer = cls(rows, dim, padding_idx=padding_idx)
    layer.to(embeddings.dtype)
    layer.weight.data = embeddings
    layer.weight.requires_grad = not freeze
    return layer


Embedding.from_pretrained = classmethod(_embedding_from_pretrained)

from . import functional, init, utils  # noqa: E402,F401
