"""Reverse mode from Python: the seed 002 network's numbers, .grad semantics, higher order,
and gradients against finite differences."""

import numpy as np
import pytest

import ferrograd as fg


def seed_002_network(skip=True, detach_skip=False):
    x = fg.tensor(2.0, requires_grad=True)
    w = fg.tensor(1.0, requires_grad=True)
    b = fg.tensor(-1.0, requires_grad=True)
    v = fg.tensor(3.0, requires_grad=True)
    p = w * x
    z = p + b
    h = z.relu()
    q = v * h
    if skip:
        y = q + (p.detach() if detach_skip else p)
    else:
        y = q
    loss = (y - 1) ** 2 / 2
    return loss, dict(x=x, w=w, b=b, v=v)


def test_seed_002_numbers():
    loss, leaves = seed_002_network()
    assert loss.item() == 8.0
    grads = loss.backward()
    want = dict(x=16.0, w=32.0, b=12.0, v=4.0)
    assert {k: t.grad.item() for k, t in leaves.items()} == want
    assert {k: grads[t].item() for k, t in leaves.items()} == want
    # A second backward returns the same fresh gradients (seed 002), and adds them to .grad,
    # which accumulates until zero_grad() or `w.grad = None`, as PyTorch's does.
    again = loss.backward()
    assert {k: again[t].item() for k, t in leaves.items()} == want
    assert {k: t.grad.item() for k, t in leaves.items()} == {k: 2 * v for k, v in want.items()}
    for t in leaves.values():
        t.grad = None
    loss.backward()
    assert {k: t.grad.item() for k, t in leaves.items()} == want


def test_seed_002_detached_skip_and_no_skip():
    loss, leaves = seed_002_network(detach_skip=True)
    loss.backward()
    assert loss.item() == 8.0 and leaves["w"].grad.item() == 24.0
    loss, leaves = seed_002_network(skip=False)
    loss.backward()
    assert loss.item() == 2.0
    assert [leaves[k].grad.item() for k in "wbv"] == [12.0, 6.0, 2.0]


def test_repeated_operand_r_times_r():
    r = fg.tensor(3.0, requires_grad=True)
    (r * r).backward()
    assert r.grad.item() == 6.0


def test_grad_accumulates_in_the_leaves_a_backward_reaches():
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([3.0], requires_grad=True)
    first = (a * a).sum().backward()
    assert a.grad.tolist() == [2.0, 4.0] and b.grad is None
    second = (a * b).sum().backward()
    assert second[a].tolist() == [3.0, 3.0] and first[a].tolist() == [2.0, 4.0]  # fresh
    assert a.grad.tolist() == [5.0, 7.0] and b.grad.tolist() == [3.0]  # accumulated
    (b * 2).sum().backward()
    assert a.grad.tolist() == [5.0, 7.0]  # untouched: this backward did not reach a
    assert b.grad.tolist() == [5.0]
    a.grad = None
    assert a.grad is None


def test_backward_of_a_non_scalar_needs_the_upstream_gradient():
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="one-element result"):
        (a * 2).backward()
    (a * a).backward(fg.tensor([1.0, 10.0]))
    assert a.grad.tolist() == [2.0, 40.0]
    with pytest.raises(ValueError, match="not tracked"):
        fg.tensor([1.0]).sum().backward()


def test_grad_function_and_higher_order():
    x = fg.tensor(2.0, dtype=fg.float64, requires_grad=True)
    y = x * x * x
    (dy,) = fg.grad(y, [x], create_graph=True)
    assert dy.item() == 12.0
    d2 = fg.grad(dy, x)
    assert isinstance(d2, tuple) and d2[0].item() == 12.0
    g = y.backward(create_graph=True)
    assert g[x].requires_grad


