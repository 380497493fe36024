"""``torch.autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``hvp`` and
``vhp`` of a function of tensors, with PyTorch's arguments and return structure.

They are built on reverse mode as PyTorch builds them: ``jvp`` and ``hvp`` by the
double-backward trick (the vector-Jacobian product is linear in its cotangent, so
differentiating it with respect to that cotangent gives the Jacobian-vector product), and
``jacobian`` by one vector-Jacobian product per output element."""

from .. import enable_grad, ones_like, stack, zeros, zeros_like
from .._core import Tensor
from .._core import grad as _core_grad

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


def _as_tuple(x, name):
    """``(tuple_of_tensors, was_a_tuple)``."""
    if isinstance(x, (tuple, list)):
        items, was_tuple = tuple(x), True
    else:
        items, was_tuple = (x,), False
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: entry {i} must be a Tensor, got {type(t).__name__}")
    return items, was_tuple


def _unpack(items, was_tuple):
    return tuple(items) if was_tuple else items[0]


def _leaves(inputs, create_graph):
    """The inputs as the function sees them: with ``create_graph``, a tensor that needs a
    gradient is followed through (the results stay differentiable with respect to it); every
    other one becomes a fresh leaf."""
    return tuple(x if create_graph and x.requires_grad else x.detach().requires_grad_() for x in inputs)


def _grad(outputs, inputs, grad_outputs, create_graph, strict, what):
    found = _core_grad(
        list(outputs),
        list(inputs),
        grad_outputs=None if grad_outputs is None else list(grad_outputs),
        create_graph=create_graph,
        allow_unused=True,
    )
    out = []
    for i, (g, x) in enumerate(zip(found, inputs)):
        if g is None:
            if strict:
                raise RuntimeError(f"{what}: output does not depend on input {i} (strict=True)")
            g = zeros_like(x)
        out.append(g)
    return tuple(out)


def _check_v(v, like, name):
    if v is None:
        for i, t in enumerate(like):
            if t.numel() != 1:
                raise RuntimeError(
                    f"{name}: v can be omitted only for a function with one-element outputs; output {i} "
                    f"has shape {tuple(t.shape)}"
                )
        return tuple(ones_like(t) for t in like)
    v, _ = _as_tuple(v, f"{name}: v")
    if len(v) != len(like):
        raise RuntimeError(f"{name}: v has {len(v)} entries for {len(like)} tensors")
    for i, (a, b) in enumerate(zip(v, like)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"{name}: entry {i} of v has shape {tuple(a.shape)}, expected {tuple(b.shape)}")
    return v


def _call(func, inputs, name):
    outputs, out_tuple = _as_tuple(func(*inputs), f"{name}: the function's output")
    return outputs, out_tuple


