"""``torch.func`` on the seed's MLP, the work of ferrograd's ``bench_func`` example.

    python bench/torch_func.py [--threads 2] [--repeats 20]

The MLP (784-400-100-10, ReLU, cross-entropy) at batch 128 in float32: the forward pass, a
``jvp`` along random parameter tangents, a gradient, an ``hvp`` by reverse over reverse and by
forward over reverse, and the per-example gradients (flattened and concatenated) by
``vmap(grad)`` and by a loop over the examples. Prints RESULT lines, as ``bench_func`` does.
"""

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.func import grad, jvp, vjp, vmap

from _peer import time_repeats


def loss(p, x, y):
    h = F.linear(x, p[0], p[1]).relu()
    h = F.linear(h, p[2], p[3]).relu()
    return F.cross_entropy(F.linear(h, p[4], p[5]), y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    shapes = [(400, 784), (400,), (100, 400), (100,), (10, 100), (10,)]
    params = tuple(torch.randn(s, generator=g) * 0.05 for s in shapes)
    tangents = tuple(torch.randn(s, generator=g) for s in shapes)
    x = torch.randn(128, 784, generator=g)
    y = torch.tensor([i * 7 % 10 for i in range(128)])
    f = lambda *p: loss(p, x, y)  # noqa: E731

    def hvp_rev():
        _, pull = vjp(lambda *p: grad(f, argnums=tuple(range(6)))(*p), *params)
        return pull(tangents)

    def hvp_fwd():
        return jvp(grad(f, argnums=tuple(range(6))), params, tangents)

    def flat(p, xi, yi):
        gs = grad(lambda *q: loss(q, xi.unsqueeze(0), yi.unsqueeze(0)), argnums=tuple(range(6)))(*p)
        return torch.cat([t.reshape(-1) for t in gs])

    per_example = vmap(flat, in_dims=(None, 0, 0))

    def loop():
        return torch.stack([flat(params, x[i], y[i]) for i in range(128)])

    cases = [
        ("forward", lambda: torch.no_grad()(f)(*params), args.repeats),
        ("jvp", lambda: jvp(f, params, tangents), args.repeats),
        ("grad", lambda: grad(f, argnums=tuple(range(6)))(*params), args.repeats),
        ("hvp_reverse_over_reverse", hvp_rev, args.repeats // 2),
        ("hvp_forward_over_reverse", hvp_fwd, args.repeats // 2),
        ("per_example_vmap", lambda: per_example(params, x, y), 5),
        ("per_example_loop", loop, 3),
    ]
    for name, step, n in cases:
        ms = time_repeats(step, n, warmup=1)
        print(f"RESULT torch {name} ms: min={min(ms):.3f} median={statistics.median(ms):.3f} (n={n})", flush=True)


if __name__ == "__main__":
    main()
