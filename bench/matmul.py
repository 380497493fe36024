"""f32 matmul GFLOP/s in numpy (its OpenBLAS) or PyTorch, on the shapes of ferrograd's
`bench_kernels` example: squares 128 to 2048 and the products of the seed's MLP at batch 128
(forward, and backward's weight and input gradients, which read transposed views).

    python bench/matmul.py [--backend numpy|torch] [--threads 2]

Set the thread count before the library loads: OPENBLAS_NUM_THREADS for numpy (this script
sets it from --threads), torch.set_num_threads for PyTorch. In-process comparisons with
OpenBLAS, call by call, are `cargo run --release --example bench_matmul_blas -- LIB`.
"""

import argparse
import os
import time


def best_seconds(f, budget=0.3, samples=5):
    """The best per-call time over `samples` runs of about `budget / samples` seconds each."""
    f()
    reps = 1
    while True:
        start = time.perf_counter()
        for _ in range(reps):
            f()
        if time.perf_counter() - start > budget / samples / 4:
            break
        reps *= 2
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(reps):
            f()
        times.append((time.perf_counter() - start) / reps)
    return min(times)


def cases(rng, lib):
    """(label, a, b) with b possibly a transposed view, as bench_kernels builds them."""
    def randn(*shape):
        return lib(rng.standard_normal(shape).astype("float32"))

    for n in (128, 256, 512, 1024, 2048):
        yield f"{n:>4}x{n}   @ {n}x{n}", randn(n, n), randn(n, n)
    x, h1, h2 = randn(128, 784), randn(128, 400), randn(128, 100)
    w1, w2, w3 = randn(784, 400), randn(400, 100), randn(100, 10)
    yield "fwd1 128x784 @ 784x400", x, w1
    yield "fwd2 128x400 @ 400x100", h1, w2
    yield "fwd3 128x100 @ 100x10 ", h2, w3
    yield "dW1  784x128 @ 128x400 (x^T view)", x.T, h1
    yield "dW2  400x128 @ 128x100 (h1^T view)", h1.T, h2
    yield "dX2  128x100 @ 100x400 (W2^T view)", h2, w2.T
    yield "dX1  128x400 @ 400x784 (W1^T view)", h1, w1.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    import numpy as np

    if args.backend == "torch":
        import torch

        torch.set_num_threads(args.threads)
        lib, version = torch.from_numpy, f"torch {torch.__version__}"
    else:
        lib, version = (lambda a: a), f"numpy {np.__version__}"
    print(f"f32 matmul (GFLOP/s, best of 5), {version}, {args.threads} threads")
    for label, a, b in cases(np.random.default_rng(0), lib):
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        s = best_seconds(lambda: a @ b)
        print(f"  {label}: {2 * m * k * n / s / 1e9:7.1f}", flush=True)


if __name__ == "__main__":
    main()
