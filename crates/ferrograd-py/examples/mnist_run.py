"""The seed's example/mnist/run.py (tinynn) on ferrograd: the network, model and training loop
exactly as the seed writes them; only the imports and the data loading differ.

    python crates/ferrograd-py/examples/mnist_run.py [--data-dir data/mnist] [--num-ep 20]

With the same seed it prints the same per-epoch accuracy lines as
`cargo run --release --example mnist` (same initial weights, same batches).
"""

import argparse
import sys
import time

import numpy as np

import ferrograd as fg
from ferrograd import Model
from ferrograd.data import BatchIterator, load_mnist, one_hot
from ferrograd.metrics import AccEvaluator
from ferrograd.nn import Dense, Net, ReLU, SoftmaxCrossEntropyLoss
from ferrograd.optim import Adam


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="data/mnist")
    parser.add_argument("--num-ep", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # Data loading (the seed reads mnist.pkl.gz; here the IDX files of scripts/fetch-data.sh).
    try:
        train_x, train_labels = load_mnist(args.data_dir, train=True)
        test_x, test_y = load_mnist(args.data_dir, train=False)
    except OSError as e:
        sys.exit(f"{e}\n(fetch the data with: scripts/fetch-data.sh)")
    train_y = one_hot(train_labels, 10)
    fg.manual_seed(args.seed)
    num_ep = args.num_ep

    # example/mnist/run.py, as the seed writes it.
    net = Net([Dense(784, 400), ReLU(), Dense(400, 100), ReLU(), Dense(100, 10)])
    model = Model(net=net, loss=SoftmaxCrossEntropyLoss(), optimizer=Adam(lr=args.lr))

    iterator = BatchIterator(batch_size=args.batch_size)
    evaluator = AccEvaluator()
    for epoch in range(num_ep):
        start = time.perf_counter()
        for batch in iterator(train_x, train_y):
            # training
            pred = model.forward(batch.inputs)
            loss, grads = model.backward(pred, batch.targets)
            model.apply_grad(grads)
        seconds = time.perf_counter() - start
        # evaluate every epoch
        test_pred = model.forward(test_x)
        test_pred_idx = np.argmax(test_pred, axis=1)
        test_y_idx = np.asarray(test_y)
        res = evaluator.evaluate(test_pred_idx, test_y_idx)
        print("Epoch %d \t %s" % (epoch, res), f"\t {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
