"""PyTorch's module hooks, for the core's layers and for layers written in Python alike:
``register_forward_pre_hook``, ``register_forward_hook`` and ``register_full_backward_hook``,
each returning a handle whose ``remove()`` takes the hook away. A module with hooks is
called through ``call`` below; one without runs as before."""

import collections
import itertools
import weakref

from .._core import Tensor

# Each hooked module's hooks by kind, in registration order; a module that dies takes its
# hooks with it.
_HOOKS = weakref.WeakKeyDictionary()
_IDS = itertools.count()
KINDS = ("forward_pre", "forward", "backward")


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


def register(module, kind, hook, prepend=False, with_kwargs=False):
    """Adds ``hook`` to ``module``'s hooks of ``kind`` and returns its handle."""
    if not callable(hook):
        raise TypeError(f"register_{kind}_hook: the hook must be callable, got {type(hook).__name__}")
    tables = _HOOKS.setdefault(module, {k: collections.OrderedDict() for k in KINDS})
    table = tables[kind]
    handle = RemovableHandle(table)
    table[handle.id] = (hook, with_kwargs)
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle


def hooked(module):
    """Whether ``module`` has any hook now."""
    tables = _HOOKS.get(module)
    return tables is not None and any(tables.values())


def call(module, args, kwargs):
    """``module.forward(*args, **kwargs)`` with its hooks: the pre-hooks may replace the
    arguments, the forward hooks the result, as PyTorch's; the backward hooks see the
    gradients of the inputs and of the result."""
    tables = _HOOKS.get(module) or {k: {} for k in KINDS}
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
    """One call's gradients on their way back: the output's arrives first, then the inputs'."""

    def __init__(self, module, hooks, slots):
        self.module, self.hooks = module, hooks
        self.grad_inputs = [None] * slots
        self.waiting = 0
        self.grad_output = None

    def fire(self):
        grad_input = tuple(self.grad_inputs)
        for hook, _ in self.hooks:
            result = hook(self.module, grad_input, self.grad_output)
            if result is not None:
                grad_input = tuple(result)
        return grad_input


def _tap_inputs(module, hooks, args):
    """The tensor arguments that need gradients, each through an identity whose derivative
    hands its gradient to the hooks (once the last of them has arrived)."""
    from .. import custom_gradient

    tracked = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    taps = _Taps(module, hooks, len(args))
    taps.waiting = len(tracked)
    args = list(args)
    for i in tracked:

        def through(x, i=i):
            def grad_fn(upstream):
                taps.grad_inputs[i] = upstream
                taps.waiting -= 1
                if taps.waiting > 0:
                    return upstream
                replaced = taps.fire()
                return upstream if replaced[i] is None else replaced[i]

            return x * 1.0, grad_fn

        args[i] = custom_gradient(through, name="backward_hook")(args[i])
    return tuple(args), taps


def _tap_output(out, taps):
    """The result through an identity whose derivative records the output's gradient, and
    calls the hooks at once when no input needs a gradient (PyTorch then passes ``None``s)."""
    from .. import custom_gradient

    if not isinstance(out, Tensor):
        raise NotImplementedError(
            "register_full_backward_hook: only a module that returns one tensor is supported, "
            f"{type(taps.module).__name__} returned {type(out).__name__}"
        )
    if not out.requires_grad:
        return out

    def through(y):
        def grad_fn(upstream):
            taps.grad_output = (upstream,)
            if taps.waiting == 0:
                taps.fire()
            return upstream

        return y * 1.0, grad_fn

    return custom_gradient(through, name="backward_hook")(out)
