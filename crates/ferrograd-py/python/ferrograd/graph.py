"""The static graph (seed 001), with simpleflow's and TensorFlow 1's names: build the graph
once from placeholders, variables and ops, then run it in a ``Session`` with a ``feed_dict``.

    import ferrograd.graph as sf
    x = sf.placeholder()
    w = sf.Variable([[1.0]], name="weight")
    loss = sf.reduce_sum(sf.square(x * w - 3.0))
    train_op = sf.GradientDescentOptimizer(learning_rate=0.01).minimize(loss)
    with sf.Session() as sess:
        sess.run(train_op, {x: [1.0, 2.0]})

Gradients are built by the core's graph module from the same derivative rules as eager mode.
"""

import contextlib as _contextlib
import itertools as _itertools
import threading as _threading

from ._core import GradientDescentOptimizer, Graph, Node  # noqa: F401
from ._core import Session as _Session
from ._core import binary_primitives as _binary_primitives
from ._core import elementwise_primitives as _elementwise_primitives

# A graph belongs to the thread that built it, so each thread has its own default graph.
_local = _threading.local()
_counter = _itertools.count()


def _graphs():
    if not hasattr(_local, "graphs"):
        _local.graphs = [Graph()]
    return _local.graphs


def get_default_graph():
    """The graph that module-level functions add to (one per thread)."""
    return _graphs()[-1]


def reset_default_graph():
    """Replaces the default graph with an empty one."""
    _graphs()[-1] = Graph()


@_contextlib.contextmanager
def _default_scope(graph):
    _graphs().append(graph)
    try:
        yield graph
    finally:
        _graphs().pop()


def _name(name, kind):
    return name if name is not None else f"{kind}_{next(_counter)}"


def placeholder(name=None):
    """A value fed at run time through ``feed_dict``."""
    return get_default_graph().placeholder(_name(name, "placeholder"))


def Variable(initial_value, name=None):  # noqa: N802 (simpleflow's name)
    """A trainable value that lives in the graph."""
    return get_default_graph().variable(_name(name, "variable"), initial_value)


def constant(value):
    """A fixed value."""
    return get_default_graph().constant(value)


def Session(graph=None):  # noqa: N802 (simpleflow's name)
    """A session on ``graph`` (the default graph when None); usable as ``with Session() as s``."""
    return _Session(graph if graph is not None else get_default_graph())


def gradients(y, xs):
    """Symbolic gradients of ``y`` with respect to each node of ``xs``."""
    single = isinstance(xs, Node)
    gs = get_default_graph().gradients(y, [xs] if single else list(xs))
    return gs[0] if single else gs


def reduce_sum(x, axis=None, keepdims=False):
    """The sum over ``axis`` (every element when None)."""
    return x.sum(axis, keepdims)


reduct_sum = reduce_sum  # simpleflow's own spelling, as seed 001 calls it


def reduce_mean(x, axis=None, keepdims=False):
    return x.mean(axis, keepdims)


def matmul(a, b):
    return a.matmul(b)


def _elementwise(name):
    def op(x):
        return getattr(x, name)()

    op.__name__ = name
    op.__doc__ = f"``x.{name}()`` for a node."
    return op


# One function per element-wise primitive of the core's table (exp, log, sigmoid, tanh, relu,
# square, ...), as TensorFlow's ``tf.exp(x)``.
for _primitive, _constants, _domain in _elementwise_primitives():
    if not _constants:
        globals()[_primitive] = _elementwise(_primitive)
del _primitive, _constants, _domain


def _binary(name):
    def op(a, b):
        return getattr(a, name)(b)

    op.__name__ = name
    op.__doc__ = f"``a.{name}(b)`` for a node and a node or a number."
    return op


# And one per element-wise primitive of two operands (add, maximum, lt, ...).
for _primitive, _differentiable, _divisor in _binary_primitives():
    globals()[_primitive] = _binary(_primitive)
del _primitive, _differentiable, _divisor
