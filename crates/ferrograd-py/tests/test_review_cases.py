"""Cases where a binding goes wrong quietly: aliasing, threads, numpy's scalars and
reductions, several outputs, freezing, the tinynn extras."""

import threading
import warnings

import numpy as np
import pytest

import ferrograd as fg


def test_in_place_ops_on_the_same_object():
    x = fg.tensor([1.0, 2.0])
    x += x
    x *= x
    assert x.tolist() == [4.0, 16.0]
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    with fg.no_grad():
        w += w
    assert w.tolist() == [2.0, 4.0] and w.is_leaf
    t = fg.tensor([3.0])
    t.data = t
    assert t.tolist() == [3.0]


def test_ops_from_several_threads_at_once():
    fg.manual_seed(0)
    w = fg.tensor(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32), requires_grad=True)
    x = fg.randn(256, 256)
    want = (x @ w).sum().item()
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                y = (x @ w).sum()
                y.backward()
                results.append(y.item())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 80
    assert all(r == want for r in results)

    def graph_in_thread():
        import ferrograd.graph as sf

        x = sf.placeholder("x")
        results.append(sf.Session().run(x * 2.0, {x: [1.0]}).tolist())

    t = threading.Thread(target=graph_in_thread)
    t.start()
    t.join()
    assert results[-1] == [2.0]


def test_numpy_scalars_and_zero_d_arrays_stay_zero_d():
    assert fg.tensor(np.array(3.0)).shape == ()
    assert fg.tensor(np.float32(2.0)).dtype == fg.float32
    assert fg.tensor(np.float64(2.0)).dtype == fg.float64
    assert (fg.tensor(2.0) * np.float32(3.0)).shape == ()
    a = np.arange(60.0).reshape(3, 4, 5)
    t = fg.tensor(a)
    for i in np.random.default_rng(0).permutation(3):
        np.testing.assert_array_equal(t[i].numpy(), a[i])
    assert t[fg.tensor(1)].shape == (4, 5)
    assert t[[]].shape == (0, 4, 5)
    np.testing.assert_array_equal(t[::-2, 1:0:-1].numpy(), a[::-2, 1:0:-1])
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., ...]
    with pytest.raises(IndexError, match="one list"):
        t[[0, 1], [0, 1]]


def test_numpy_reductions_on_tensors():
    a = np.arange(6.0).reshape(2, 3)
    t = fg.tensor(a)
    assert isinstance(np.sum(t), fg.Tensor) and np.sum(t).item() == 15.0
    np.testing.assert_array_equal(np.max(t, axis=1).numpy(), [2.0, 5.0])
    np.testing.assert_array_equal(np.mean(t, axis=0, keepdims=True).numpy(), [[1.5, 2.5, 3.5]])
    values, idx = t.max(dim=1)
    assert idx.tolist() == [2, 2]
    assert (t == None) is False and (t != None) is True  # noqa: E711


def test_integer_tensors_compare_with_float_arrays_exactly():
    labels = fg.tensor([0, 1, 2])
    assert (labels == np.array([0.5, 1.0, 2.0])).tolist() == [0.0, 1.0, 1.0]


def test_tensors_inside_lists_stay_on_the_graph():
    a = fg.tensor(2.0, requires_grad=True)
    b = fg.tensor(3.0, requires_grad=True)
    s = fg.tensor([1.0, 1.0]) * [a, b]
    s.sum().backward()
    assert (a.grad.item(), b.grad.item()) == (1.0, 1.0)
    ga, gb = fg.grad([a * a, a * b], [a, b])
    assert (ga.item(), gb.item()) == (2 * 2.0 + 3.0, 2.0)


