"""``fg.func`` in forward mode and ``vmap``, against ``torch.func``'s float64 values
(fixtures/torch_func.json, made by fixtures/torch_func.py with PyTorch 2.15) and against
reverse mode and loops."""

import json
import pathlib
import sys

import numpy as np
import pytest

import ferrograd as fg
import ferrograd.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).parent / "fixtures"))
from torch_func_inputs import inputs  # noqa: E402

REF = json.loads((pathlib.Path(__file__).parent / "fixtures" / "torch_func.json").read_text())
x, t, w1, b1, w2, images, labels, conv_w, dense_w = inputs(fg)
func = fg.func


def mlp(x, w1, b1, w2):
    return F.linear(fg.tanh(F.linear(x, w1, b1)), w2).softmax(-1)


def scalar(x):
    return (x.sin() * x.roll(1, 0)).sum() + (x**3).sum()


def cnn_loss(conv_w, dense_w, image, label):
    h = F.max_pool2d(F.conv2d(image.unsqueeze(0), conv_w, padding=1).relu(), 2)
    logits = F.linear(h.flatten(1), dense_w)
    return F.cross_entropy(logits, label.unsqueeze(0))


def close(got, name, *index):
    want = REF[name]
    for i in index:
        want = want[i]
    np.testing.assert_allclose(got.numpy(), np.array(want), rtol=1e-10, atol=1e-12)


def test_jvp_of_an_mlp_is_torch_funcs():
    out, tangent = func.jvp(lambda x: mlp(x, w1, b1, w2), (x,), (t,))
    close(out, "jvp_out")
    close(tangent, "jvp_tangent")


def test_jacobians_by_either_mode_are_torch_funcs():
    close(func.jacrev(mlp, argnums=1)(x, w1, b1, w2), "jacrev")
    dx, db = func.jacfwd(mlp, argnums=(0, 2))(x, w1, b1, w2)
    close(dx, "jacfwd", 0)
    close(db, "jacfwd", 1)
    np.testing.assert_allclose(
        func.jacfwd(mlp, argnums=1)(x, w1, b1, w2).numpy(), func.jacrev(mlp, argnums=1)(x, w1, b1, w2).numpy()
    )


def test_hessian_and_hvp_by_forward_over_reverse_are_torch_funcs():
    close(func.hessian(scalar)(t[0]), "hessian")
    _, hv = func.jvp(func.grad(scalar), (t[0],), (x[0],))
    close(hv, "hvp")


def test_per_sample_gradients_of_a_cnn_by_vmap_of_grad_are_torch_funcs():
    per_sample = func.vmap(func.grad(cnn_loss, argnums=(0, 1)), in_dims=(None, None, 0, 0))
    dconv, ddense = per_sample(conv_w, dense_w, images, labels)
    assert tuple(dconv.shape) == (4, 2, 1, 3, 3) and tuple(ddense.shape) == (4, 3, 18)
    close(dconv, "per_sample", 0)
    close(ddense, "per_sample", 1)


def test_vmap_follows_in_dims_out_dims_and_plain_arguments():
    xs = fg.randn(3, 5, dtype=fg.float64)
    rows = func.vmap(lambda r, k: (r * k).sum(), in_dims=(1, None))(xs, 2.0)
    np.testing.assert_allclose(rows.numpy(), (xs * 2.0).sum(0).numpy())
    both = func.vmap(lambda r: (r.exp(), r.sum()), out_dims=(1, 0))(xs)
    assert tuple(both[0].shape) == (5, 3) and tuple(both[1].shape) == (3,)
    nested = func.vmap(func.vmap(lambda a, b: a * b, in_dims=(0, None)), in_dims=(None, 0))
    outer = nested(fg.arange(3, dtype=fg.float64), fg.arange(4, dtype=fg.float64))
    np.testing.assert_array_equal(outer.numpy(), np.outer(np.arange(4), np.arange(3)))
    with pytest.raises(ValueError, match="in_dims"):
        func.vmap(lambda a: a, in_dims=(0, 0))(xs)
    with pytest.raises(ValueError, match="only tensors map"):
        func.vmap(lambda a, k: a * k, in_dims=(0, 0))(xs, 2.0)
    with pytest.raises(NotImplementedError, match="different"):
        func.vmap(lambda a: a, randomness="different")
    with pytest.raises(fg.OpError, match="different sizes"):
        func.vmap(lambda a, b: a + b)(xs, fg.randn(4, 5, dtype=fg.float64))


def test_linearize_runs_the_function_once():
    calls = []

    def f(a):
        calls.append(1)
        return a.exp() * a

    out, jvp_fn = func.linearize(f, x)
    for k in range(3):
        v = t * (k + 1)
        _, expected = func.jvp(f, (x,), (v,))
        np.testing.assert_allclose(jvp_fn(v).numpy(), expected.numpy(), rtol=1e-14)
    assert len(calls) == 1 + 3
    np.testing.assert_allclose(out.numpy(), f(x).numpy())


def test_forward_mode_names_what_it_cannot_pass_and_keeps_has_aux():
    out, tangent, aux = func.jvp(lambda a: (a.sin(), "aux"), (x,), (t,), has_aux=True)
    assert aux == "aux"
    np.testing.assert_allclose(tangent.numpy(), (x.cos() * t).numpy())
    with pytest.raises(RuntimeError, match="2 tangents for 1 primals"):
        func.jvp(lambda a: a, (x,), (t, t))
    with pytest.raises(fg.OpError, match="tangent 0 is"):
        func.jvp(lambda a: a, (x,), (t[0],))

    class Doubled(fg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    with pytest.raises(fg.OpError, match="forward mode: these ops have no rule"):
        func.jvp(Doubled.apply, (x,), (t,))
