"""The seed's MNIST training (tinynn: MLP 784-400-100-10, ReLU, softmax cross-entropy averaged
over the batch, Adam lr 1e-3 with bias correction, batch 128, Xavier-uniform weights, zero
biases, shuffled every epoch) written directly in numpy, as a reference for ferrograd.

    python scripts/tinynn_reference.py --seeds 0 1 2      # test accuracy after one epoch
    python scripts/tinynn_reference.py --seeds 0 --dump /tmp/ref
        # also writes the initial parameters, the epoch's sample order and the loss of every
        # step, for `cargo run --release --example mnist_reference -- /tmp/ref`

Reads data/mnist (scripts/fetch-data.sh). Needs numpy.
"""
import argparse
import os
import struct

import numpy as np


def idx(path):
    raw = open(path, "rb").read()
    rank = struct.unpack(">I", raw[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * rank, raw[4 : 4 + 4 * rank])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(data):
    x = lambda f: idx(os.path.join(data, f)).reshape(-1, 784).astype(np.float32) / 255
    y = lambda f: idx(os.path.join(data, f)).astype(np.int64)
    return (x("train-images-idx3-ubyte"), y("train-labels-idx1-ubyte"),
            x("t10k-images-idx3-ubyte"), y("t10k-labels-idx1-ubyte"))


def run(seed, data, dump):
    tx, ty, vx, vy = data
    rng = np.random.RandomState(seed)

    def xavier(fan_in, fan_out):
        a = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, (fan_in, fan_out)).astype(np.float32)

    params = [xavier(784, 400), np.zeros(400, np.float32), xavier(400, 100),
              np.zeros(100, np.float32), xavier(100, 10), np.zeros(10, np.float32)]
    order = rng.permutation(len(tx))
    if dump:
        os.makedirs(dump, exist_ok=True)
        for i, p in enumerate(params):
            p.astype("<f4").tofile(os.path.join(dump, f"param{i}.f32"))
        order.astype("<u4").tofile(os.path.join(dump, "order.u32"))
    onehot = np.eye(10, dtype=np.float32)[ty]
    m, v, t, losses = [0.0] * 6, [0.0] * 6, 0, []
    for start in range(0, len(tx), 128):
        batch = order[start : start + 128]
        x, y, n = tx[batch], onehot[batch], len(batch)
        z1 = x @ params[0] + params[1]
        h1 = np.maximum(z1, 0)
        z2 = h1 @ params[2] + params[3]
        h2 = np.maximum(z2, 0)
        logits = h2 @ params[4] + params[5]
        e = np.exp(logits - logits.max(1, keepdims=True))
        p = e / e.sum(1, keepdims=True)
        losses.append(float(-(y * np.log(p)).sum() / n))
        g = (p - y) / n
        grads = [None] * 6
        grads[4], grads[5] = h2.T @ g, g.sum(0)
        g = (g @ params[4].T) * (z2 > 0)
        grads[2], grads[3] = h1.T @ g, g.sum(0)
        g = (g @ params[2].T) * (z1 > 0)
        grads[0], grads[1] = x.T @ g, g.sum(0)
        t += 1
        for i in range(6):
            m[i] = 0.9 * m[i] + 0.1 * grads[i]
            v[i] = 0.999 * v[i] + 0.001 * grads[i] ** 2
            m_hat, v_hat = m[i] / (1 - 0.9**t), v[i] / (1 - 0.999**t)
            params[i] -= 1e-3 * m_hat / (np.sqrt(v_hat) + 1e-8)
    if dump:
        np.array(losses, "<f8").tofile(os.path.join(dump, "losses.f64"))
    h = np.maximum(vx @ params[0] + params[1], 0)
    h = np.maximum(h @ params[2] + params[3], 0)
    return float(((h @ params[4] + params[5]).argmax(1) == vy).mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--dump", default=None)
    args = ap.parse_args()
    data = load(args.data)
    accs = []
    for seed in args.seeds:
        accs.append(run(seed, data, args.dump if seed == args.seeds[0] else None))
        print(f"seed {seed}: test accuracy after epoch 1 {accs[-1]:.4f}", flush=True)
    if len(accs) > 1:
        print(f"mean {np.mean(accs):.4f}, sd {np.std(accs):.4f}, "
              f"{sum(a >= 0.965 for a in accs)} of {len(accs)} at or above 0.965")


if __name__ == "__main__":
    main()