def test_grad_outputs_stay_differentiable_for_hessian_vector_products():
    x = fg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    v = fg.tensor(np.array([1.0, 0.0]), requires_grad=True)
    y = (x * x * x).sum()
    (g,) = fg.grad(y, [x], create_graph=True)  # 3x²
    (hv,) = fg.grad(g, [x], grad_outputs=v, create_graph=True)  # 6x · v
    assert hv.tolist() == [6.0, 0.0]
    (dv,) = fg.grad(hv.sum(), [v])  # d/dv Σ 6x·v = 6x
    assert dv.tolist() == [6.0, 12.0]


def test_custom_gradient_warns_when_read_variables_get_no_gradient():
    w = fg.tensor(2.0, requires_grad=True)

    @fg.custom_gradient
    def scaled(x):
        return x * w, lambda up: up * w

    x = fg.tensor(3.0, requires_grad=True)
    with pytest.warns(UserWarning, match="variables"):
        scaled(x).backward()
    assert x.grad.item() == 2.0


def test_requires_grad_false_freezes_a_parameter():
    fg.manual_seed(0)
    layer = fg.nn.Dense(2, 1)
    before = layer.weight.numpy().copy()
    layer.weight.requires_grad_(False)
    assert not layer.weight.requires_grad and layer.weight.is_leaf
    opt = fg.optim.SGD(layer.parameters(), lr=0.5)
    layer(fg.ones(1, 2)).sum().backward()
    opt.step()
    np.testing.assert_array_equal(layer.weight.numpy(), before)
    layer.weight.requires_grad_(True)
    layer(fg.ones(1, 2)).sum().backward()
    opt.step()
    assert not np.array_equal(layer.weight.numpy(), before)
    with pytest.raises(RuntimeError, match="leaf"):
        (layer.weight * 2).requires_grad_()


def test_model_extras_and_grad_mode_helpers():
    fg.manual_seed(1)
    net = fg.nn.Net([fg.nn.Dense(3, 8), fg.nn.Dropout(0.5), fg.nn.Dense(8, 2)])
    model = fg.Model(net, fg.nn.MSELoss(), fg.optim.SGD(lr=0.1))
    x, y = np.ones((4, 3), dtype=np.float32), np.zeros((4, 2), dtype=np.float32)
    losses = [model.train_step(x, y) for _ in range(30)]
    assert losses[-1] < losses[0]
    model.set_phase("TEST")
    np.testing.assert_array_equal(model.forward(x).numpy(), model.predict(x).numpy())
    assert not model.predict(x).requires_grad
    with pytest.raises(ValueError, match="TRAIN or TEST"):
        model.set_phase("sideways")
    w = fg.tensor([1.0], requires_grad=True)
    with fg.set_grad_enabled(False):
        assert not (w * 2).requires_grad
    assert fg.is_grad_enabled()

    @fg.no_grad
    def bare(t):
        return t * 2

    assert not bare(w).requires_grad
    names = {}
    exec("from ferrograd import *", names)
    assert "sum" not in names and "tensor" in names


def test_batch_iterator_checks_at_once_and_yields_named_tuples():
    it = fg.data.BatchIterator(batch_size=2, shuffle=False)
    with pytest.raises(ValueError, match="3 inputs but 2 targets"):
        it([1, 2, 3], [1, 2])
    batches = list(it([[1.0], [2.0], [3.0]], [0, 1, 2]))
    x, y = batches[0]
    assert x.tolist() == [[1.0], [2.0]] and y.tolist() == [0, 1]


def test_more_hostile_sizes_raise():
    for make in [
        lambda: fg.linspace(0, 1, 10**13),
        lambda: fg.arange(0, 1e15),
        lambda: fg.ones(1, 1).pad([(0, 10**7), (0, 10**7)]),
        lambda: fg.ones(1).expand(10**6, 10**6) * 2,
        lambda: fg.ones(1).expand(10**6, 10**6).numpy(),
        lambda: fg.ones(10**6, 1) @ fg.ones(1, 10**6),
    ]:
        with pytest.raises(ValueError, match="allocate|fits in memory|fit in memory"):
            make()
