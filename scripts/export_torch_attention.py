#!/usr/bin/env python3
"""PyTorch's float64 values for ferrograd's attention tests, written to
crates/ferrograd/tests/fixtures/torch_attention.safetensors:

    pip install torch safetensors
    python3 scripts/export_torch_attention.py

Inputs are closed-form (sines and cosines), so the test rebuilds them without reading them.
Cases: F.scaled_dot_product_attention with several heads, L != S, an additive mask and a
scale, and causal; the output and the gradients of sum(output * w) for each input; and
nn.MultiheadAttention (batch first; also with keys and values of other widths, with and
without biases, under a 3-D mask and a key padding mask) and nn.TransformerEncoderLayer
(post-norm ReLU, pre-norm GELU, and one without biases with another LayerNorm eps and a callable
activation; dropout 0) with their state dicts and outputs.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

torch.set_default_dtype(torch.float64)


def wave(shape, a, b=0.0, f=np.sin):
    n = int(np.prod(shape))
    return torch.tensor(f(a * np.arange(n) + b).reshape(shape))


out = {}
q, k, v = wave((2, 3, 4, 5), 0.3), wave((2, 3, 6, 5), 0.2, f=np.cos), wave((2, 3, 6, 7), 0.7, 1.0)
mask = wave((4, 6), 0.1, f=np.cos)
w = wave((2, 3, 4, 7), 0.13, 0.5)
for name, kw, (qq, kk, vv) in [
    ("masked", dict(attn_mask=mask, scale=0.3), (q, k, v)),
    ("causal", dict(is_causal=True), (q, k[:, :, :4], v[:, :, :4])),
]:
    leaves = [t.clone().requires_grad_() for t in (qq, kk, vv)]
    extra = {}
    if "attn_mask" in kw:
        kw = dict(kw, attn_mask=kw["attn_mask"].clone().requires_grad_())
        extra = {"mask": kw["attn_mask"]}
    y = F.scaled_dot_product_attention(*leaves, **kw)
    (y * w).sum().backward()
    out[f"{name}.out"] = y.detach()
    for key, t in zip(("q", "k", "v"), leaves):
        out[f"{name}.grad_{key}"] = t.grad
    for key, t in extra.items():
        out[f"{name}.grad_{key}"] = t.grad

torch.manual_seed(0)
x = wave((2, 5, 8), 0.37)
mha = nn.MultiheadAttention(8, 2, batch_first=True)
causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
y, weights = mha(x, x, x, attn_mask=causal)
out["mha.out"] = y.detach()
out["mha.weights"] = weights.detach()
for k_, t in mha.state_dict().items():
    out[f"mha.state.{k_}"] = t
for name, kw in [("post_relu", {}), ("pre_gelu", dict(norm_first=True, activation="gelu"))]:
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, **kw)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    layer.eval()
    out[f"{name}.out"] = layer(x).detach()
    out[f"{name}.out_causal"] = layer(x, src_mask=causal, is_causal=True).detach()
    for k_, t in layer.state_dict().items():
        out[f"{name}.state.{k_}"] = t
# Keys and values of other widths (separate projections), biases perturbed off zero, a 3-D
# mask [N*H, L, S] beside a key padding mask, each head's weights.
kv_key, kv_value = wave((2, 4, 6), 0.23, f=np.cos), wave((2, 4, 3), 0.41, 0.3)
mask3 = wave((4, 5, 4), 0.17, f=np.cos)
hidden = torch.tensor([[False, False, True, False], [False, False, False, True]])
padding = torch.zeros(2, 4).masked_fill(hidden, float("-inf"))
for name, kw in [("mha_kv", dict(kdim=6, vdim=3)), ("mha_nobias", dict(kdim=6, vdim=3, bias=False))]:
    m = nn.MultiheadAttention(8, 2, batch_first=True, **kw)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    y, weights = m(x, kv_key, kv_value, attn_mask=mask3, key_padding_mask=padding,
                   average_attn_weights=False)
    out[f"{name}.out"] = y.detach()
    out[f"{name}.weights"] = weights.detach()
    for k_, t in m.state_dict().items():
        out[f"{name}.state.{k_}"] = t
# The encoder layer without biases, another LayerNorm eps and a callable activation.
layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True,
                                   activation=torch.tanh, layer_norm_eps=1e-3, bias=False)
with torch.no_grad():
    for p in layer.parameters():
        p.add_(torch.randn_like(p) * 0.1)
layer.eval()
out["enc_custom.out"] = layer(x).detach()
for k_, t in layer.state_dict().items():
    out[f"enc_custom.state.{k_}"] = t
rms = nn.RMSNorm(8)
with torch.no_grad():
    rms.weight.copy_(wave((8,), 0.9, 1.0))
out["rms.out"] = rms(x).detach()
# Decoder layers (post-norm ReLU and pre-norm GELU): the target attends to itself (causal)
# and to a memory of another length with a padding mask.
memory = wave((2, 4, 8), 0.29, 0.5, f=np.cos)
hidden_memory = torch.tensor([[False, False, False, True], [False, True, False, False]])
for name, kw in [("dec_post", {}), ("dec_pre", dict(norm_first=True, activation="gelu"))]:
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, **kw)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    layer.eval()
    out[f"{name}.out"] = layer(x, memory).detach()
    out[f"{name}.out_masked"] = layer(x, memory, tgt_mask=causal, tgt_is_causal=True,
                                      memory_key_padding_mask=hidden_memory).detach()
    for k_, t in layer.state_dict().items():
        out[f"{name}.state.{k_}"] = t
# A whole nn.Transformer (two encoder layers, one decoder layer), its causal target mask from
# generate_square_subsequent_mask.
model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16,
                       dropout=0.0, batch_first=True)
with torch.no_grad():
    for p in model.parameters():
        p.add_(torch.randn_like(p) * 0.1)
model.eval()
src = wave((2, 4, 8), 0.31, 0.2)
out["transformer.out"] = model(src, x, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5)).detach()
for k_, t in model.state_dict().items():
    out[f"transformer.state.{k_}"] = t
save_file({k_: t.contiguous() for k_, t in out.items()}, "crates/ferrograd/tests/fixtures/torch_attention.safetensors")
print(f"{len(out)} tensors")
