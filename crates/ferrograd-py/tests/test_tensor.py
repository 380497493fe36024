"""Tensors from Python: creation, dtypes, numpy round trips, operators and indexing."""

import threading

import numpy as np
import pytest

import ferrograd as fg


def test_dtypes_follow_pytorch_for_lists_and_numpy_for_arrays():
    assert fg.tensor([1.0, 2.0]).dtype == fg.float32
    assert fg.tensor([1, 2]).dtype == fg.int64
    assert fg.tensor(np.array([1.0, 2.0])).dtype == fg.float64
    assert fg.tensor(np.array([1.0], dtype=np.float16)).dtype == fg.float32
    assert fg.tensor([1.0], dtype=fg.float64).dtype == fg.float64
    assert fg.tensor([1.0], dtype="float64").dtype == fg.float64
    assert fg.tensor([1.0], dtype=np.float64).dtype == fg.float64
    assert fg.tensor(3.5).shape == ()
    with pytest.raises(TypeError, match="unsupported dtype"):
        fg.tensor([1.0], dtype="complex64")
    with pytest.raises(TypeError):
        fg.tensor(["a", "b"])


def test_numpy_round_trip_keeps_values_shape_and_dtype():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    t = fg.tensor(a)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and len(t) == 2
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    # A non-contiguous view is read in logical order.
    np.testing.assert_array_equal(fg.tensor(a[:, ::2, 1]).numpy(), a[:, ::2, 1])
    assert fg.from_numpy(a.astype(np.float32)).dtype == fg.float32
    assert fg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert fg.tensor([2.5]).item() == 2.5
    with pytest.raises(ValueError, match="only one-element"):
        fg.tensor([1.0, 2.0]).item()


def test_operators_broadcast_as_numpy_and_take_python_numbers():
    a = np.random.default_rng(0).standard_normal((3, 1, 4))
    b = np.random.default_rng(1).standard_normal((2, 1))
    ta, tb = fg.tensor(a), fg.tensor(b)
    for got, want in [
        (ta + tb, a + b),
        (ta - tb, a - b),
        (ta * tb, a * b),
        (ta / (tb + 10), a / (b + 10)),
        (2.0 - ta, 2.0 - a),
        (3 * ta, 3 * a),
        (1 / (ta + 10), 1 / (a + 10)),
        (ta**2, a**2),
        (2.0**ta, 2.0**a),
        (-ta, -a),
        (abs(ta), np.abs(a)),
        (ta > 0, (a > 0).astype(np.float64)),
        (b + ta, b + a),  # numpy on the left: the tensor's reflected operator runs
    ]:
        assert isinstance(got, fg.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    m = np.random.default_rng(2).standard_normal((4, 5))
    np.testing.assert_allclose((fg.tensor(m) @ fg.tensor(m.T)).numpy(), m @ m.T, rtol=1e-12)
    np.testing.assert_allclose((m @ fg.tensor(m.T)).numpy(), m @ m.T, rtol=1e-12)


def test_indexing_matches_numpy():
    a = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    t = fg.tensor(a)
    for key in [
        1,
        -1,
        (1, 2),
        (slice(None), 1),
        (slice(1, None), slice(None, None, 2), -1),
        (Ellipsis, 3),
        (None, 0),
        (slice(None, None, -1),),
        ([2, 0],),
        (slice(None), [3, 3, 0]),
        (0, Ellipsis, None),
    ]:
        np.testing.assert_array_equal(t[key].numpy(), a[key], err_msg=str(key))
    with pytest.raises(IndexError, match="out of bounds"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]
    # Assignment as numpy assigns (PyTorch's setitem): the same keys, a value broadcast.
    for key, value in [
        (0, 1.0),
        ((slice(None), 1), -2.0),
        ((slice(1, None), Ellipsis, 0), 7.0),
        ([2, 0], 3.5),
        ((1, [0, 2]), np.array([[5.0], [6.0]])[0]),
        (np.array([True, False, True]), 9.0),
    ]:
        want, got = t.numpy().copy(), fg.tensor(t.numpy())
        want[key] = value
        got[key] = value
        np.testing.assert_array_equal(got.numpy(), want, err_msg=str(key))


def test_indexing_is_differentiable():
    w = fg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (w[1, ::2] * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 0, 0], [3, 0, 3]])


def test_reductions_and_shapes():
    a = np.random.default_rng(3).standard_normal((2, 3, 4))
    t = fg.tensor(a)
    np.testing.assert_allclose(t.sum().item(), a.sum())
    np.testing.assert_allclose(t.sum(1).numpy(), a.sum(1))
    np.testing.assert_allclose(t.mean((0, 2), keepdim=True).numpy(), a.mean((0, 2), keepdims=True))
    values, idx = t.max(dim=-1)
    np.testing.assert_allclose(values.numpy(), a.max(-1))
    np.testing.assert_array_equal(idx.numpy(), a.argmax(-1))
    np.testing.assert_array_equal(t.argmax().item(), a.argmax())
    np.testing.assert_array_equal(np.argmax(t, axis=1), a.argmax(1))
    assert t.reshape(4, -1).shape == (4, 6)
    assert t.reshape((-1,)).shape == (24,)
    assert t.permute(2, 0, 1).shape == (4, 2, 3)
    assert t.T.shape == (4, 3, 2)
    assert t.unsqueeze(0).squeeze().shape == (2, 3, 4)
    assert t.flatten(1).shape == (2, 12)
    np.testing.assert_allclose(t.softmax(-1).numpy().sum(-1), np.ones((2, 3)), rtol=1e-12)
    np.testing.assert_allclose(fg.cat([t, t], dim=1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_allclose(fg.stack([t, t]).numpy(), np.stack([a, a]))
    with pytest.raises(ValueError, match="reshape"):
        t.reshape(5, -1)


def test_creation_functions():
    assert fg.zeros(2, 3).shape == (2, 3)
    assert fg.ones((4,), dtype=fg.float64).dtype == fg.float64
    assert fg.full([2], 7.0).tolist() == [7.0, 7.0]
    fg.manual_seed(5)
    a = fg.randn(3, 3).numpy()
    fg.manual_seed(5)
    np.testing.assert_array_equal(fg.randn(3, 3).numpy(), a)
    assert fg.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert fg.linspace(0, 1, 3).tolist() == [0.0, 0.5, 1.0]
    assert fg.zeros(2, requires_grad=True).is_leaf


def test_no_grad_scopes_nest_and_restore():
    w = fg.tensor([1.0], requires_grad=True)
    assert fg.is_grad_enabled()
    with fg.no_grad():
        assert not (w * 2).requires_grad
        with fg.enable_grad():
            assert (w * 2).requires_grad
        assert not fg.is_grad_enabled()
    assert fg.is_grad_enabled()
    with pytest.raises(RuntimeError), fg.no_grad():
        raise RuntimeError("leaves the scope")
    assert fg.is_grad_enabled()

    @fg.no_grad()
    def f(x):
        return x * 2

    assert not f(w).requires_grad
    assert (w * 2).requires_grad
    assert not (w * 2).detach().requires_grad


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
