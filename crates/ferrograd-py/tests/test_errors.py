"""Bad input gets a clear Python exception, never a Rust panic, and loses nothing."""

import numpy as np
import pytest

import ferrograd as fg


def test_shape_errors_are_value_errors_naming_the_op_and_shapes():
    a, b = fg.ones(2, 3), fg.ones(4, 5)
    with pytest.raises(ValueError, match=r"matmul.*\[2, 3\].*\[4, 5\]"):
        a @ b
    with pytest.raises(ValueError, match="broadcast"):
        a + fg.ones(4)
    with pytest.raises(ValueError, match="axis"):
        a.sum(5)
    with pytest.raises(ValueError, match="Dense"):
        fg.nn.Dense(3, 2)(fg.ones(4, 5))
    with pytest.raises(ValueError, match="Conv2d"):
        fg.nn.Conv2D(3, 2, 3)(fg.ones(1, 1, 5, 5))
    with pytest.raises(ValueError):
        fg.cat([a, b])


def test_an_integer_tensor_in_a_float_op_is_told_how_to_convert_in_python_terms():
    with pytest.raises(ValueError, match=r"\.float\(\) \(or \.double\(\)\)") as e:
        F = fg.nn.functional
        F.softmax(fg.tensor([1, 2, 3]), dim=0)
    assert "DType" not in str(e.value) and "i64" not in str(e.value)


def test_no_panic_exception_escapes():
    # PanicException derives from BaseException: `except Exception` would miss it.
    for bad in [
        lambda: fg.ones(2, 3).reshape(7),
        lambda: fg.ones(2).transpose(0, 3),
        lambda: fg.nn.LSTM(3, 4)(fg.ones(2, 5)),
        lambda: fg.ones(1, 1, 4, 4).max_pool2d(5),
        lambda: fg.ones(3).narrow(0, 2, 5),
    ]:
        with pytest.raises(Exception) as info:
            bad()
        assert isinstance(info.value, (ValueError, IndexError, TypeError)), repr(info.value)


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(OSError, match="nowhere"):
        fg.data.load_mnist(tmp_path / "nowhere")
    bad = tmp_path / "train-images-idx3-ubyte"
    bad.write_bytes(b"not an idx file")
    with pytest.raises((OSError, ValueError), match="train-"):
        fg.data.load_mnist(tmp_path)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="junk.safetensors"):
        fg.nn.Dense(2, 2).load(junk)


def test_a_failed_call_changes_nothing():
    layer = fg.nn.Dense(2, 2)
    before = layer.weight.numpy().copy()
    with pytest.raises(ValueError):
        layer.load_state_dict({"weight": np.zeros((3, 3), dtype=np.float32)})
    np.testing.assert_array_equal(layer.weight.numpy(), before)
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError):
        (w @ fg.ones(3)).backward()
    (w * w).sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]


def test_type_errors_for_non_numbers():
    with pytest.raises(TypeError):
        fg.ones(2) + "a"
    with pytest.raises(TypeError):
        fg.tensor([1, 2], requires_grad=True)


def test_hostile_sizes_raise_instead_of_aborting():
    # Terabytes asked for: the allocator refuses, the process goes on.
    for make in [
        lambda: fg.zeros(10**12),
        lambda: fg.randn(10**12),
        lambda: fg.full([2**33, 2**33], 1.0),
        lambda: fg.nn.Dense(2**20, 2**20),
    ]:
        with pytest.raises(ValueError, match="allocate|fit in memory"):
            make()
    with pytest.raises(ValueError, match="stride"):
        fg.ones(1, 1, 4, 4).conv2d(fg.ones(1, 1, 3, 3), stride=0)
    # An index outside the axis is an IndexError, as in PyTorch.
    with pytest.raises(IndexError, match="out of range"):
        fg.ones(2, 3).index_select(0, [5])
    with pytest.raises((IndexError, OverflowError)):
        fg.ones(2, 3)[:, 10**20]
    assert fg.ones(2).sum().item() == 2.0


def test_lists_that_nest_without_end_are_value_errors():
    # A list holding itself, lists nested deeper than numpy's 64 dimensions, with and without
    # tensors inside: a ValueError, never a stack overflow.
    selfish = []
    selfish.append(selfish)
    with_tensor = [fg.ones(2)]
    with_tensor.append(with_tensor)
    deep = [1.0]
    for _ in range(100_000):
        deep = [deep]
    deep_tensor = [fg.ones(1)]
    for _ in range(100_000):
        deep_tensor = [deep_tensor]
    for bad in [selfish, with_tensor, deep, deep_tensor]:
        with pytest.raises(ValueError):
            fg.tensor(bad)
    # 64 levels are still a tensor, as in numpy.
    ok = [fg.ones(1)]
    for _ in range(62):
        ok = [ok]
    assert fg.tensor(ok).shape == tuple([1] * 64)


