"""More of PyTorch's tensor functions, activations, distances and recurrent cells, against
PyTorch's float64 values and gradients (fixtures/torch_ops.json, made by fixtures/torch_ops.py:
each case is one expression that both frameworks evaluate)."""

import json
import pathlib
import sys

import numpy as np
import pytest

import ferrograd as fg
import ferrograd.nn as nn
import ferrograd.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).parent / "fixtures"))
REF = json.loads((pathlib.Path(__file__).parent / "fixtures" / "torch_ops.json").read_text())


# PyTorch computes these derivatives with a float32 constant (1/6): its float64 gradients
# are 3e-8 off the exact ones.
LOOSER = {"hardsigmoid": 1e-7, "hardswish": 1e-7, "hardsigmoid_edge": 1e-7, "hardswish_edge": 1e-7}


def inputs():
    """The named inputs of torch_ops.py, made by ferrograd."""
    from torch_ops_inputs import inputs as make

    return make(fg)


def compare(got, want, what):
    if isinstance(want, list):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), what
        for g, w in zip(got, want):
            compare(g, w, what)
        return
    assert tuple(got.shape) == tuple(want["shape"]), f"{what}: shape {tuple(got.shape)} against {want['shape']}"
    np.testing.assert_allclose(
        np.asarray(got.numpy(), dtype=np.float64).ravel(),
        np.array(want["values"], dtype=np.float64),
        rtol=1e-10,
        atol=1e-12,
        err_msg=what,
    )


def check_gradients(result, named, want, what):
    parts = list(result) if isinstance(result, (tuple, list)) else [result]
    weighted = [
        (t * fg.tensor(np.cos(np.arange(t.numel())).reshape(tuple(t.shape)))).sum()
        for t in parts
        if t.is_floating_point() and t.requires_grad
    ]
    if not weighted:
        # Not tracked: PyTorch's gradients must then be zero (round, trunc, sign).
        assert not any(np.any(g) for g in want.values()), f"{what}: PyTorch's result has gradients"
        return
    sum(weighted[1:], weighted[0]).backward()
    for name, t in named.items():
        if name in want:
            assert t.grad is not None, f"{what}: no gradient for {name}"
            rtol = LOOSER.get(what.split(":")[0], 1e-9)
            np.testing.assert_allclose(
                t.grad.numpy().ravel(), want[name], rtol=rtol, atol=1e-12, err_msg=f"{what}: d/d{name}"
            )
        elif t.grad is not None:
            assert not np.abs(t.grad.numpy()).any(), f"{what}: a gradient for {name}, PyTorch's has none"


@pytest.mark.parametrize("name", sorted(REF["cases"]))
def test_values_and_gradients_as_pytorchs(name):
    case = REF["cases"][name]
    named = inputs()
    result = eval(case["expr"], {"torch": fg, "F": F, "nn": nn, **named})  # noqa: S307 (the fixture's expressions)
    compare(result, case["result"], f"{name}: {case['expr']}")
    check_gradients(result, named, case["grads"], f"{name}: {case['expr']}")


@pytest.mark.parametrize("name", sorted(REF["cells"]))
def test_recurrent_cells_as_pytorchs(name):
    case = REF["cells"][name]
    named = inputs()
    cell = getattr(nn, case["class"])(4, 3, **case["kwargs"]).double()
    assert sorted(cell.state_dict()) == sorted(case["state"])
    cell.load_state_dict({k: fg.tensor(np.array(v)) for k, v in case["state"].items()})
    h = fg.tensor(np.cos(np.arange(9).reshape(3, 3)) * 0.5)
    result = cell(named["x"], (h, h * 0.5)) if case["class"] == "LSTMCell" else cell(named["x"], h)
    compare(result, case["result"], name)
    check_gradients(result, named, case["grads"], name)
    compare(cell(named["x"][0]), case["unbatched"], f"{name}, unbatched")


def test_in_place_forms_write_into_the_tensor():
    x = fg.tensor([[1.0, -2.0], [3.0, 0.5]])
    assert x.exp_() is x
    np.testing.assert_allclose(x.numpy(), np.exp([[1.0, -2.0], [3.0, 0.5]]), rtol=1e-6)
    z = fg.zeros(2, 3)
    z.scatter_(1, fg.tensor([[2], [0]]), 5.0).scatter_add_(1, fg.tensor([[2], [2]]), fg.ones(2, 1))
    np.testing.assert_array_equal(z.numpy(), [[0, 0, 6], [5, 0, 1]])
    m = fg.ones(2, 2)
    m.masked_fill_(fg.tensor([[True, False], [False, True]]), 0.0)
    np.testing.assert_array_equal(m.numpy(), [[0, 1], [1, 0]])
    # As PyTorch: an integer tensor cannot take a float result, a trainable leaf is updated
    # only under no_grad.
    with pytest.raises(RuntimeError, match="can't be cast"):
        fg.tensor([1, 2]).exp_()
    w = fg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        w.sqrt_()
    with fg.no_grad():
        w.mul_(4.0).sqrt_()
    np.testing.assert_array_equal(w.numpy(), [2.0, 2.0])


