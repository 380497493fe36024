"""The core's other ops from Python, against numpy and finite differences."""

import numpy as np

import ferrograd as fg


def naive_conv2d(x, w, stride, padding):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out


def test_conv2d_matches_the_definition_and_gradchecks():
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3, 7, 5)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    got = fg.tensor(x).conv2d(fg.tensor(w), fg.tensor(b), stride=2, padding=1).numpy()
    want = naive_conv2d(x, w, 2, 1) + b[None, :, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert fg.gradcheck(lambda a, k: a.conv2d(k, stride=2, padding=1), [fg.tensor(x), fg.tensor(w)])
    assert fg.gradgradcheck(lambda a, k: a.conv2d(k, padding=1).tanh(), [fg.tensor(x[:1, :, :4, :4]), fg.tensor(w)])


def test_where_pad_index_add_and_pooling():
    a = fg.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    y = fg.where(a > 0, a * 10, a * 0.5)
    assert y.tolist() == [10.0, -1.0, 30.0]
    y.sum().backward()
    assert a.grad.tolist() == [10.0, 0.5, 10.0]
    p = fg.tensor([[1.0, 2.0]]).pad([(1, 0), (0, 2)], value=-1.0)
    np.testing.assert_array_equal(p.numpy(), [[-1, -1, -1, -1], [1, 2, -1, -1]])
    acc = fg.zeros(3).index_add(0, [0, 2, 0], fg.tensor([1.0, 2.0, 3.0]))
    assert acc.tolist() == [4.0, 0.0, 2.0]
    x = fg.tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    np.testing.assert_array_equal(x.max_pool2d(2).numpy(), [[[[5, 7], [13, 15]]]])
    np.testing.assert_array_equal(x.avg_pool2d(2).numpy(), [[[[2.5, 4.5], [10.5, 12.5]]]])
    assert fg.allclose(fg.tensor([1.0]), fg.tensor([1.0 + 1e-9]))


def test_batch_norm_statistics():
    x = np.random.default_rng(1).standard_normal((8, 3))
    y, mean, var = fg.tensor(x).batch_norm(fg.ones(3, dtype=fg.float64), fg.zeros(3, dtype=fg.float64))
    np.testing.assert_allclose(mean.numpy(), x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), x.var(0), rtol=1e-12)
    np.testing.assert_allclose(y.numpy(), (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), rtol=1e-10)
