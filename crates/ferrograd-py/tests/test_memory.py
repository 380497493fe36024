"""No leaks: graphs are freed with their last tensor, over many steps."""

import resource

import numpy as np

import ferrograd as fg


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_ten_thousand_training_steps_hold_no_memory():
    fg.manual_seed(0)
    net = fg.nn.Net([fg.nn.Dense(32, 64), fg.nn.ReLU(), fg.nn.Dense(64, 4)])
    model = fg.Model(net, fg.nn.SoftmaxCrossEntropyLoss(), fg.optim.Adam(lr=1e-3))
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    y = fg.data.one_hot(np.arange(16) % 4, 4)
    w = fg.tensor(np.ones(8), requires_grad=True)
    baseline_nodes = fg.live_nodes()

    def step():
        loss, grads = model.backward(model.forward(x), y)
        model.apply_grad(grads)
        w.grad = None
        (w * w).sum().backward()

    for _ in range(1000):  # warm up the allocator
        step()
    start = rss_mib()
    for _ in range(10_000):
        step()
    grown = rss_mib() - start
    assert grown < 8, f"RSS grew by {grown:.1f} MiB over 10,000 steps"
    assert fg.live_nodes() <= baseline_nodes + 8
