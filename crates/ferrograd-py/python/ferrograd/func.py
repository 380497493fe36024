"""``torch.func``'s transforms: in reverse mode ``grad``, ``grad_and_value``, ``vjp``,
``jacrev`` and ``hessian``; in forward mode ``jvp``, ``linearize`` and ``jacfwd`` (a tangent
rule per op in the core); ``vmap`` (a batching rule per op); and ``functional_call``. Each
transform returns a function; they compose (``grad(grad(f))`` is the second derivative,
``vmap(grad(f))`` gives per-example gradients), as the Rust ``ferrograd::func`` does.

Forward mode and ``vmap`` record the ops a function calls while it runs once, so they pass
through the core's ops only; a value computed some other way (numpy) inside the function is
refused by name when it depends on the inputs. ``vmap`` records the control flow the first
example takes, and random draws are the same for every example (``randomness="same"``)."""

from . import _core, enable_grad, stack, zeros
from ._core import Tensor
from ._core import grad as _core_grad
from .reshaping_and_reductions import movedim

__all__ = [
    "functional_call",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "linearize",
    "vjp",
    "vmap",
]


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
    """A function giving the Hessian of ``func`` (one-element output): the forward-mode
    Jacobian of its gradient (``torch.func``'s recipe), shaped ``input.shape + input.shape``."""
    return jacfwd(grad(func, argnums), argnums)


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


class _Recorded:
    """A Python function as the core records it: its outputs come back as a list, with the
    structure (one tensor or a tuple) and the ``aux`` kept here."""

    def __init__(self, func, has_aux, name):
        self.func, self.has_aux, self.name = func, has_aux, name
        self.single, self.aux = True, None

    def __call__(self, *args):
        out = self.func(*args)
        if self.has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError(f"{self.name}: with has_aux=True, the function must return (output, aux)")
            out, self.aux = out
        self.single = isinstance(out, Tensor)
        return out

    def pack(self, values):
        return values[0] if self.single else tuple(values)


def _tensors(values, what, name):
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    for v in values:
        if not isinstance(v, Tensor):
            raise RuntimeError(f"{name}: {what} must be tensors, got {type(v).__name__}")
    return values


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J·tangents)`` by forward mode, as ``torch.func.jvp``: one run of
    ``func`` with each op's tangent computed beside its value. With ``has_aux``, ``func``
    returns ``(output, aux)`` and ``aux`` comes third."""
    del strict
    primals = _tensors(primals, "primals", "jvp")
    tangents = _tensors(tangents, "tangents", "jvp")
    if len(primals) != len(tangents):
        raise RuntimeError(f"jvp: {len(tangents)} tangents for {len(primals)} primals")
    recorded = _Recorded(func, has_aux, "jvp")
    lin = _core.func_linearize(recorded, list(primals))
    out, tangent = recorded.pack(lin.values()), recorded.pack(lin.jvp(list(tangents)))
    return (out, tangent, recorded.aux) if has_aux else (out, tangent)


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``, as ``torch.func.linearize``: ``func`` runs once, and each
    ``jvp_fn(*tangents)`` runs only the tangent rules of the ops it recorded."""
    primals = _tensors(primals, "primals", "linearize")
    recorded = _Recorded(func, False, "linearize")
    lin = _core.func_linearize(recorded, list(primals))

    def jvp_fn(*tangents):
        tangents = _tensors(tangents, "tangents", "linearize")
        return recorded.pack(lin.jvp(list(tangents)))

    return recorded.pack(lin.values()), jvp_fn


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """A function giving the Jacobian of ``func`` by forward mode, shaped ``output.shape +
    input.shape`` (a tuple over the arguments when ``argnums`` is a tuple, and over the
    outputs when ``func`` returns a tuple): ``func`` runs once, then the tangent rules of every
    basis vector of an argument at once, by ``vmap``."""
    del randomness

    def wrapper(*args):
        nums = _argnums(argnums, args, "jacfwd")

        def call(*xs):
            full = list(args)
            for i, x in zip(nums, xs):
                full[i] = x
            return func(*full)

        recorded = _Recorded(call, has_aux, "jacfwd")
        xs = [args[i] for i in nums]
        lin = _core.func_linearize(recorded, xs)
        outs = lin.values()
        # Per argument, per output: the tangents along every basis vector of the argument,
        # batched first ([n, *output.shape]).
        per_arg = [_columns(lin, xs, j, len(outs)) for j in range(len(xs))]
        jacobians = []
        for o, out in enumerate(outs):
            blocks = []
            for j, x in enumerate(xs):
                shape = tuple(out.shape) + tuple(x.shape)
                cols = per_arg[j][o]
                block = movedim(cols, 0, -1).reshape(*shape) if cols is not None else zeros(*shape, dtype=out.dtype)
                blocks.append(block)
            jacobians.append(blocks[0] if isinstance(argnums, int) else tuple(blocks))
        jac = recorded.pack(jacobians)
        return (jac, recorded.aux) if has_aux else jac

    return wrapper