def _detached(ts, create_graph):
    return ts if create_graph else tuple(t.detach() for t in ts)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), vᵀ·J)``: the outputs and the vector-Jacobian product, each in the
    structure of ``func``'s output and of ``inputs``."""
    inputs, in_tuple = _as_tuple(inputs, "vjp: inputs")
    with enable_grad():
        xs = _leaves(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, "vjp")
        v = _check_v(v, outputs, "vjp")
        grads = _grad(outputs, xs, v, create_graph, strict, "vjp")
    return _unpack(_detached(outputs, create_graph), out_tuple), _unpack(_detached(grads, create_graph), in_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), J·v)``: the outputs and the Jacobian-vector product (by the
    double-backward trick, as PyTorch computes it)."""
    inputs, in_tuple = _as_tuple(inputs, "jvp: inputs")
    v = _check_v(v, inputs, "jvp")
    with enable_grad():
        xs = _leaves(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, "jvp")
        cotangents = tuple(zeros_like(y).requires_grad_() for y in outputs)
        pulled = _grad(outputs, xs, cotangents, True, strict, "jvp")
        # J·v is the derivative of ⟨Jᵀu, v⟩ in u.
        result = _grad(pulled, cotangents, v, create_graph, strict, "jvp")
    return _unpack(_detached(outputs, create_graph), out_tuple), _unpack(_detached(result, create_graph), out_tuple)


def _jacobian_rows(output, inputs, create_graph, strict):
    """For one output, its Jacobian with respect to each input, shaped output ++ input."""
    flat = output.reshape(-1)
    per_input = [[] for _ in inputs]
    for k in range(flat.numel()):
        grads = _grad([flat[k]], inputs, None, create_graph, strict, "jacobian")
        for rows, g in zip(per_input, grads):
            rows.append(g)
    out = []
    for x, rows in zip(inputs, per_input):
        shape = tuple(output.shape) + tuple(x.shape)
        if rows:
            out.append(stack(rows, 0).reshape(*shape) if shape else rows[0].reshape(()))
        else:
            out.append(zeros(*shape, dtype=x.dtype) if shape else zeros_like(x))
    return out


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``, each block shaped ``output.shape +
    input.shape``: a tensor for one input and one output, a tuple over the inputs or the
    outputs, or a tuple (over outputs) of tuples (over inputs), as PyTorch returns it.
    ``vectorize`` changes nothing; only ``strategy="reverse-mode"`` is available."""
    del vectorize
    if strategy != "reverse-mode":
        raise NotImplementedError("jacobian: only strategy='reverse-mode' is available (forward mode is not built)")
    inputs, in_tuple = _as_tuple(inputs, "jacobian: inputs")
    with enable_grad():
        xs = _leaves(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, "jacobian")
        blocks = [_detached(tuple(_jacobian_rows(y, xs, create_graph, strict)), create_graph) for y in outputs]
    if out_tuple:
        return tuple(_unpack(b, in_tuple) for b in blocks)
    return _unpack(blocks[0], in_tuple)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Hessian of ``func`` (one-element output) at ``inputs``, shaped ``input.shape +
    input.shape``; for several inputs a tuple of tuples of blocks, as PyTorch returns it."""
    del vectorize
    if outer_jacobian_strategy != "reverse-mode":
        raise NotImplementedError("hessian: only outer_jacobian_strategy='reverse-mode' is available")
    inputs, in_tuple = _as_tuple(inputs, "hessian: inputs")

    def gradient(*xs):
        return _one_element_gradient(func, xs, strict, "hessian")[1]

    # One block per (output, input) pair: the gradient's entries are the rows.
    result = jacobian(gradient, inputs, create_graph=create_graph, strict=strict)
    return result if in_tuple else result[0][0]


def _one_element_gradient(func, xs, strict, name):
    """``func(*xs)``, which must hold one element, and its gradient with a graph."""
    (y,), _ = _call(func, xs, name)
    if y.numel() != 1:
        raise RuntimeError(f"{name}: the function must return one element, got shape {tuple(y.shape)}")
    return y, _grad([y.reshape(())], xs, None, True, strict, name)


def _second_order(func, inputs, v, create_graph, strict, name, product):
    """``(y, product(gradient, xs, v))`` in PyTorch's structure, for ``vhp`` and ``hvp``."""
    inputs, in_tuple = _as_tuple(inputs, f"{name}: inputs")
    v = _check_v(v, inputs, name)
    with enable_grad():
        xs = _leaves(inputs, create_graph)
        y, grads = _one_element_gradient(func, xs, strict, name)
        result = product(grads, xs, v)
    return _detached((y,), create_graph)[0], _unpack(_detached(result, create_graph), in_tuple)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), vᵀ·H)`` for a function of one-element output."""

    def product(grads, xs, v):
        return _grad(grads, xs, v, create_graph, strict, "vhp")

    return _second_order(func, inputs, v, create_graph, strict, "vhp", product)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), H·v)`` for a function of one-element output, by the double-backward
    trick (the same as ``vhp`` where the Hessian is symmetric)."""

    def product(grads, xs, v):
        cotangents = tuple(zeros_like(x).requires_grad_() for x in xs)
        back = _grad(grads, xs, cotangents, True, strict, "hvp")
        return _grad(back, cotangents, v, create_graph, strict, "hvp")

    return _second_order(func, inputs, v, create_graph, strict, "hvp", product)
