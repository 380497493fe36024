#!/usr/bin/env python3
"""Saves a PyTorch model in the form ferrograd loads directly: its state_dict as safetensors,
plus a fixed input and PyTorch's output for it, so that the two can be compared.

    pip install torch safetensors
    python3 scripts/export_torch.py --out torch_mlp.safetensors

The model is the seed's MLP (784-400-100-10, ReLU) as nn.Sequential, so its keys are
"0.weight", "0.bias", "2.weight", ... In Rust:

    let net = Net::new(vec![
        Box::new(Dense::new(784, 400)), Box::new(ReLU::new()),
        Box::new(Dense::new(400, 100)), Box::new(ReLU::new()),
        Box::new(Dense::new(100, 10)),
    ]);
    net.load_safetensors("torch_mlp.safetensors")?;      // extra keys: use the _partial form
    let (tensors, _) = ferrograd::io::load_tensors(Path::new("torch_mlp.io.safetensors"))?;
    // Layer::forward(&net, &tensors["input"], Mode::Eval) ≈ tensors["output"]
"""
import argparse

import torch
from safetensors.torch import save_file


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="torch_mlp.safetensors")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 400), torch.nn.ReLU(),
        torch.nn.Linear(400, 100), torch.nn.ReLU(),
        torch.nn.Linear(100, 10),
    ).eval()
    save_file(model.state_dict(), args.out)
    x = torch.rand(8, 784)
    with torch.no_grad():
        y = model(x)
    io_path = args.out.replace(".safetensors", "") + ".io.safetensors"
    save_file({"input": x.contiguous(), "output": y.contiguous()}, io_path)
    print(f"wrote {args.out} ({', '.join(model.state_dict())}) and {io_path}")


if __name__ == "__main__":
    main()
