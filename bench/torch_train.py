"""PyTorch eager training of the models of ferrograd's `mnist` and `mnist_cnn` examples.

    python bench/torch_train.py --model mlp|cnn --data data/mnist [--epochs 3] [--train-n N]
        [--threads 2]

The seed's MLP (784-400-100-10, ReLU) or the small CNN (conv 5x5 1->8, ReLU, max-pool 2,
conv 5x5 8->16, ReLU, max-pool 2, dense 784->10); softmax cross-entropy, Adam 1e-3, shuffled
batches of 128. Prints, per epoch, the test accuracy, the mean training loss and the seconds the
training pass took, in the layout of the Rust examples' epoch lines.
"""

import argparse
import time

import numpy as np
import torch
from torch import nn

from _peer import epoch_line, load_mnist, peak_memory


def model(kind):
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 100), nn.ReLU(), nn.Linear(100, 10)
        )
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--train-n", type=int, default=None, help="train on the first N images")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    (x, y), (tx, ty) = load_mnist(args.data, True), load_mnist(args.data, False)
    x, y = torch.from_numpy(x[: args.train_n]), torch.from_numpy(y[: args.train_n])
    tx, ty = torch.from_numpy(tx), torch.from_numpy(ty)
    net = model(args.model)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {len(x)} images")
    for epoch in range(args.epochs):
        order = torch.from_numpy(rng.permutation(len(x)))
        start, loss_sum = time.perf_counter(), 0.0
        net.train()
        for i in range(0, len(x), args.batch_size):
            idx = order[i : i + args.batch_size]
            opt.zero_grad()
            loss = loss_fn(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
        secs = time.perf_counter() - start
        net.eval()
        with torch.no_grad():
            hits = sum(
                (net(tx[i : i + 1000]).argmax(1) == ty[i : i + 1000]).sum().item()
                for i in range(0, len(tx), 1000)
            )
        epoch_line(epoch, hits, len(tx), loss_sum / len(x), secs, len(x))
    peak_memory()


if __name__ == "__main__":
    main()
