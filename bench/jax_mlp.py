"""JAX (jit) training of the seed's MLP, the work of ferrograd's `mnist` example.

    python bench/jax_mlp.py --data data/mnist [--epochs 3] [--seed 0]

784-400-100-10 with ReLU, softmax cross-entropy, Adam 1e-3 (written out: JAX has no optimizer
of its own), shuffled batches of 128; the whole training step is one jitted function. Prints
the epoch lines of the Rust example (the first epoch includes compilation).
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from _peer import epoch_line, load_mnist, peak_memory

SIZES = [784, 400, 100, 10]


def init(key):
    """Xavier-uniform weights and zero biases, as the example's Dense layers."""
    params = []
    for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
        key, sub = jax.random.split(key)
        bound = (6.0 / (n_in + n_out)) ** 0.5
        params.append((jax.random.uniform(sub, (n_in, n_out), jnp.float32, -bound, bound),
                       jnp.zeros(n_out, jnp.float32)))
    return params


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    logp = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@jax.jit
def train_step(params, m, v, t, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    step = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - step * m / (jnp.sqrt(v) + eps),
                                    params, m, v)
    return params, m, v, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    (x, y), (tx, ty) = load_mnist(args.data, True), load_mnist(args.data, False)
    params = init(jax.random.PRNGKey(args.seed))
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    rng, t = np.random.default_rng(args.seed), 0
    predict = jax.jit(forward)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {len(x)} images")
    for epoch in range(args.epochs):
        order = rng.permutation(len(x))
        start, loss_sum = time.perf_counter(), 0.0
        for i in range(0, len(x), args.batch_size):
            idx = order[i : i + args.batch_size]
            t += 1
            params, m, v, loss = train_step(params, m, v, t, x[idx], y[idx])
            loss_sum += float(loss) * len(idx)
        secs = time.perf_counter() - start
        hits = int((np.asarray(predict(params, tx)).argmax(1) == ty).sum())
        epoch_line(epoch, hits, len(tx), loss_sum / len(x), secs, len(x))
    peak_memory()


if __name__ == "__main__":
    main()