def test_scatter_to_repeated_positions_keeps_the_last_write_and_its_true_gradient():
    # PyTorch picks one of the writes (its documentation: arbitrarily) and passes each
    # position's gradient to every write of it (its documentation: "the gradient will be
    # incorrect"). Here the last write wins, and the overwritten ones get no gradient: the
    # derivative of the value given, as finite differences measure it.
    x = fg.tensor(np.arange(12.0).reshape(3, 4) / 7, requires_grad=True)
    src = fg.tensor(np.cos(np.arange(9.0)).reshape(3, 3), requires_grad=True)
    idx = fg.tensor([[0, 0, 1], [2, 2, 2], [3, 1, 3]])
    y = x.scatter(1, idx, src)
    want = x.numpy().copy()
    for i in range(3):
        for j in range(3):  # in order: the last write stays
            want[i, idx.numpy()[i, j]] = src.numpy()[i, j]
    np.testing.assert_array_equal(y.numpy(), want)
    y.sum().backward()
    np.testing.assert_array_equal(src.grad.numpy(), [[0, 1, 1], [0, 0, 1], [0, 1, 1]])
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 1, 1], [1, 1, 0, 1], [1, 0, 1, 0]])
    f = lambda x, src: (x.scatter(1, idx, src) ** 2).sum()  # noqa: E731
    assert fg.gradcheck(f, [x.detach().requires_grad_(), src.detach().requires_grad_()])
    assert fg.gradgradcheck(f, [x.detach().requires_grad_(), src.detach().requires_grad_()])


def test_cosine_similarity_below_eps_differentiates_the_formula():
    # With norms below eps the formula's denominators are the constant eps: its gradient is
    # that of x1·x2 / eps² (PyTorch's still differentiates the norms it clamped).
    x1 = fg.tensor([[0.3, -0.4], [0.2, 0.1]], dtype=fg.float64, requires_grad=True)
    x2 = fg.tensor([[0.5, 0.1], [2.0, -1.0]], dtype=fg.float64, requires_grad=True)
    c = F.cosine_similarity(x1, x2, dim=1, eps=1.0)
    c.sum().backward()
    np.testing.assert_allclose(x1.grad.numpy()[0], x2.numpy()[0], rtol=1e-12)  # both below eps
    n2 = np.linalg.norm(x2.numpy()[1])  # x2[1] is above eps: only x1's norm is clamped
    np.testing.assert_allclose(x1.grad.numpy()[1], x2.numpy()[1] / n2, rtol=1e-12)
    f = lambda a, b: F.cosine_similarity(a, b, dim=1, eps=1.0)  # noqa: E731
    assert fg.gradcheck(f, [x1.detach().requires_grad_(), x2.detach().requires_grad_()])


def test_errors_as_pytorchs():
    x = fg.zeros(2, 3)
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.scatter(1, fg.tensor([[3]]), 1.0)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.scatter_add(1, fg.tensor([0, 1]), fg.ones(2))
    with pytest.raises(RuntimeError, match="dtype int64"):
        x.scatter(1, fg.tensor([[0.0]]), 1.0)
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(x, 1)
    with pytest.raises(TypeError, match="missing required argument 'upscale_factor'"):
        nn.PixelShuffle()
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNNCell(2, 3, nonlinearity="gelu")
    with pytest.raises(RuntimeError, match="same number of dims"):
        x.movedim((0, 1), 0)


def test_more_errors_as_pytorchs():
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        fg.tensordot(fg.ones(2, 3), fg.ones(3, 2), ([0, 1], [0, 1]))
    with pytest.raises(RuntimeError, match="tensordot expects dims between 0 and 2"):
        fg.tensordot(fg.ones(2, 3), fg.ones(3, 2), -1)
    with pytest.raises(RuntimeError, match="expected a matrix"):
        fg.trace(fg.ones(2, 2, 2))
    with pytest.raises(RuntimeError, match="Expected 0D or 1D tensor"):
        fg.meshgrid(fg.ones(2, 2), fg.ones(3))
    with pytest.raises(TypeError, match="tuple"):
        nn.LSTMCell(3, 2)(fg.ones(2, 3), fg.ones(2, 2))
    with pytest.raises(RuntimeError, match="expected 2-D tensors"):
        fg.addmm(fg.ones(2), fg.ones(2, 3, 4), fg.ones(4, 2))
    with pytest.raises(RuntimeError, match="non-negative"):
        fg.ones(3).diff(n=-1)
    with pytest.raises(RuntimeError, match="scalars"):
        F.glu(fg.tensor(1.0))
    with pytest.raises(RuntimeError, match="at least 3 dimensions"):
        F.pixel_shuffle(fg.ones(4, 4), 2)
    with pytest.raises(TypeError, match="positional arguments"):
        nn.Hardtanh(-2.0, 2.0, False, 5)
    with pytest.raises(RuntimeError, match="src.dtype"):
        fg.zeros(2, 3).scatter(1, fg.tensor([[0]]), fg.ones(1, 1, dtype=fg.float64))
    assert nn.Hardtanh(-2.0, 2.0, False).min_val == -2.0
    assert nn.LSTMCell(3, 2, dtype=fg.float64).weight_ih.dtype == fg.float64
    # Round-trips that must be exact.
    assert fg.tensor([2**53 + 1]).remainder(2).tolist() == [1] and fg.tensor([7]).round().tolist() == [7]


def test_manual_seed_fixes_dropout_masks_as_pytorchs():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.TransformerEncoderLayer(8, 2, 16, 0.3, batch_first=True))
    x = fg.ones(2, 3, 8)

    def run(seed):
        fg.manual_seed(seed)
        return model(x).numpy()

    first = run(3)
    np.testing.assert_array_equal(run(3), first)
    assert not np.array_equal(run(4), first)


def test_a_seed_between_a_checkpointed_forward_and_its_backward():
    from ferrograd.utils.checkpoint import checkpoint

    fg.manual_seed(0)
    drop = nn.Dropout(0.5)
    x = fg.ones(4, 4, requires_grad=True)
    y = checkpoint(lambda t: drop(t), x)
    fg.manual_seed(5)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())
