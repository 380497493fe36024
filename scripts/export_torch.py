#!/usr/bin/env python3
"""Saves PyTorch models in the form ferrograd loads directly: each model's state_dict as
safetensors, plus a fixed input and PyTorch's output for it, so that the two can be compared.

    pip install torch safetensors
    python3 scripts/export_torch.py --out-dir torch_models
    cargo run --release --example load_torch -- torch_models

Models (nn.Sequential, so the keys are "0.weight", "0.bias", ...):
  mlp  the seed's MLP: Linear(784, 400), ReLU, Linear(400, 100), ReLU, Linear(100, 10)
  cnn  bench/torch_train.py's CNN (--model cnn): Conv2d(1, 8, 5, padding=2), ReLU, MaxPool2d(2),
       Conv2d(8, 16, 5, padding=2), ReLU, MaxPool2d(2), Flatten, Linear(784, 10)
Each is trained for a few Adam steps on random data first, so that the weights are not just
their initial draws, then put in eval mode.
"""
import argparse
import os

import torch
import torch.nn as nn
from safetensors.torch import save_file


def models():
    mlp = nn.Sequential(
        nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 100), nn.ReLU(), nn.Linear(100, 10))
    cnn = nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    return {"mlp": (mlp, (784,)), "cnn": (cnn, (1, 28, 28))}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default="torch_models")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.manual_seed(args.seed)
    for name, (model, shape) in models().items():
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(5):
            x = torch.rand(32, *shape)
            y = torch.randint(0, 10, (32,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        x = torch.rand(8, *shape)
        with torch.no_grad():
            out = model(x)
        weights = os.path.join(args.out_dir, f"{name}.safetensors")
        save_file(model.state_dict(), weights)
        save_file({"input": x.contiguous(), "output": out.contiguous()},
                  os.path.join(args.out_dir, f"{name}.io.safetensors"))
        print(f"{name}: {', '.join(model.state_dict())} -> {weights}")


if __name__ == "__main__":
    main()
