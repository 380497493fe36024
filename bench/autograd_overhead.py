"""Per-op cost of eager autograd driven from Python, in ferrograd or in PyTorch: one script, so
the work, the op counts and the output lines are the same by construction.

  chain : y = relu(y * w_i + b_i), 3 recorded ops per step, then y.sum().backward()
  mlp   : a micrograd-style scalar MLP (every weight its own tensor), summed squared error

Usage: python bench/autograd_overhead.py [--framework ferrograd|torch] [--ops 100000]
       [--shape ""] [--mode chain|mlp|both] [--threads 1]
"""

import argparse
import importlib
import statistics
import time

import numpy as np

fg = None  # the framework under test: ferrograd or torch, which share these names


def parse_shape(s):
    s = s.strip()
    return tuple(int(x) for x in s.split(",")) if s else ()


def full(shape, value, grad):
    return fg.tensor(np.full(shape, value, dtype=np.float32), requires_grad=grad)


def timed(forward, grad):
    """(ops, forward seconds, backward seconds) of `forward()`, which returns its result and
    the ops it recorded; backward (of the result's sum) only when recording."""
    with fg.enable_grad() if grad else fg.no_grad():
        t0 = time.perf_counter()
        out, ops = forward()
        tf = time.perf_counter() - t0
        tb = float("nan")
        if grad:
            out = out.sum()
            t1 = time.perf_counter()
            out.backward()
            tb = time.perf_counter() - t1
    return ops, tf, tb


def run_chain(n_ops, shape, grad=True):
    steps = n_ops // 3
    k = 64  # pool of leaf parameters reused round-robin
    ws = [full(shape, 1.0 + 1e-4 * i, grad) for i in range(k)]
    bs = [full(shape, 1e-3 * i, grad) for i in range(k)]
    x = full(shape, 0.5, grad)

    def forward():
        y = x
        for i in range(steps):
            y = (y * ws[i % k] + bs[i % k]).relu()
        return y, steps * 3

    return timed(forward, grad)


def run_mlp(sizes, n_samples, shape, grad=True):
    rng = np.random.default_rng(0)

    def uniform():
        return rng.uniform(-1, 1, shape).astype(np.float32)

    layers = []
    for nin, nout in zip(sizes[:-1], sizes[1:]):
        w = [[fg.tensor(uniform(), requires_grad=grad) for _ in range(nin)] for _ in range(nout)]
        b = [full(shape, 0.0, grad) for _ in range(nout)]
        layers.append((w, b))
    xs = [[fg.tensor(uniform()) for _ in range(sizes[0])] for _ in range(n_samples)]
    ys = [fg.tensor(uniform()) for _ in range(n_samples)]

    def forward():
        ops, loss = 0, None
        for x, yt in zip(xs, ys):
            h = x
            for li, (w, b) in enumerate(layers):
                last = li == len(layers) - 1
                nh = []
                for wrow, bj in zip(w, b):
                    act = bj
                    for wi, hi in zip(wrow, h):
                        act = act + wi * hi
                        ops += 2
                    if not last:
                        act = act.relu()
                        ops += 1
                    nh.append(act)
                h = nh
            d = h[0] - yt
            sq = d * d
            loss = sq if loss is None else loss + sq
            ops += 2 + (0 if loss is sq else 1)
        return loss, ops

    return timed(forward, grad)


def report(label, results):
    ops = results[0][0]
    f = [r[1] / r[0] * 1e6 for r in results]
    b = [r[2] / r[0] * 1e6 for r in results]
    fm, bm = statistics.median(f), statistics.median(b)
    print(
        f"RESULT {label} ops={ops} forward_us_per_op: median={fm:.3f} min={min(f):.3f} | "
        f"backward_us_per_op: median={bm:.3f} min={min(b):.3f} | total_us_per_op median={fm + bm:.3f} "
        f"(n={len(results)})"
    )


def report_nograd(label, results):
    ops = results[0][0]
    f = [r[1] / r[0] * 1e6 for r in results]
    print(
        f"RESULT {label} ops={ops} no_grad_forward_us_per_op: median={statistics.median(f):.3f} "
        f"min={min(f):.3f} (n={len(results)})"
    )


def main():
    global fg
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", default="ferrograd", choices=["ferrograd", "torch"])
    ap.add_argument("--threads", type=int, default=1, help="PyTorch's intra-op threads")
    ap.add_argument("--ops", type=int, default=100000)
    ap.add_argument("--shape", default="")
    ap.add_argument("--mode", default="both", choices=["chain", "mlp", "both"])
    ap.add_argument("--mlp-sizes", default="8,32,32,1")
    ap.add_argument("--mlp-samples", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    shape = parse_shape(args.shape)
    sizes = [int(s) for s in args.mlp_sizes.split(",")]
    fg = importlib.import_module(args.framework)
    if args.framework == "torch":
        fg.set_num_threads(args.threads)
    print(f"{args.framework} {getattr(fg, '__version__', '')} (Python) shape={list(shape)}")
    tag = f"shape={list(shape)}"
    if args.mode in ("chain", "both"):
        run_chain(3000, shape)  # warm-up
        report(f"autograd chain {tag}", [run_chain(args.ops, shape) for _ in range(args.repeats)])
        report_nograd(f"autograd chain {tag}", [run_chain(args.ops, shape, grad=False) for _ in range(args.repeats)])
    if args.mode in ("mlp", "both"):
        run_mlp(sizes, 2, shape)  # warm-up
        report(
            f"autograd scalar-mlp {args.mlp_sizes} x{args.mlp_samples} samples {tag}",
            [run_mlp(sizes, args.mlp_samples, shape) for _ in range(args.repeats)],
        )
        report_nograd(
            f"autograd scalar-mlp {args.mlp_sizes} x{args.mlp_samples} samples {tag}",
            [run_mlp(sizes, args.mlp_samples, shape, grad=False) for _ in range(args.repeats)],
        )


if __name__ == "__main__":
    main()
