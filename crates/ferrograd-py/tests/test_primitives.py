"""Every element-wise primitive of the core's table, walked from the table itself
(``_core.elementwise_primitives()``): each has a Tensor method, a graph Node method, a
function in ``ferrograd`` and ``ferrograd.graph`` and a stub, and all of them agree with numpy.
A primitive added to the table without its numpy reference below fails here."""

import math
import pathlib
import re

import numpy as np
import pytest

import ferrograd as fg
import ferrograd.graph as sf
from ferrograd import _core

PRIMITIVES = _core.elementwise_primitives()
STUBS = (pathlib.Path(fg.__file__).parent / "_core.pyi").read_text()

# What numpy computes for each primitive, given the example constants.
NUMPY = {
    "neg": lambda x: -x,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "powf": lambda x, p: x**p,
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "leaky_relu": lambda x, s: np.where(x > 0, x, s * x),
    "softplus": lambda x: np.logaddexp(0, x),
    "erf": np.vectorize(math.erf),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "clamp": np.clip,
    "add_scalar": lambda x, s: x + s,
    "mul_scalar": lambda x, s: x * s,
    "div_scalar": lambda x, s: x / s,
    "rsub_scalar": lambda x, s: s - x,
    "rdiv_scalar": lambda x, s: s / x,
}

# The PyTorch spelling of the primitives that take constants, for a tensor or a node.
WITH_CONSTANTS = {
    "powf": lambda x, p: x**p,
    "leaky_relu": lambda x, s: x.leaky_relu(s),
    "clamp": lambda x, lo, hi: x.clamp(lo, hi),
    "add_scalar": lambda x, s: x + s,
    "mul_scalar": lambda x, s: x * s,
    "div_scalar": lambda x, s: x / s,
    "rsub_scalar": lambda x, s: s - x,
    "rdiv_scalar": lambda x, s: s / x,
}


def sample(domain, seed):
    rng = np.random.default_rng(seed)
    magnitude = rng.uniform(0.2, 2.0, size=(2, 3))
    if domain == "real":
        return rng.standard_normal((2, 3))
    if domain == "positive":
        return magnitude
    return magnitude * np.where(rng.uniform(size=(2, 3)) < 0.5, -1.0, 1.0)


def python_form(name, constants):
    """The call a Python user writes for the primitive, on a tensor or a node."""
    if constants:
        return lambda x: WITH_CONSTANTS[name](x, *constants)
    return lambda x: getattr(x, name)()


def test_the_table_reaches_python():
    names = [name for name, _, _ in PRIMITIVES]
    assert len(names) == len(set(names)) >= 22
    assert {"exp", "log1p", "expm1", "powf", "clamp"} <= set(names)
    assert set(names) == set(NUMPY), "a primitive lacks its numpy reference (or one is stale)"
    assert set(WITH_CONSTANTS) == {n for n, c, _ in PRIMITIVES if c}


@pytest.mark.parametrize("name,constants,domain", PRIMITIVES, ids=[p[0] for p in PRIMITIVES])
def test_each_primitive_has_every_entry_and_agrees_with_numpy(name, constants, domain):
    x = sample(domain, len(name))
    want = NUMPY[name](x, *constants)
    form = python_form(name, constants)

    got = form(fg.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    f32 = form(fg.tensor(x.astype(np.float32)))
    assert f32.dtype == fg.float32
    np.testing.assert_allclose(f32.numpy(), want, rtol=2e-6, atol=1e-6)

    g = sf.Graph()
    p = g.placeholder("x")
    node = form(p)
    assert isinstance(node, sf.Node)
    # A session computes in float32, the dtype numpy float64 feeds are given (simpleflow's).
    np.testing.assert_array_equal(sf.Session(g).run(node, {p: x}), f32.numpy())

    if not constants:
        np.testing.assert_array_equal(getattr(fg, name)(x).numpy(), got)
        with sf.Graph().as_default() as g2:
            q = sf.placeholder("x")
            ran = sf.Session(g2).run(getattr(sf, name)(q), {q: x})
            np.testing.assert_array_equal(ran, f32.numpy())
        for cls, ret in (("Tensor", "Tensor"), ("Node", "Node")):
            body = STUBS.split(f"\nclass {cls}:")[1].split("\nclass ")[0]
            # A primitive with PyTorch's keyword arguments (gelu's `approximate`) lists them.
            stub = rf"def {name}\(self(, \w+: [^)]*)?\) -> {ret}: \.\.\."
            assert re.search(stub, body), f"{cls}.{name} stub"


def test_gradients_of_log1p_and_expm1_from_python():
    x = fg.tensor([1e-10, 0.5], dtype=fg.float64, requires_grad=True)
    (x.log1p().sum() + x.expm1().sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 / (1 + x.numpy()) + np.exp(x.numpy()), rtol=1e-15)


# The element-wise primitives of two operands: what numpy computes for each.
BINARY = _core.binary_primitives()
NUMPY_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "eq": lambda a, b: (a == b).astype(a.dtype),
    "ne": lambda a, b: (a != b).astype(a.dtype),
    "lt": lambda a, b: (a < b).astype(a.dtype),
    "le": lambda a, b: (a <= b).astype(a.dtype),
    "gt": lambda a, b: (a > b).astype(a.dtype),
    "ge": lambda a, b: (a >= b).astype(a.dtype),
}


