"""PyTorch's ``nn.TransformerEncoder`` (a stack of copies of one encoder layer),
``nn.TransformerDecoderLayer``, ``nn.TransformerDecoder`` and ``nn.Transformer``, with
PyTorch's parameter names, layouts, defaults and masks. The decoder layer is built from the
core's ``MultiheadAttention``, ``Linear``, ``LayerNorm`` and ``Dropout``."""

import copy
import operator

import numpy as np

from .. import _core
from .._core import Layer
from . import functional as F
from . import init
from ._module import Module, ModuleList


def _layer(layer, what):
    if not isinstance(layer, (Module, Layer)):
        raise TypeError(f"{what} must be a layer, got {type(layer).__name__}")
    return layer


def _copies(layer, num_layers):
    """``num_layers`` deep copies of ``layer``, each with parameters of its own."""
    num_layers = operator.index(num_layers)
    if num_layers < 0:
        raise ValueError(f"num_layers must be at least 0, got {num_layers}")
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)]), num_layers


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (each starting from its weights, with
    parameters and a dropout stream of its own), then ``norm`` when given, as PyTorch's:
    ``layers.0.self_attn.in_proj_weight``, ..., ``norm.weight``. ``enable_nested_tensor``
    and ``mask_check`` are PyTorch's switches of its inference fast path (where padded
    positions come out 0); here there is one path, and padded positions are computed as in
    training."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers, self.num_layers = _copies(_layer(encoder_layer, "encoder_layer"), num_layers)
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """Each layer in turn with the same masks (``is_causal``: the causal mask, where
        PyTorch takes it as a hint about ``mask``)."""
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return out if self.norm is None else self.norm(out)


def _activation(activation):
    """PyTorch's ``activation`` argument: ``"relu"``, ``"gelu"`` or a callable."""

    if isinstance(activation, str):
        named = {"relu": F.relu, "gelu": F.gelu}
        if activation not in named:
            raise ValueError(f"activation should be relu/gelu, not {activation}")
        return named[activation]
    if not callable(activation):
        raise TypeError(f'activation should be "relu", "gelu" or a callable, not {type(activation).__name__}')
    return activation


class TransformerDecoderLayer(Module):
    """PyTorch's ``TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation="relu", layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True)``:
    self-attention on the target, attention from the target to ``memory`` (the encoder's
    output), a feed-forward block, each with a residual sum and a LayerNorm (after it, or
    before the block with ``norm_first``). Parameters ``self_attn.*``, ``multihead_attn.*``,
    ``linear1.*``, ``linear2.*``, ``norm1.*``, ``norm2.*``, ``norm3.*``; layout ``[T, N, E]``
    unless ``batch_first``, or unbatched ``[T, E]``."""

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        attention = dict(dropout=dropout, bias=bias, batch_first=batch_first)
        self.self_attn = _core.MultiheadAttention(d_model, nhead, **attention)
        self.multihead_attn = _core.MultiheadAttention(d_model, nhead, **attention)
        self.linear1 = _core.Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = _core.Dropout(dropout)
        self.linear2 = _core.Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1, self.norm2, self.norm3 = (_core.LayerNorm(d_model, eps=layer_norm_eps, bias=bias) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (_core.Dropout(dropout) for _ in range(3))
        self.activation = _activation(activation)
        if dtype is not None:
            self.to(dtype)

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
    ):
        """The target ``tgt`` attending to itself (``tgt_mask``, ``tgt_key_padding_mask``,
        ``tgt_is_causal``) and to ``memory`` (``memory_mask``, ``memory_key_padding_mask``,
        ``memory_is_causal``), masks as ``MultiheadAttention`` takes them."""
        x = tgt
        mine = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        theirs = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), *mine)
            x = x + self._cross_attention(self.norm2(x), memory, *theirs)
            return x + self._feed_forward(self.norm3(x))
        x = self.norm1(x + self._self_attention(x, *mine))
        x = self.norm2(x + self._cross_attention(x, memory, *theirs))
        return self.norm3(x + self._feed_forward(x))

    def _self_attention(self, x, mask, padding, causal):
        y = self.self_attn(
            x, x, x, attn_mask=mask, key_padding_mask=padding, is_causal=bool(causal), need_weights=False
        )[0]
        return self.dropout1(y)

    def _cross_attention(self, x, memory, mask, padding, causal):
        y = self.multihead_attn(
            x, memory, memory, attn_mask=mask, key_padding_mask=padding, is_causal=bool(causal), need_weights=False
        )[0]
        return self.dropout2(y)

    def _feed_forward(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` (parameters of their own), then ``norm``
    when given, as PyTorch's: ``layers.0.multihead_attn.in_proj_weight``, ...,
    ``norm.weight``."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers, self.num_layers = _copies(_layer(decoder_layer, "decoder_layer"), num_layers)
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        """Each layer in turn on the target, every one attending to the same ``memory``."""
        out = tgt
        for layer in self.layers:
            out = layer(
                out,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """PyTorch's ``Transformer(d_model=512, nhead=8, num_encoder_layers=6,
    num_decoder_layers=6, dim_feedforward=2048, dropout=0.1, activation="relu",
    custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True)``: an encoder stack and a decoder stack, each ending in a
    LayerNorm (``encoder.norm``, ``decoder.norm``), every matrix drawn again from
    Xavier's uniform distribution, as PyTorch draws them."""

    def __init__(
        self,
        d_model=512,
        nhead=8,
        num_encoder_layers=6,
        num_decoder_layers=6,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()

        layer = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
        )
        norm = dict(eps=layer_norm_eps, bias=bias)
        if custom_encoder is not None:
            self.encoder = _layer(custom_encoder, "custom_encoder")
        else:
            self.encoder = TransformerEncoder(
                _core.TransformerEncoderLayer(d_model, nhead, **layer),
                num_encoder_layers,
                _core.LayerNorm(d_model, **norm),
            )
        if custom_decoder is not None:
            self.decoder = _layer(custom_decoder, "custom_decoder")
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(d_model, nhead, **layer), num_decoder_layers, _core.LayerNorm(d_model, **norm)
            )
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
        if dtype is not None:
            self.to(dtype)

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        """The encoder on ``src``, then the decoder on ``tgt`` attending to its output."""
        batch = 0 if self.batch_first else 1
        if src.dim() == 3 and tgt.dim() == 3 and src.shape[batch] != tgt.shape[batch]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """``[sz, sz]`` with ``-inf`` above the diagonal and 0 elsewhere: the causal mask."""
        del device
        return _core.tensor(np.triu(np.full((sz, sz), -np.inf), 1), dtype=dtype or _core.dtype.float32)