def test_grad_returns_a_tuple_and_refuses_unused_inputs_as_torch_autograd_grad():
    x = fg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    out = (x * x).sum()
    # One tensor in, a tuple out: [0] is the gradient, never its first row.
    g = fg.autograd.grad(out, x, retain_graph=True)
    assert isinstance(g, tuple) and len(g) == 1 and g[0].tolist() == [[2.0, 4.0], [6.0, 8.0]]
    assert fg.grad(out, x)[0].shape == (2, 2)
    unused = fg.tensor(1.0, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"do not depend on inputs\[1\].*allow_unused"):
        fg.autograd.grad(out, [x, unused])
    gx, gu = fg.autograd.grad(out, [x, unused], allow_unused=True)
    assert gu is None and gx.shape == (2, 2)
    _, zero = fg.autograd.grad(out, [x, unused], materialize_grads=True)
    assert zero.item() == 0.0
    with pytest.raises(ValueError, match="allow_unused"):
        fg.autograd.grad(out, [x, unused], allow_unused=False, materialize_grads=True)
    # TensorFlow's tape keeps giving zeros for a source the target does not reach.
    with fg.GradientTape() as tape:
        tape.watch(x)
        y = (x * 2.0).sum()
    gx, gu = tape.gradient(y, [x, unused])
    assert gu.item() == 0.0 and gx.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    # A zero gradient through a used input is a gradient, not "unused".
    assert fg.autograd.grad((x * 0.0).sum(), x)[0].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(RuntimeError, match="does not require grad"):
        fg.autograd.grad(out, [fg.ones(2)])
    # backward under its torch.autograd name, with grad_tensors.
    x.grad = None
    fg.autograd.backward(x * 3.0, grad_tensors=fg.ones(2, 2))
    assert x.grad.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    fg.autograd.backward([(x * x).sum()])
    assert x.grad.tolist() == [[5.0, 7.0], [9.0, 11.0]]


def test_in_place_updates_of_a_leaf_keep_its_identity():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        w -= 1.0
    (w * w).sum().backward()
    with fg.no_grad():
        w -= 0.5 * w.grad
    assert w.tolist() == [0.0, 0.0] and w.is_leaf and w.requires_grad
    w.grad = None
    (w + 1).sum().backward()
    assert w.grad.tolist() == [1.0, 1.0]
    w.data = np.array([5.0, 6.0])
    assert w.tolist() == [5.0, 6.0]
    with pytest.raises(ValueError, match="shape"):
        w.data = np.zeros(3)


