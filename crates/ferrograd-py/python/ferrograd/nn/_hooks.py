"""PyTorch's module hooks, for the core's layers and for layers written in Python alike:
``register_forward_pre_hook``, ``register_forward_hook`` and ``register_full_backward_hook``,
each returning a handle whose ``remove()`` takes the hook away. A module with hooks is
called through ``call`` below; one without runs as before."""

import collections
import itertools
import weakref

from .. import custom_gradient
from .._core import Tensor

KINDS = ("forward_pre", "forward", "backward")
_IDS = itertools.count()
# The hooks of the core's layers (which have no `__dict__`), by id, each with a weak
# reference to its layer: a layer that dies takes its hooks with it. A Python module keeps
# its own in its `__dict__`; neither way hashes the module (a module may define `__eq__`).
_CORE = {}


class RemovableHandle:
    """What a ``register_*_hook`` returns: ``remove()`` (or leaving a ``with`` block) takes the
    hook away."""

    def __init__(self, table):
        self._table = weakref.ref(table)
        self.id = next(_IDS)

    def remove(self):
        table = self._table()
        if table is not None:
            table.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _Tables(dict):
    """A module's hooks by kind (a dict subclass, so that a handle can refer to it weakly)."""


def _tables(module, create=False):
    own = getattr(module, "__dict__", None)
    if own is not None:
        found = own.get("_hook_tables")
        if found is None and create:
            found = own["_hook_tables"] = _Tables({k: collections.OrderedDict() for k in KINDS})
        return found
    entry = _CORE.get(id(module))
    if entry is not None and entry[0]() is module:
        return entry[1]
    if not create:
        return None
    key = id(module)
    tables = _Tables({k: collections.OrderedDict() for k in KINDS})
    # The table is bound now: at interpreter exit the module's globals may be gone first.
    _CORE[key] = (weakref.ref(module, lambda _, core=_CORE: core.pop(key, None)), tables)
    return tables


def register(module, kind, hook, prepend=False, with_kwargs=False):
    """Adds ``hook`` to ``module``'s hooks of ``kind`` and returns its handle."""
    if not callable(hook):
        raise TypeError(f"register_{kind}_hook: the hook must be callable, got {type(hook).__name__}")
    table = _tables(module, create=True)[kind]
    handle = RemovableHandle(table)
    table[handle.id] = (hook, with_kwargs)
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle


def hooked(module):
    """Whether ``module`` has any hook now."""
    tables = _tables(module)
    return tables is not None and any(tables.values())


def call(module, args, kwargs):
    """``module.forward(*args, **kwargs)`` with its hooks: the pre-hooks may replace the
    arguments, the forward hooks the result, as PyTorch's; the backward hooks see the
    gradients of the inputs and of the result."""
    tables = _tables(module) or {k: {} for k in KINDS}
    kwargs = dict(kwargs or {})
    for hook, with_kwargs in list(tables["forward_pre"].values()):
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    backward = list(tables["backward"].values())
    if backward:
        args, taps = _tap_inputs(module, backward, args)
    out = module.forward(*args, **kwargs)
    for hook, with_kwargs in list(tables["forward"].values()):
        result = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
        if result is not None:
            out = result
    if backward:
        out = _tap_output(out, taps)
    return out


class _Taps:
    """One call's gradients on their way back: the output's arrives first, then the input's
    (each backward pass through the call starts again)."""

    def __init__(self, module, hooks, slots, tracked):
        self.module, self.hooks, self.slots, self.tracked = module, hooks, slots, tracked
        self.reset()

    def reset(self):
        self.grad_inputs = [None] * self.slots
        self.grad_output = None

    def fire(self):
        grad_input = tuple(self.grad_inputs)
        for hook, _ in self.hooks:
            result = hook(self.module, grad_input, self.grad_output)
            if result is not None:
                grad_input = tuple(result)
        return grad_input


def _tap_inputs(module, hooks, args):
    """The tensor argument that needs a gradient, through an identity whose derivative hands
    its gradient to the hooks (which may replace it). A call with several such arguments is
    refused: their gradients arrive one by one, and a hook could not replace them all."""

    tracked = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    if len(tracked) > 1:
        raise NotImplementedError(
            f"register_full_backward_hook: {type(module).__name__} was called with {len(tracked)} "
            "tensors that need gradients; a backward hook supports one"
        )
    taps = _Taps(module, hooks, len(args), tracked)
    args = list(args)
    for i in tracked:

        def through(x, i=i):
            def grad_fn(upstream):
                taps.grad_inputs[i] = upstream
                replaced = taps.fire()[i]
                return upstream if replaced is None else replaced

            return x * 1.0, grad_fn

        args[i] = custom_gradient(through, name="backward_hook")(args[i])
    return tuple(args), taps


def _tap_output(out, taps):
    """The result through an identity whose derivative records the output's gradient (and
    calls the hooks at once when no input needs a gradient: PyTorch then passes ``None``)."""

    if not isinstance(out, Tensor):
        raise NotImplementedError(
            "register_full_backward_hook: only a module that returns one tensor is supported, "
            f"{type(taps.module).__name__} returned {type(out).__name__}"
        )
    if not out.requires_grad:
        return out

    def through(y):
        def grad_fn(upstream):
            taps.reset()
            taps.grad_output = (upstream,)
            if not taps.tracked:
                taps.fire()
            return upstream

        return y * 1.0, grad_fn

    return custom_gradient(through, name="backward_hook")(out)
