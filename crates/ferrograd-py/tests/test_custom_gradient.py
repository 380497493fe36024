"""Seed 003's tf.custom_gradient examples, run as written with `tf.` replaced by `fg.`."""

import math

import numpy as np
import pytest

import ferrograd as fg


def test_log1pexp_is_stable_where_the_naive_gradient_is_nan():
    def naive(x):
        return fg.math.log(1 + fg.exp(x))

    @fg.custom_gradient
    def log1pexp(x):
        e = fg.exp(x)

        def grad(upstream):
            return upstream * (1 - 1 / (1 + e))

        return fg.math.log(1 + e), grad

    x = fg.constant(100.0)
    with fg.GradientTape() as tape:
        tape.watch(x)
        y = naive(x)
    assert math.isnan(tape.gradient(y, x).item())
    x = fg.constant(100.0)
    with fg.GradientTape() as tape:
        tape.watch(x)
        y = log1pexp(x)
    assert tape.gradient(y, x).item() == 1.0


def test_several_inputs():
    @fg.custom_gradient
    def bar(x, y):
        def grad(upstream):
            dz_dx = y
            dz_dy = x
            return upstream * dz_dx, upstream * dz_dy

        z = x * y
        return z, grad

    x = fg.constant(2.0, dtype=fg.float32)
    y = fg.constant(3.0, dtype=fg.float32)
    with fg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        tape.watch(y)
        z = bar(x, y)
    assert z.item() == 6.0 and z.dtype == fg.float32
    assert tape.gradient(z, x).item() == 3.0
    assert tape.gradient(z, y).item() == 2.0


def test_variables_read_by_the_function():
    weights = fg.Variable(fg.ones([2]))

    @fg.custom_gradient
    def linear_poly(x):
        poly = weights[1] * x + weights[0]

        def grad_fn(dpoly, variables):
            grad_xs = dpoly * weights[1]
            grad_vars = []
            assert variables is not None
            assert len(variables) == 1
            assert variables[0] is weights
            dy_dw = dpoly * fg.stack([x**1, x**0])
            grad_vars.append(fg.reduce_sum(fg.reshape(dy_dw, [2, -1]), axis=1))
            return grad_xs, grad_vars

        return poly, grad_fn

    x = fg.constant([1.0, 2.0, 3.0])
    with fg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        poly = linear_poly(x)
    assert poly.tolist() == [2.0, 3.0, 4.0]
    assert tape.gradient(poly, x).tolist() == [1.0, 1.0, 1.0]
    assert tape.gradient(poly, weights).tolist() == [6.0, 3.0]


def test_stop_gradient_around_an_op_without_derivative():
    x = fg.constant([0.3, 0.5], dtype=fg.float32)

    @fg.custom_gradient
    def test_func_with_stop_grad(x):
        @fg.function
        def _inner_func():
            return fg.stop_gradient(fg.random.shuffle(x))

        res = _inner_func()

        def grad(upstream):
            return upstream

        return res, grad

    with fg.GradientTape() as g:
        g.watch(x)
        res = test_func_with_stop_grad(x)
    assert g.gradient(res, x).tolist() == [1.0, 1.0]
    # Without stop_gradient, backward through the shuffle names the op.
    y = fg.tensor([0.3, 0.5], requires_grad=True)
    with pytest.raises(ValueError, match="shuffle has no derivative"):
        fg.random.shuffle(y).sum().backward()


def test_nested_custom_gradient_sets_the_second_derivative():
    # f(x) = x³ with f' given by a custom function whose own gradient is 6x.
    @fg.custom_gradient
    def cube(x):
        @fg.custom_gradient
        def first(x_):
            return 3 * x_ * x_, lambda dd: dd * 6 * x_

        return x * x * x, lambda dy: dy * first(x)

    x = fg.tensor(2.0, dtype=fg.float64, requires_grad=True)
    (d1,) = fg.grad(cube(x), [x], create_graph=True)
    assert d1.item() == 12.0
    assert fg.grad(d1, x)[0].item() == 12.0


def test_errors_from_the_user_function_reach_python_unchanged():
    @fg.custom_gradient
    def raises_in_rule(x):
        def grad(up):
            raise KeyError("from the rule")

        return x * 2, grad

    t = fg.tensor([1.0], requires_grad=True)
    with pytest.raises(KeyError, match="from the rule"):
        raises_in_rule(t).sum().backward()

    @fg.custom_gradient
    def wrong_count(x):
        return x * 2, lambda up: (up, up)

    with pytest.raises(ValueError, match="2 gradients for 1 inputs"):
        wrong_count(t).sum().backward()

    @fg.custom_gradient
    def not_a_pair(x):
        return x

    with pytest.raises(TypeError, match="must return"):
        not_a_pair(t)
    # The graph still works after the failures.
    (t * 3).sum().backward()
    assert t.grad.tolist() == [3.0]


def test_seed_004_linear_model():
    # Seed 004: Linear(2, 1) with weights 1/in_size, one step of w -= grad on the MSE.
    weight = fg.tensor(np.ones((1, 2)) / 2, requires_grad=True)
    bias = fg.tensor(np.zeros(1), requires_grad=True)
    feature = fg.tensor(np.array([28.1, 58.0]))
    label = fg.tensor(np.array([165.0]))

    def model(x):
        return x @ weight.T + bias

    def mse(p, y):
        return ((y - p) ** 2).mean()

    loss = mse(model(feature), label)
    loss.backward()
    with fg.no_grad():
        weight -= weight.grad
        bias -= bias.grad
    prediction = model(feature)
    assert round(prediction.item(), 3) == 1013352.429
    assert mse(prediction, label).item() == pytest.approx(1026548766283.6302, rel=1e-13)


def test_custom_gradient_warns_when_read_variables_get_no_gradient():
    w = fg.tensor(2.0, requires_grad=True)

    @fg.custom_gradient
    def scaled(x):
        return x * w, lambda up: up * w

    x = fg.tensor(3.0, requires_grad=True)
    with pytest.warns(UserWarning, match="variables"):
        scaled(x).backward()
    assert x.grad.item() == 2.0
