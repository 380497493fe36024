"""Every callable the package exposes, called with hostile arguments: each call returns or
raises an ``Exception`` (``ValueError``, ``TypeError``, ``IndexError``, ``OverflowError``,
``MemoryError``, ``OSError``...), never PyO3's ``PanicException`` (a ``BaseException`` that
``except Exception`` misses) and never a crash. The sweep runs under an alarm whose default
action ends the process: a hang fails the suite instead of stalling it."""

import itertools
import math
import signal
import threading
import types

import numpy as np
import pytest

import ferrograd as fg
from ferrograd import _core

# Values a careless or hostile caller passes: wrong types, signs, sizes and special floats.
HOSTILE = [
    None,
    -1,
    0,
    2**62,
    2**64,
    -(2**63),
    math.nan,
    math.inf,
    -0.5,
    "x",
    [],
    [[1.0], [2.0, 3.0]],
    (2**40, 1),
    np.zeros((0, 3), np.float32),
    np.array([True, False]),
    np.arange(3, dtype=np.int64),
    object(),
]

# Dunders that Python calls on a user's behalf (operators, indexing, conversion).
DUNDERS = [
    "__call__",
    "__getitem__",
    "__setitem__",
    "__add__",
    "__sub__",
    "__mul__",
    "__truediv__",
    "__matmul__",
    "__pow__",
    "__rpow__",
    "__radd__",
    "__rsub__",
    "__rtruediv__",
    "__neg__",
    "__eq__",
    "__lt__",
    "__gt__",
    "__len__",
    "__float__",
    "__int__",
    "__bool__",
    "__iter__",
    "__repr__",
    "__array__",
    "__contains__",
    "__enter__",
    "__exit__",
]


def _argument_tuples(tensor_like):
    singles = [(v,) for v in HOSTILE + tensor_like]
    pairs = [(a, b) for a, b in itertools.product(HOSTILE[:10] + tensor_like, repeat=2)]
    triples = [(t, v, v) for t in tensor_like for v in HOSTILE[:10]]
    return [()] + singles + pairs + triples


def _samples():
    """Instances of every native class, built from plausible arguments (one per class is
    enough: the methods are what the sweep calls)."""
    x = fg.ones(2, 3, requires_grad=True)
    tries = [(), (3,), (3, 2), (3, 2, 3), (0.1,), (0.5, 0.5), ([x], 0.1), ([x],)]
    found = [x, fg.tensor(np.arange(6).reshape(2, 3)), fg.tensor(2.5), fg.zeros(0, 3)]
    for name in dir(_core):
        cls = getattr(_core, name)
        if not isinstance(cls, type) or cls is _core.Tensor:
            continue
        for args in tries:
            try:
                found.append(cls(*args))
                break
            except Exception:
                continue
    g = _core.Graph()
    p = g.placeholder("p")
    found += [g, p, p * 2.0, _core.Session(g), (x * x).sum().backward()]
    return found


def _callables():
    out = []
    modules = [fg, _core, fg.nn, fg.optim, fg.graph, fg.data, fg.random]
    modules += [fg.nn.functional, fg.nn.init, fg.nn.utils, fg.optim.lr_scheduler, fg.utils.data]
    for mod in modules:
        for name in dir(mod):
            obj = getattr(mod, name)
            if name.startswith("_") or not callable(obj) or isinstance(obj, types.ModuleType):
                continue
            # Seeding and grad-mode switches change global state the rest of the suite reads.
            if name in {"manual_seed", "set_grad_enabled", "reset_default_graph"}:
                continue
            out.append((f"{mod.__name__}.{name}", obj))
    for inst in _samples():
        kind = type(inst).__name__
        for name in [n for n in dir(inst) if not n.startswith("_")] + DUNDERS:
            try:
                method = getattr(inst, name, None)
            except Exception:  # a property refusing this instance (`mT` of a 0-d tensor)
                continue
            if callable(method):
                out.append((f"{kind}.{name}", method))
    return out


def _sweep(calls, tensor_like, escaped):
    for label, fn in calls:
        for args in _argument_tuples(tensor_like):
            try:
                fn(*args)
            except Exception:
                pass
            except BaseException as e:  # noqa: B036 (what must never happen)
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                escaped.append(f"{label}{tuple(map(repr, args))}: {type(e).__name__}: {e}")


def test_no_callable_lets_a_panic_escape(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # saves given a hostile path write here
    grad_mode = fg.is_grad_enabled()
    tensor_like = [fg.ones(2, 3), fg.tensor(np.arange(4)), fg.tensor(1.5, dtype=fg.float64)]
    calls = _callables()
    assert len(calls) > 400, len(calls)
    escaped = []
    signal.alarm(600)
    try:
        _sweep(calls, tensor_like, escaped)
    finally:
        signal.alarm(0)
        _core.set_grad_enabled(grad_mode)
    assert not escaped, f"{len(escaped)} panics escaped:\n" + "\n".join(escaped[:40])


def test_graph_objects_work_from_another_thread():
    g = fg.graph.Graph()
    x = g.placeholder("x")
    y = (x * 2.0).sum()
    sess = fg.graph.Session(g)
    got = {}

    def run():
        try:
            got["value"] = float(sess.run(y, {x: np.ones(3, np.float32)}))
            got["node"] = (x + 1.0).sum()
        except BaseException as e:  # noqa: B036
            got["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert "error" not in got, repr(got.get("error"))
    assert got["value"] == 6.0
    assert float(sess.run(got["node"], {x: np.ones(3, np.float32)})) == 6.0


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
