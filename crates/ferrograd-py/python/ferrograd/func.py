"""``torch.func``'s transforms that reverse mode gives: ``grad``, ``grad_and_value``, ``vjp``,
``jacrev`` and ``hessian``, and ``functional_call``. Each transform returns a function; they
compose (``grad(grad(f))`` is the second derivative), as the Rust ``ferrograd::func`` does.
Forward mode (``jvp``, ``jacfwd``) and ``vmap`` are not built yet."""

from . import _core, enable_grad, stack, zeros
from ._core import Tensor
from ._core import grad as _core_grad

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacrev", "vjp"]


def _argnums(argnums, args, name):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -len(args) <= i < len(args):
            raise RuntimeError(f"{name}: argnums {i} is out of range for {len(args)} positional arguments")
        if not isinstance(args[i], Tensor):
            raise RuntimeError(f"{name}: argument {i} must be a Tensor, got {type(args[i]).__name__}")
    return tuple(i % len(args) for i in nums)


def _primals(args, nums):
    """The arguments with the differentiated ones as leaves, and whether any of them was
    already tracked (an outer transform follows it, so the results keep their graph)."""
    args = list(args)
    nested = any(args[i].requires_grad for i in nums)
    for i in nums:
        if not args[i].requires_grad:
            args[i] = args[i].detach().requires_grad_()
    return args, nested


def _gradients(y, xs, nested):
    return _core_grad(y, list(xs), create_graph=nested, materialize_grads=True)


def grad_and_value(func, argnums=0, has_aux=False):
    """A function giving ``(gradient, value)`` of ``func`` (one-element output) with respect
    to the arguments ``argnums`` names; with ``has_aux``, ``func`` returns ``(output, aux)``
    and the value is ``(output, aux)``."""

    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, args, "grad_and_value")
        with enable_grad():
            args, nested = _primals(args, nums)
            out = func(*args, **kwargs)
            aux = None
            if has_aux:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("grad_and_value(f)(*args): with has_aux=True, f must return (output, aux)")
                out, aux = out
            if not isinstance(out, Tensor) or out.numel() != 1:
                shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                raise RuntimeError(
                    f"grad_and_value(f)(*args): expected f(*args) to return a one-element tensor, got {shape}"
                )
            grads = _gradients(out, [args[i] for i in nums], nested)
        value = out if nested else out.detach()
        g = grads[0] if isinstance(argnums, int) else grads
        return g, ((value, aux) if has_aux else value)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """A function giving the gradient of ``func`` (one-element output) with respect to the
    arguments ``argnums`` names (and ``aux`` beside it with ``has_aux``)."""
    both = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        g, value = both(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)``: ``vjp_fn(cotangent)`` gives one vector-Jacobian product
    per primal, as a tuple; it may be called many times."""
    nums = tuple(range(len(primals)))
    _argnums(nums, primals, "vjp")
    with enable_grad():
        args, nested = _primals(primals, nums)
        out = func(*args)
        aux = None
        if has_aux:
            out, aux = out

    def vjp_fn(cotangent):
        if tuple(cotangent.shape) != tuple(out.shape):
            raise RuntimeError(f"vjp: the cotangent has shape {tuple(cotangent.shape)}, the output {tuple(out.shape)}")
        with enable_grad():
            keep = nested or cotangent.requires_grad
            return _core_grad([out], args, grad_outputs=[cotangent], create_graph=keep, materialize_grads=True)

    value = out if nested else out.detach()
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jacrev(func, argnums=0, has_aux=False):
    """A function giving the Jacobian of ``func`` by reverse mode, shaped ``output.shape +
    input.shape`` (a tuple over the arguments when ``argnums`` is a tuple)."""

    def wrapper(*args):
        nums = _argnums(argnums, args, "jacrev")
        with enable_grad():
            full, nested = _primals(args, nums)
            out = func(*full)
            aux = None
            if has_aux:
                out, aux = out
            xs = [full[i] for i in nums]
            flat = out.reshape(-1)
            rows = [_gradients(flat[k], xs, True) for k in range(flat.numel())]
        blocks = []
        for j, x in enumerate(xs):
            shape = tuple(out.shape) + tuple(x.shape)
            if rows:
                block = stack([r[j] for r in rows], 0).reshape(*shape) if shape else rows[0][j].reshape(())
            else:
                block = zeros(*shape, dtype=x.dtype)
            blocks.append(block if nested else block.detach())
        jac = blocks[0] if isinstance(argnums, int) else tuple(blocks)
        return (jac, aux) if has_aux else jac

    return wrapper


def hessian(func, argnums=0):
    """A function giving the Hessian of ``func`` (one-element output): ``jacrev`` of its
    gradient, shaped ``input.shape + input.shape``."""
    return jacrev(grad(func, argnums), argnums)


def _merged(dicts):
    dicts = dicts if isinstance(dicts, (tuple, list)) else (dicts,)
    values = {}
    for d in dicts:
        for k, v in d.items():
            if k in values:
                raise ValueError(f"functional_call: {k!r} is given in more than one dict")
            values[k] = v
    return values


def _owner(module, name):
    path, _, leaf = name.rpartition(".")
    return (module.get_submodule(path) if path else module), leaf


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` computed with the parameters and buffers named in the dicts
    (``"0.weight"``) replaced by the given tensors, as ``torch.func.functional_call``: gradients
    reach what those tensors were computed from, and the module does not change. A tied
    parameter is replaced wherever it is used. With ``strict``, every parameter and buffer
    must be given."""
    del tie_weights
    values = _merged(parameter_and_buffer_dicts)
    named = dict(module.named_parameters())
    named.update(dict(module.named_buffers()))
    unknown = sorted(k for k in values if k not in named)
    if unknown:
        raise RuntimeError(f"functional_call: the module has no parameter or buffer named {unknown}")
    if strict:
        missing = sorted(k for k in named if k not in values)
        if missing:
            raise RuntimeError(f"functional_call: strict=True and no value given for {missing}")
    substitutes, swaps = [], []
    for name, value in values.items():
        target = named[name]
        try:
            _core.ParamSubstitutes([(target, value)])
        except TypeError:
            # A plain tensor a Python module holds (a buffer): swapped on the module itself.
            swaps.append((*_owner(module, name), value))
        else:
            substitutes.append((target, value))
    args = () if args is None else (args if isinstance(args, tuple) else (args,))
    before = [(owner, leaf, getattr(owner, leaf)) for owner, leaf, _ in swaps]
    try:
        for owner, leaf, value in swaps:
            owner.__setattr__(leaf, value)
        with _core.ParamSubstitutes(substitutes):
            return module(*args, **(kwargs or {}))
    finally:
        for owner, leaf, value in before:
            owner.__setattr__(leaf, value)