def test_loading_what_is_not_a_regular_file_is_an_error(tmp_path):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    layer = fg.nn.Dense(2, 2)
    for path in ["/dev/zero", str(fifo), str(tmp_path)]:
        with pytest.raises((ValueError, OSError)):
            layer.load(path)


def test_settings_that_would_write_nan_are_value_errors_at_once():
    # Checked where they are given, as PyTorch does: a ValueError, never a PanicException.
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    bad = [
        lambda: fg.optim.Adam([w], betas=(1.0, 1.0)),
        lambda: fg.optim.Adam([w], betas=(-1, 2)),
        lambda: fg.optim.Adam([w], eps=-1.0),
        lambda: fg.optim.SGD([w], momentum=-5),
        lambda: fg.nn.HuberLoss(-1),
        lambda: fg.nn.HuberLoss(float("nan")),
    ]
    for make in bad:
        with pytest.raises(ValueError):
            make()
    opt = fg.optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError):
        opt.lr = float("nan")
    assert opt.lr == 0.1


def test_boolean_masks_select_as_in_numpy():
    data = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    mask = np.array([True, False, True, False])
    x = fg.tensor(data, requires_grad=True)
    for key in [mask, [True, False, True, False]]:
        np.testing.assert_array_equal(x[key].numpy(), data[mask])
    x[mask].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), mask.astype(np.float32))
    m = np.arange(6, dtype=np.float32).reshape(3, 2)
    t = fg.tensor(m)
    for key in [np.array([False, True, True]), (slice(None), np.array([True, False]))]:
        np.testing.assert_array_equal(t[key].numpy(), m[key])
    np.testing.assert_array_equal(t[np.zeros(3, dtype=bool)].numpy(), m[np.zeros(3, dtype=bool)])
    for bad in [np.array([True, False]), [True] * 5, np.ones((3, 2), dtype=bool)]:
        with pytest.raises(IndexError):
            t[bad]


def test_indices_are_integers_inside_the_axis():
    t = fg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(t.index_select(0, [2, 0]).numpy(), [[5, 6], [1, 2]])
    for bad in [[1.9, 0.2], np.array([1.0]), [True, False, True], [-1], [3], [[0, 1]]]:
        with pytest.raises(IndexError):
            t.index_select(0, bad)
    with pytest.raises(IndexError, match="-1"):
        t.index_select(0, [-1])
    with pytest.raises(IndexError):
        t.index_add(0, [0.5], fg.ones(1, 2))
    with pytest.raises(IndexError):
        t[[0.5, 1.0]]


def test_integers_beyond_int64_are_refused():
    with pytest.raises(OverflowError):
        fg.tensor(np.array([2**63], dtype=np.uint64))
    with pytest.raises(OverflowError):
        fg.tensor(2**63)
    assert fg.tensor(np.array([5, 2**63 - 1], dtype=np.uint64)).tolist() == [5, 2**63 - 1]


def test_several_tensors_promote_by_one_rule_in_any_order():
    f32, f64 = fg.tensor([1.5, 2.5]), fg.tensor(np.array([0.25, 0.75]))
    assert f64.dtype == fg.float64
    for x, y in [(f32, f64), (f64, f32)]:
        assert fg.cat([x, y]).dtype == fg.float64
        assert fg.stack([x, y]).dtype == fg.float64
        assert fg.tensor([1.0, 0.0]).where_(x, y).dtype == fg.float64


def test_a_grad_of_the_wrong_shape_is_refused_where_it_is_set():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"\[3\].*\[2\]"):
        w.grad = fg.ones(3)
    assert w.grad is None
    w.grad = np.array([0.5, 0.5])  # converted to the leaf's dtype
    assert w.grad.dtype == w.dtype
    opt = fg.optim.SGD([w], lr=1.0)
    opt.step()
    assert w.tolist() == [0.5, 1.5]


def test_seed_gradients_of_the_wrong_shape_name_both_shapes():
    x = fg.ones(3, requires_grad=True)
    y = x * 2
    with pytest.raises(ValueError, match=r"grad_outputs\[0\] has shape \[4\], outputs\[0\] \[3\]"):
        fg.grad([y], [x], grad_outputs=[fg.ones(4)])
    with pytest.raises(ValueError, match=r"grad_outputs\[0\] has shape \[4\], outputs\[0\] \[3\]"):
        fg.grad(y, x, grad_outputs=fg.ones(4))
    with pytest.raises(ValueError, match=r"seed gradient has shape \[4\], the output \[3\]"):
        y.backward(fg.ones(4))
    g = fg.grad([y], [x], grad_outputs=[fg.tensor([1.0, 2.0, 3.0])])
    assert g[0].numpy().tolist() == [2.0, 4.0, 6.0]