def _columns(lin, xs, j, outputs):
    """The tangents of every output along each basis vector of argument ``j`` (the others'
    tangents zero), stacked first: one batched pass by ``vmap`` over the basis (a vector at a
    time where the basis is large, as its batch would hold n times each intermediate)."""
    x = xs[j]
    n = x.numel()
    if n == 0:
        return [None] * outputs
    zero = [zeros(*other.shape, dtype=other.dtype) for other in xs]

    def along(e):
        return tuple(lin.jvp([e if m == j else z for m, z in enumerate(zero)]))

    if n <= 1024:
        eye = stack([_basis(x, k) for k in range(n)], 0)
        return list(vmap(along)(eye))
    return [stack(list(cols), 0) for cols in zip(*(along(_basis(x, k)) for k in range(n)))]


def _basis(x, k):
    """Zeros shaped as ``x`` with a one at flat position ``k``."""
    e = zeros(x.numel(), dtype=x.dtype)
    e[k] = 1.0
    return e.reshape(*x.shape)


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func``, written for one example, as a function of a batch (``torch.func.vmap``):
    argument ``i`` is batched along ``in_dims[i]`` (an int for every argument, or a tuple with
    ``None`` for a shared one); each output is batched along ``out_dims``. The batch runs as
    one batched computation: each op of ``func`` by its batching rule.

    Random draws inside ``func`` are the same for every example: ``randomness`` may be
    ``"error"`` (PyTorch's default, which refuses draws; here they are not detected) or
    ``"same"``, and ``"different"`` is refused."""
    if randomness not in ("error", "same", "different"):
        raise RuntimeError(f"vmap: randomness must be 'error', 'same' or 'different', got {randomness!r}")
    if randomness == "different":
        raise NotImplementedError("vmap: randomness='different' is not supported; draws are the same for every example")
    del chunk_size

    def wrapper(*args, **kwargs):
        dims = tuple(in_dims) if isinstance(in_dims, (tuple, list)) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries for {len(args)} positional arguments")
        positions, tensors, axes = [], [], []
        for i, (a, d) in enumerate(zip(args, dims)):
            if d is not None and not isinstance(d, int):
                raise ValueError(f"vmap: in_dims[{i}] must be an int or None (nested in_dims are not supported)")
            if isinstance(a, Tensor):
                positions.append(i)
                tensors.append(a)
                axes.append(None if d is None else d % max(a.dim(), 1))
            elif d is not None:
                raise ValueError(f"vmap: in_dims[{i}]={d} for an argument of type {type(a).__name__}; only tensors map")

        def call(*xs):
            full = list(args)
            for i, x in zip(positions, xs):
                full[i] = x
            return func(*full, **kwargs)

        recorded = _Recorded(call, False, "vmap")
        outs = _core.func_vmap(recorded, tensors, axes)
        ods = tuple(out_dims) if isinstance(out_dims, (tuple, list)) else (out_dims,) * len(outs)
        if len(ods) != len(outs):
            raise ValueError(f"vmap: out_dims has {len(ods)} entries for {len(outs)} outputs")
        moved = [o if d == 0 else movedim(o, 0, d) for o, d in zip(outs, ods)]
        return recorded.pack(moved)

    return wrapper
