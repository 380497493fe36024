"""The static graph from Python (seed 001, simpleflow's names)."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import ferrograd as fg
import ferrograd.graph as sf

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "linear_regression.py"


def test_seed_001_linear_regression_runs_as_written():
    out = subprocess.run([sys.executable, str(EXAMPLE)], check=True, capture_output=True, text=True).stdout.splitlines()
    steps = [line for line in out if line.startswith("step: ")]
    assert len(steps) == 20
    losses = [float(line.split("loss: ")[1].split(",")[0]) for line in steps]
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    w = float(out[-1].split("[[")[1].split("]]")[0])
    assert abs(w - 3.0) < 0.2, out[-1]


def test_gradients_are_nodes_that_run_and_differentiate_again():
    with sf.Graph().as_default() as g:
        x = sf.placeholder("x")
        w = sf.Variable(np.array([2.0]), name="w")
        y = sf.reduce_sum(x * w * w * w)  # Σ x·w³
        (dw,) = sf.gradients(y, [w])  # 3w²·Σx
        (d2w,) = g.gradients(dw, [w])  # 6w·Σx
        sess = sf.Session()
        feed = {x: np.array([1.0, 2.0])}
        value, grad = sess.run([y, dw], feed)
        assert value.item() == 24.0 and grad.tolist() == [36.0]
        assert sess.run(d2w, feed).tolist() == [36.0]
        assert "digraph" in g.to_dot()
    assert sf.get_default_graph() is not g


def test_training_op_updates_variables():
    with sf.Graph().as_default():
        w = sf.Variable([1.0, -1.0], name="w")
        loss = sf.reduce_sum(sf.square(w - 3.0))
        train = sf.GradientDescentOptimizer(0.1).minimize(loss)
        with sf.Session() as sess:
            for _ in range(100):
                sess.run(train)
            np.testing.assert_allclose(sess.run(w), [3.0, 3.0], atol=1e-4)


def test_missing_feed_and_foreign_nodes_are_clear_errors():
    with sf.Graph().as_default():
        x = sf.placeholder("inputs")
        y = x * 2.0
        sess = sf.Session()
        with pytest.raises(ValueError, match="inputs"):
            sess.run(y)
        other = sf.Graph().placeholder("elsewhere")
        with pytest.raises(ValueError, match="another graph"):
            sess.run(y, {other: np.ones(2)})
        with pytest.raises(TypeError):
            x + "a"
        assert sess.run(y, {x: [1.0, 2.0]}).tolist() == [2.0, 4.0]


def test_layer_norm_node_matches_the_tensor_op():
    xs = np.sin(np.arange(12).reshape(3, 4) * 0.7).astype(np.float32)
    w0 = np.array([1.0, 0.5, -2.0, 3.0], dtype=np.float32)
    b0 = np.array([0.1, 0.0, -0.3, 0.2], dtype=np.float32)
    with sf.Graph().as_default():
        x = sf.placeholder("x")
        w, b = sf.Variable(w0, name="w"), sf.Variable(b0, name="b")
        y = x.layer_norm(w, b, eps=1e-5)
        (dw,) = sf.gradients(sf.reduce_sum(y * y), [w])
        got, got_dw = sf.Session().run([y, dw], {x: xs})
    wl = fg.tensor(w0, requires_grad=True)
    eager = fg.tensor(xs).layer_norm(wl, fg.tensor(b0), 1e-5)
    (eager * eager).sum().backward()
    np.testing.assert_array_equal(got, eager.numpy())
    np.testing.assert_array_equal(got_dw, wl.grad.numpy())