def numeric_grad(f, x, eps=1e-6):
    """Central differences of a scalar numpy function."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        g[i] = (f(up) - f(down)) / (2 * eps)
    return g


@pytest.mark.parametrize(
    "name, fn",
    [
        ("tanh-matmul", lambda t: (t @ t.T).tanh().sum()),
        ("softmax-log", lambda t: (t.log_softmax(1) * t).sum()),
        ("sigmoid-pow", lambda t: (t.sigmoid() ** 3).mean()),
        ("index-max", lambda t: t[:, 1:].amax(1).sum() + (t[0] * t[1]).sum()),
        ("div-sqrt", lambda t: (t / (t * t + 1).sqrt()).sum()),
    ],
)
def test_gradients_against_finite_differences(name, fn):
    x = np.random.default_rng(7).standard_normal((3, 4))
    t = fg.tensor(x, requires_grad=True)
    fn(t).backward()
    want = numeric_grad(lambda a: fn(fg.tensor(a)).item(), x)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-7, err_msg=name)


def test_gradcheck_first_and_second_order():
    x = fg.tensor(np.random.default_rng(8).standard_normal((2, 3)))
    w = fg.tensor(np.random.default_rng(9).standard_normal((3, 2)))
    assert fg.gradcheck(lambda a, b: (a @ b).tanh(), [x, w])
    assert fg.gradgradcheck(lambda a, b: (a @ b).sigmoid(), [x, w])

    @fg.custom_gradient
    def wrong(a):
        return a * a, lambda up: up * a  # should be 2a

    with pytest.raises(ValueError, match="gradcheck"):
        fg.gradcheck(wrong, [x])


def test_a_result_names_the_op_that_made_it():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    assert y.grad_fn == "sum_axes" and (w * w).grad_fn == "mul"
    assert w.grad_fn is None and fg.tensor([1.0]).grad_fn is None
    assert repr(w * w).endswith("grad_fn=mul)") and repr(w).endswith("requires_grad=true)")
    assert [line.split()[2] for line in y.graph_listing().splitlines()] == ["leaf", "mul(%0,", "sum_axes(%1)"]


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


def _f64(values):
    return fg.tensor(np.array(values, dtype=np.float64))


def test_functional_jacobians_and_products_have_their_closed_forms():
    from ferrograd.autograd import functional as AF

    x = _f64([1.0, 2.0, -1.0])
    v = _f64([0.5, -1.0, 2.0])
    cube = lambda t: t**3  # noqa: E731
    np.testing.assert_array_equal(AF.jacobian(cube, x).numpy(), np.diag(3 * x.numpy() ** 2))
    out, jv = AF.jvp(cube, x, v)
    np.testing.assert_array_equal(out.numpy(), x.numpy() ** 3)
    np.testing.assert_array_equal(jv.numpy(), 3 * x.numpy() ** 2 * v.numpy())
    out, vj = AF.vjp(cube, x, v)
    np.testing.assert_array_equal(vj.numpy(), 3 * x.numpy() ** 2 * v.numpy())
    total = lambda t: (t**3).sum()  # noqa: E731
    h = AF.hessian(total, x)
    np.testing.assert_array_equal(h.numpy(), np.diag(6 * x.numpy()))
    for product in (AF.hvp, AF.vhp):
        value, hv = product(total, x, v)
        assert value.item() == 8.0
        np.testing.assert_array_equal(hv.numpy(), 6 * x.numpy() * v.numpy())
    # Several inputs and outputs: PyTorch's nesting, outputs outside, inputs inside.
    a, b = _f64([1.0, 2.0]), _f64([3.0])
    jac = AF.jacobian(lambda p, q: (p * q, q.sum() * 2), (a, b))
    assert len(jac) == 2 and len(jac[0]) == 2
    assert tuple(jac[0][0].shape) == (2, 2) and tuple(jac[0][1].shape) == (2, 1) and tuple(jac[1][1].shape) == (1,)
    np.testing.assert_array_equal(jac[0][1].numpy(), [[1.0], [2.0]])
    hh = AF.hessian(lambda p, q: (p * p * q).sum(), (a, b))
    np.testing.assert_array_equal(hh[0][1].numpy(), [[2.0], [4.0]])  # ∂²/∂p∂q = 2p
    # The results are cut from the graph unless create_graph; strict refuses an unused input.
    w = fg.tensor(np.array([2.0]), requires_grad=True)
    (_, g) = AF.vjp(lambda t: t * w, _f64([3.0]), create_graph=True)
    (dw,) = fg.autograd.grad(g.sum(), [w])
    assert dw.item() == 1.0
    with pytest.raises(RuntimeError, match="does not depend on input 1"):
        AF.jacobian(lambda p, q: p * 2, (a, b), strict=True)
    with pytest.raises(RuntimeError, match="one-element outputs"):
        AF.vjp(cube, x)


def test_func_transforms_compose_and_follow_argnums():
    x = _f64([1.0, 2.0])
    f = lambda t: (t**3).sum()  # noqa: E731
    np.testing.assert_array_equal(fg.func.grad(f)(x).numpy(), [3.0, 12.0])
    second = fg.func.grad(lambda t: fg.func.grad(f)(t).sum())(x)
    np.testing.assert_array_equal(second.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(fg.func.hessian(f)(x).numpy(), [[6.0, 0.0], [0.0, 12.0]])
    g, (value, aux) = fg.func.grad_and_value(lambda t, s: ((t * s).sum(), "aux"), argnums=(0, 1), has_aux=True)(
        x, _f64([4.0, 5.0])
    )
    assert value.item() == 14.0 and aux == "aux"
    np.testing.assert_array_equal(g[0].numpy(), [4.0, 5.0])
    np.testing.assert_array_equal(g[1].numpy(), [1.0, 2.0])
    out, pull = fg.func.vjp(lambda t: t * t, x)
    (got,) = pull(_f64([1.0, 1.0]))
    np.testing.assert_array_equal(got.numpy(), [2.0, 4.0])
    assert tuple(fg.func.jacrev(lambda t: t.reshape(2, 1) * t)(x).shape) == (2, 2, 2)
    with pytest.raises(RuntimeError, match="one-element tensor"):
        fg.func.grad(lambda t: t * 2)(x)


class _Exp(fg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class _ScaleAndSplit(fg.autograd.Function):
    """Two outputs, a non-tensor argument, PyTorch 2's setup_context."""

    @staticmethod
    def forward(x, scale):
        return x * scale, (x * x).sum()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, g_scaled, g_sum):
        (x,) = ctx.saved_tensors
        return g_scaled * ctx.scale + g_sum * 2 * x, None


