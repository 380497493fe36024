"""PyTorch's ``nn.TransformerEncoder``: a stack of copies of one encoder layer."""

import copy
import operator

from .._core import Layer
from ._module import Module, ModuleList


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (each starting from its weights, with
    parameters and a dropout stream of its own), then ``norm`` when given, as PyTorch's:
    ``layers.0.self_attn.in_proj_weight``, ..., ``norm.weight``. ``enable_nested_tensor``
    and ``mask_check`` are PyTorch's switches of its inference fast path (where padded
    positions come out 0); here there is one path, and padded positions are computed as in
    training."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        if not isinstance(encoder_layer, (Module, Layer)):
            raise TypeError(f"encoder_layer must be a layer, got {type(encoder_layer).__name__}")
        num_layers = operator.index(num_layers)
        if num_layers < 0:
            raise ValueError(f"num_layers must be at least 0, got {num_layers}")
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """Each layer in turn with the same masks (``is_causal``: the causal mask, where
        PyTorch takes it as a hint about ``mask``)."""
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return out if self.norm is None else self.norm(out)