# ∂/∂a and ∂/∂b of each differentiable one, elementwise over the broadcast shape (at a tie,
# max and min give each operand half).
GRADIENTS = {
    "add": lambda a, b: (np.ones_like(a), np.ones_like(a)),
    "sub": lambda a, b: (np.ones_like(a), -np.ones_like(a)),
    "mul": lambda a, b: (b, a),
    "div": lambda a, b: (1 / b, -a / b**2),
    "maximum": lambda a, b: ((a > b) + 0.5 * (a == b), (a < b) + 0.5 * (a == b)),
    "minimum": lambda a, b: ((a < b) + 0.5 * (a == b), (a > b) + 0.5 * (a == b)),
}


def test_the_binary_table_reaches_python():
    names = [name for name, _, _ in BINARY]
    assert len(names) == len(set(names)) >= 12
    assert set(names) == set(NUMPY_BINARY), "a primitive lacks its numpy reference (or one is stale)"
    comparisons = {n for n, differentiable, _ in BINARY if not differentiable}
    assert comparisons == {"eq", "ne", "lt", "le", "gt", "ge"}
    assert set(GRADIENTS) == set(NUMPY_BINARY) - comparisons


@pytest.mark.parametrize("name,differentiable,divisor", BINARY, ids=[p[0] for p in BINARY])
def test_each_binary_primitive_has_every_entry_and_agrees_with_numpy(name, differentiable, divisor):
    rng = np.random.default_rng(len(name))
    a = rng.standard_normal((3, 4))
    b = rng.uniform(0.2, 2.0, size=4) if divisor else rng.standard_normal(4)
    a[0] = b  # ties, where the comparisons and max/min decide at equality
    want = NUMPY_BINARY[name](a, b)

    got = getattr(fg.tensor(a), name)(fg.tensor(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(getattr(fg, name)(a, b).numpy(), got)

    g = sf.Graph()
    p, q = g.placeholder("a"), g.placeholder("b")
    node = getattr(p, name)(q)
    assert isinstance(node, sf.Node)
    f32 = getattr(fg.tensor(a.astype(np.float32)), name)(fg.tensor(b.astype(np.float32)))
    # A session computes in float32, the dtype numpy float64 feeds are given (simpleflow's).
    np.testing.assert_array_equal(sf.Session(g).run(node, {p: a, q: b}), f32.numpy())
    with sf.Graph().as_default() as g2:
        x, y = sf.placeholder("a"), sf.placeholder("b")
        ran = sf.Session(g2).run(getattr(sf, name)(x, y), {x: a, y: b})
        np.testing.assert_array_equal(ran, f32.numpy())
    # A number as the other operand, as the operators and PyTorch's named forms take one: it
    # keeps the node's dtype.
    with_number = sf.Session(g).run(getattr(p, name)(1.5), {p: a})
    np.testing.assert_array_equal(with_number, getattr(fg.tensor(a.astype(np.float32)), name)(1.5).numpy())
    with pytest.raises(TypeError):
        getattr(p, name)(None)
    for cls, ret in (("Tensor", "Tensor"), ("Node", "Node")):
        body = STUBS.split(f"\nclass {cls}:")[1].split("\nclass ")[0]
        # (Keyword-only extras after the operand, as add's `alpha`, are allowed.)
        stub = rf"def {name}\(self, other: \w+(, \*, [^)]*)?\) -> {ret}: \.\.\."
        assert re.search(stub, body), f"{cls}.{name} stub"

    if differentiable:
        x, y = fg.tensor(a, requires_grad=True), fg.tensor(b, requires_grad=True)
        getattr(x, name)(y).sum().backward()
        da, db = GRADIENTS[name](a, np.broadcast_to(b, a.shape))
        np.testing.assert_allclose(x.grad.numpy(), da, rtol=1e-13)
        # The broadcast operand's gradient is summed back to its shape.
        np.testing.assert_allclose(y.grad.numpy(), db.sum(axis=0), rtol=1e-13)
    else:
        # As PyTorch's: a comparison's mask is not tracked, so nothing flows back through it.
        y = getattr(fg.tensor(a, requires_grad=True), name)(fg.tensor(b))
        assert not y.requires_grad


@pytest.mark.parametrize("name", [p[0] for p in BINARY])
def test_a_named_binary_form_refuses_none_as_pytorch_does(name):
    # `t == None` is False (Python's identity test), but `t.eq(None)` and `fg.eq(t, None)` are
    # errors in PyTorch, never a silent NotImplemented.
    t = fg.tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        getattr(t, name)(None)
    with pytest.raises(TypeError):
        getattr(fg, name)(t, None)
    assert (t == None) is False  # noqa: E711 (the operator's fallback is kept)