def test_a_function_with_its_own_backward_is_differentiated_again():
    x = fg.tensor(np.array([0.0, 1.0]), requires_grad=True)
    y = _Exp.apply(x)
    np.testing.assert_allclose(y.detach().numpy(), np.exp([0.0, 1.0]))
    (g,) = fg.autograd.grad(y.sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.exp([0.0, 1.0]))
    (gg,) = fg.autograd.grad(g.sum(), [x])  # the backward's g * y differentiated
    np.testing.assert_allclose(gg.numpy(), np.exp([0.0, 1.0]))
    scaled, total = _ScaleAndSplit.apply(x, 3.0)
    assert total.item() == 1.0
    (g,) = fg.autograd.grad((scaled.sum() + total * 10), [x])
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0 + 20.0])
    # Without anything to differentiate, apply just runs forward.
    assert not _Exp.apply(fg.tensor([1.0])).requires_grad


def test_once_differentiable_refuses_a_second_derivative():
    class Square(fg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @fg.autograd.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    x = fg.tensor(np.array([3.0]), requires_grad=True)
    (g,) = fg.autograd.grad(Square.apply(x), [x])
    assert g.item() == 6.0
    # An upstream gradient that itself depends on x (z = y², dz/dy = 2y) is what a second
    # derivative flows back through, as in PyTorch.
    y = Square.apply(x)
    (g,) = fg.autograd.grad((y * y).sum(), [x], create_graph=True)
    assert g.item() == 4 * 27.0
    with pytest.raises(RuntimeError, match="once_differentiable"):
        fg.autograd.grad(g, [x])


def test_functional_call_computes_with_given_values_and_leaves_the_module_alone():
    fg.manual_seed(0)
    model = fg.nn.Sequential(fg.nn.Linear(3, 4), fg.nn.ReLU(), fg.nn.Linear(4, 2))
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    x = fg.ones(5, 3)
    delta = fg.full((4, 3), 0.5, requires_grad=True)
    w = model[0].weight + delta  # a step taken inside the call, as MAML's inner loop does
    y = fg.func.functional_call(model, {"0.weight": w}, (x,))
    by_hand = fg.nn.functional.linear(
        fg.nn.functional.linear(x, w, model[0].bias).relu(), model[2].weight, model[2].bias
    )
    np.testing.assert_array_equal(y.detach().numpy(), by_hand.detach().numpy())
    (g,) = fg.autograd.grad(y.sum(), [delta])
    (g_hand,) = fg.autograd.grad(by_hand.sum(), [delta])
    np.testing.assert_array_equal(g.numpy(), g_hand.numpy())
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    np.testing.assert_array_equal(model(x).detach().numpy(), fg.nn.Sequential(*model)(x).detach().numpy())
    # Per-sample gradients, one call per sample: grad of functional_call in its parameters.
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi):
        return fg.func.functional_call(model, p, (xi.unsqueeze(0),)).square().sum()

    g0 = fg.func.grad(lambda p0: loss({**params, "2.bias": p0}, x[0]))(params["2.bias"])
    assert tuple(g0.shape) == (2,)
    with pytest.raises(RuntimeError, match=r"no parameter or buffer named \['9.weight'\]"):
        fg.func.functional_call(model, {"9.weight": w}, (x,))
    with pytest.raises(RuntimeError, match="strict=True"):
        fg.func.functional_call(model, {"0.weight": w}, (x,), strict=True)


def test_functional_call_reaches_python_modules_parameters_and_buffers():
    class Scale(fg.nn.Module):
        def __init__(self):
            super().__init__()
            self.s = fg.nn.Parameter(fg.tensor(2.0))
            self.register_buffer("shift", fg.tensor(1.0))

        def forward(self, x):
            return x * self.s + self.shift

    m = Scale()
    y = fg.func.functional_call(m, ({"s": fg.tensor(3.0)}, {"shift": fg.tensor(10.0)}), fg.tensor(2.0))
    assert y.item() == 16.0
    assert m(fg.tensor(2.0)).item() == 5.0 and m.shift.item() == 1.0


def test_a_detached_parameter_made_trainable_is_a_leaf_of_its_own():
    lin = fg.nn.Linear(3, 2)
    for p in (lin.bias.detach().requires_grad_(), lin.bias.detach().detach().requires_grad_()):
        y = (p * 2).sum()
        assert y.requires_grad
        (g,) = fg.autograd.grad(y, [p])
        assert g.tolist() == [2.0, 2.0]
    assert not lin.bias.detach().requires_grad and lin.bias.requires_grad
