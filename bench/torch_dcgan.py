"""PyTorch eager training of the DCGAN of ferrograd's `dcgan` example, for its seconds per 100
steps.

    python bench/torch_dcgan.py --data data/mnist [--steps 200] [--threads 2]

Generator: 100 normal numbers -> dense to 128x7x7, batch norm, ReLU -> transposed conv 4x4
stride 2 to 64x14x14, batch norm, ReLU -> transposed conv to 1x28x28, tanh. Discriminator:
conv 4x4 stride 2 to 64x14x14, leaky ReLU 0.2 -> conv to 128x7x7, batch norm, leaky ReLU ->
dense to one logit. Sigmoid cross-entropy on logits, Adam 2e-4 with betas (0.5, 0.999), batch
64; each step updates the discriminator on real and generated images, then the generator.
Prints the seconds per 100 steps of each window of 100 (the first includes warm-up) in the
layout of the Rust example's epoch line.
"""

import argparse
import time

import torch
from torch import nn

from _peer import load_mnist


def generator():
    return nn.Sequential(
        nn.Linear(100, 128 * 7 * 7), nn.BatchNorm1d(128 * 7 * 7), nn.ReLU(),
        nn.Unflatten(1, (128, 7, 7)),
        nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.ConvTranspose2d(64, 1, 4, stride=2, padding=1), nn.Tanh(),
    )


def discriminator():
    return nn.Sequential(
        nn.Conv2d(1, 64, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
        nn.Conv2d(64, 128, 4, stride=2, padding=1), nn.BatchNorm2d(128), nn.LeakyReLU(0.2),
        nn.Flatten(), nn.Linear(128 * 7 * 7, 1),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images, _ = load_mnist(args.data, True)
    images = torch.from_numpy(images * 2 - 1).reshape(-1, 1, 28, 28)
    g, d = generator(), discriminator()
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    order = torch.randperm(len(images))
    start, sum_d, sum_g = time.perf_counter(), 0.0, 0.0
    for step in range(args.steps):
        real = images[order[(step * 64) % (len(images) - 64):][:64]]
        fake = g(torch.randn(64, 100))
        loss_d = bce(d(real), ones) + bce(d(fake.detach()), zeros)
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = bce(d(fake), ones)  # only the generator's optimizer steps on this
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        sum_d, sum_g = sum_d + loss_d.item(), sum_g + loss_g.item()
        if (step + 1) % 100 == 0:
            secs = time.perf_counter() - start
            print(
                f"Steps {step - 98}-{step + 1}  loss D {sum_d / 100:.4f}  loss G "
                f"{sum_g / 100:.4f}  {secs:.1f} s ({secs:.2f} s per 100 steps)",
                flush=True,
            )
            start, sum_d, sum_g = time.perf_counter(), 0.0, 0.0


if __name__ == "__main__":
    main()
