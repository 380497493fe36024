"""PyTorch's forward + backward time for the layer cases of ferrograd's `bench_layers` example.

    python bench/torch_layers.py [--threads 2] [--repeats 20] [CASE ...]

A case times `(layer(x) * ones).sum().backward()`: the gradients of the input and of every
parameter. Prints one RESULT line per case, as `bench_layers` does.
"""

import argparse

import torch
from torch import nn

from _peer import result, time_repeats


class SelfAttention(nn.Module):
    """Causal attention with q = k = v = x, a contiguous `[N, H, T, E]` of the GPT's shape
    (whose q, k, v are strided views of one projection)."""

    def forward(self, x):
        return nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)


class Gram(nn.Module):
    """`x @ xᵀ` over a batch of small matrices (attention with small heads, per-sample
    gradients)."""

    def forward(self, x):
        return x @ x.transpose(-2, -1)


# name: (layer, input shape); the same table as crates/ferrograd/examples/bench_layers.rs.
CASES = {
    "conv3x3_64": (lambda: nn.Conv2d(64, 64, 3, padding=1), (32, 64, 32, 32)),
    "conv5x5_lenet1": (lambda: nn.Conv2d(1, 8, 5, padding=2), (128, 1, 28, 28)),
    "conv5x5_lenet2": (lambda: nn.Conv2d(8, 16, 5, padding=2), (128, 8, 14, 14)),
    "convT_dcgan": (lambda: nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1), (64, 128, 7, 7)),
    "maxpool2": (lambda: nn.MaxPool2d(2, 2), (128, 16, 28, 28)),
    "bn2d": (lambda: nn.BatchNorm2d(64), (32, 64, 32, 32)),
    "lstm": (lambda: nn.LSTM(32, 128, batch_first=True), (64, 50, 32)),
    "gru": (lambda: nn.GRU(32, 128, batch_first=True), (64, 50, 32)),
    "attention_gpt": (SelfAttention, (12, 4, 64, 32)),
    "bmm_4": (Gram, (65536, 4, 4)),
    "bmm_16": (Gram, (8192, 16, 16)),
    "bmm_64": (Gram, (1024, 64, 64)),
}


def time_case(name, repeats):
    make, shape = CASES[name]
    torch.manual_seed(0)
    layer = make().train()
    x = torch.randn(*shape, requires_grad=True)

    def step():
        out = layer(x)
        y = out[0] if isinstance(out, tuple) else out  # recurrent layers: the sequence
        (y * torch.ones_like(y)).sum().backward()

    result("torch_layers", name, shape, time_repeats(step, repeats))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    # Checked after parsing: Python before 3.12 rejects an empty list for `nargs="*"` with
    # `choices`, so naming no case would fail.
    ap.add_argument("cases", nargs="*", help=f"cases, all when none: {', '.join(CASES)}")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.cases or CASES:
        time_case(name, args.repeats)


if __name__ == "__main__":
    main()