def test_a_gradient_reaching_an_op_without_a_derivative_is_a_value_error_naming_it():
    x = fg.tensor([1.0, -2.0], requires_grad=True)
    with pytest.raises(ValueError, match="sign has no derivative"):
        (x * x.sign()).sum().backward()
    with pytest.raises(ValueError, match="argmax has no derivative"):
        fg.grad((x * x.argmax(0).float()).sum(), [x])


def _random_key(rng, shape):
    """A numpy-style key for an array of `shape`: integers (negative too), slices with any
    step, boolean masks, integer arrays, None and Ellipsis, some of them out of range."""
    parts = []
    for size in shape[: rng.integers(0, len(shape) + 1)]:
        kind = rng.integers(0, 6)
        if kind == 0:
            parts.append(int(rng.integers(-size - 1, size + 1)))
        elif kind == 1:
            lo, hi = rng.integers(-size - 2, size + 3, size=2)
            step = int(rng.choice([-3, -2, -1, 1, 2, 3]))
            parts.append(slice(int(lo), int(hi), step))
        elif kind == 2:
            # Of the axis' length: numpy lets a mask of another length broadcast against an
            # axis of 1, which PyTorch (and ferrograd) refuse; masks of the wrong length are
            # tested on their own above.
            parts.append(rng.random(size) < 0.5)
        elif kind == 3:
            parts.append(rng.integers(-size - 1, size + 1, size=int(rng.integers(0, 4))))
        elif kind == 4:
            parts.append(None)
        else:
            seen = any(p is Ellipsis for p in parts)
            parts.append(slice(None) if seen else Ellipsis)
    return tuple(parts) if len(parts) != 1 or rng.integers(0, 2) else parts[0]


def test_indexing_agrees_with_numpy_on_generated_keys():
    # Where numpy answers, ferrograd gives the same values and the gradient of a sum of the
    # selection (how often each element was picked); where numpy raises IndexError, so does
    # ferrograd. Keys that numpy itself reads differently (several advanced indices, which it
    # broadcasts together) are left out.
    rng = np.random.default_rng(0)
    tried = agreed = refused = 0
    for _ in range(3000):
        shape = tuple(int(s) for s in rng.integers(1, 5, size=rng.integers(1, 4)))
        data = rng.standard_normal(shape).astype(np.float32)
        key = _random_key(rng, shape)
        parts = key if isinstance(key, tuple) else (key,)
        if sum(isinstance(p, np.ndarray) for p in parts) > 1:
            continue
        tried += 1
        try:
            want = data[key]
        except IndexError:
            with pytest.raises(IndexError):
                fg.tensor(data)[key]
            refused += 1
            continue
        x = fg.tensor(data, requires_grad=True)
        got = x[key]
        np.testing.assert_array_equal(got.numpy(), want, err_msg=repr(key))
        if want.size:
            got.sum().backward()
            counts = np.zeros(shape, np.float32)
            np.add.at(counts, key, 1.0)
            np.testing.assert_array_equal(x.grad.numpy(), counts, err_msg=repr(key))
        agreed += 1
    assert tried > 2000 and agreed > 1000 and refused > 100, (tried, agreed, refused)


def test_messages_name_the_users_call_and_what_was_wrong():
    with pytest.raises(RuntimeError, match="multinomial: the distribution is empty"):
        fg.multinomial(fg.ones(0), 1)
    with pytest.raises(RuntimeError, match="do not fit in memory"):
        fg.multinomial(fg.ones(3), 2**62, replacement=True)
    with pytest.raises(RuntimeError, match="cannot draw 4 samples from 3 categories"):
        fg.multinomial(fg.ones(3), 4)
    w = fg.ones(2, requires_grad=True)
    opt = fg.optim.Adam([w])
    w.grad = fg.ones(2)
    opt.step()
    saved = opt.state_dict()
    saved["state"][0]["step"] = "ten"
    with pytest.raises(TypeError, match='"step" of parameter 0 must be a whole number'):
        opt.load_state_dict(saved)
    data = fg.utils.data.TensorDataset(fg.ones(4))
    with pytest.raises(TypeError, match="generator must be a ferrograd Generator"):
        fg.utils.data.DataLoader(data, shuffle=True, generator=5)
    loader = fg.utils.data.DataLoader(data, batch_size=2, shuffle=True, generator=fg.Generator().manual_seed(1))
    assert len(list(loader)) == 2
