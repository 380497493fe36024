"""``torch.autograd.Function``: an op whose forward and backward the user writes, with
``ctx.save_for_backward``, ``ctx.needs_input_grad``, ``ctx.mark_non_differentiable``,
``ctx.set_materialize_grads``, PyTorch 2's ``setup_context``, and ``once_differentiable``.

``apply`` runs the forward inside one custom-gradient node of the core (the engine calls
``backward`` with the upstream gradients of every output at once); a backward written with
tensor ops is recorded when a graph is asked for, so it can be differentiated again."""

import functools

from .. import custom_gradient, is_grad_enabled, no_grad, zeros_like
from .._core import Tensor, cat

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """What ``forward`` (or ``setup_context``) leaves for ``backward``."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()
        self.materialize_grads = True
        self._non_differentiable = []

    def save_for_backward(self, *tensors):
        self.saved_tensors = tuple(tensors)

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.extend(tensors)

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        """Accepted for PyTorch's programs: a tensor here is a value, so an in-place forward
        already returns a new one."""
        del tensors


def _differentiable(t, ctx):
    return isinstance(t, Tensor) and t.dtype.is_floating_point and not any(t is m for m in ctx._non_differentiable)


class Function:
    """Subclass it and define ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)``
    as static methods (or ``forward(*args)`` with ``setup_context(ctx, inputs, output)``),
    then call ``YourFunction.apply(*args)``. ``backward`` returns one gradient per argument
    of ``forward`` (None for a non-tensor or one that needs none)."""

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("a Function subclass must define forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("a Function subclass must define backward")

    @classmethod
    def _uses_setup_context(cls):
        return cls.setup_context is not Function.setup_context

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args):
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        layout = {}

        def run(*tensors):
            full = list(args)
            for i, t in zip(positions, tensors):
                full[i] = t
            if cls._uses_setup_context():
                out = cls.forward(*full)
                cls.setup_context(ctx, tuple(full), out)
            else:
                out = cls.forward(ctx, *full)
            outs = out if isinstance(out, tuple) else (out,)
            layout["tuple"] = isinstance(out, tuple)
            layout["outs"] = outs
            packed, pieces = _pack(outs, ctx)
            layout["pieces"] = pieces

            def grad_fn(upstream):
                grads_out = _unpack_upstream(upstream, outs, pieces, ctx)
                grads = cls.backward(ctx, *grads_out)
                grads = grads if isinstance(grads, tuple) else (grads,)
                if len(grads) < len(args):
                    raise RuntimeError(
                        f"{cls.__name__}.backward returned {len(grads)} gradients for {len(args)} inputs of forward"
                    )
                return [zeros_like(args[i]) if grads[i] is None else grads[i] for i in positions]

            return packed, grad_fn

        tensors = [args[i] for i in positions]
        if not tensors or not any(needs) or not is_grad_enabled():
            with no_grad():
                packed, _ = run(*tensors)
        else:
            packed = custom_gradient(run, name=cls.__name__)(*tensors)
        return _outputs(packed, layout)


def _pack(outs, ctx):
    """The differentiable outputs flattened end to end (one node holds them all), and where
    each lies: ``(start, end, shape)``, or None for an output passed through as it is."""
    pieces, flat, at = [], [], 0
    packed_dtype = next((o.dtype for o in outs if _differentiable(o, ctx)), None)
    for o in outs:
        if _differentiable(o, ctx):
            n = o.numel()
            pieces.append((at, at + n, tuple(o.shape)))
            flat.append(o.reshape(-1).to(packed_dtype))
            at += n
        else:
            pieces.append(None)
    packed = cat(flat, 0) if flat else None
    return packed, pieces


def _unpack_upstream(upstream, outs, pieces, ctx):
    grads = []
    for o, piece in zip(outs, pieces):
        if piece is None:
            grads.append(None)
            continue
        start, end, shape = piece
        g = upstream[start:end].reshape(shape).to(o.dtype)
        grads.append(g)
    if not ctx.materialize_grads:
        return grads
    return [zeros_like(o) if g is None and isinstance(o, Tensor) else g for o, g in zip(outs, grads)]


def _outputs(packed, layout):
    outs = []
    for o, piece in zip(layout["outs"], layout["pieces"]):
        if piece is None:
            outs.append(o.detach() if isinstance(o, Tensor) else o)
        else:
            start, end, shape = piece
            outs.append(packed[start:end].reshape(shape).to(o.dtype))
    return tuple(outs) if layout["tuple"] else outs[0]


def once_differentiable(backward):
    """Marks a ``backward`` that cannot be differentiated: it runs without recording, and a
    second differentiation that reaches its results raises, as in PyTorch."""

    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with no_grad():
            grads = backward(ctx, *grad_outputs)
        upstream = [g for g in grad_outputs if isinstance(g, Tensor) and g.requires_grad]
        if not is_grad_enabled() or not upstream:
            return grads
        many = isinstance(grads, tuple)
        guarded = tuple(_refuse_second(g, upstream) for g in (grads if many else (grads,)))
        return guarded if many else guarded[0]

    return wrapper


def _refuse_second(g, upstream):
    if not isinstance(g, Tensor):
        return g

    def forward(*_):
        def refuse(_up):
            raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")

        return g, refuse

    return custom_gradient(forward, name="once_differentiable")(*upstream)
