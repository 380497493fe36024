#!/usr/bin/env python3
"""Writes the ONNX fixtures that tests/io/onnx.rs imports: small versions of the peer scripts'
MLP, CNN and GPT, exported by PyTorch's own `torch.onnx.export` with a free batch axis, each
with an input and PyTorch's output at two batch sizes; and the peer `torch_cnn.py`'s MNIST CNN
as PyTorch initializes it, which `examples/onnx_finetune.rs` trains. Run once with PyTorch (and onnxscript)
installed; the files are checked in:

    python scripts/make-torch-onnx-fixtures.py crates/ferrograd/tests/fixtures/onnx
"""

import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 24), nn.Linear(24, 10)

    def forward(self, x):
        return F.log_softmax(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), dim=1)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 8, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        split = lambda z: z.view(b, t, self.heads, c // self.heads).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=20, width=16, heads=2, context=8):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.block, self.ln = Block(width, heads), nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        return self.head(self.ln(self.block(self.wte(ids) + self.wpe(pos))))


def write(out, name, model, example, other):
    model.eval()
    path = out / f"torch_{name}.onnx"
    torch.onnx.export(
        model,
        (example,),
        str(path),
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        dynamo=False,
    )
    with torch.no_grad():
        io = {"input": example, "output": model(example), "input_other": other, "output_other": model(other)}
    save_file({k: v.contiguous() for k, v in io.items()}, str(out / f"torch_{name}.io.safetensors"))
    print(f"wrote {path}")


def main():
    out = pathlib.Path(sys.argv[1])
    torch.manual_seed(0)
    write(out, "mlp", Mlp(), torch.randn(2, 16), torch.randn(5, 16))
    cnn = Cnn()
    with torch.no_grad():  # batch statistics of their own, so that eval mode reads them
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 1.5)
    write(out, "cnn", cnn, torch.randn(2, 1, 8, 8), torch.randn(3, 1, 8, 8))
    write(out, "gpt", Gpt(), torch.randint(0, 20, (2, 8)), torch.randint(0, 20, (3, 8)))
    mnist_cnn = nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 8, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10),
    )
    write(out, "mnist_cnn", mnist_cnn, torch.rand(2, 784), torch.rand(3, 784))


if __name__ == "__main__":
    main()
