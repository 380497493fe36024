"""``torch.autograd``'s names: ``grad`` (a tuple, one gradient per input), ``backward``
(gradients added to each leaf's ``.grad``), ``Function`` (an op with a backward of its own)
and ``functional`` (Jacobians, Hessians and their products)."""

from .._core import Tensor, grad
from . import functional
from .function import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "backward", "functional", "grad", "once_differentiable"]


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """PyTorch's ``torch.autograd.backward``: the gradients of ``tensors`` (weighted by
    ``grad_tensors``, one per tensor, needed for a tensor of more than one element) added to
    the ``.grad`` of every leaf they depend on, or of ``inputs`` only when given. The graph
    is always kept (``retain_graph`` changes nothing)."""
    del retain_graph
    outputs = _as_list(tensors)
    weights = [None] * len(outputs) if grad_tensors is None else _as_list(grad_tensors)
    if len(weights) != len(outputs):
        raise ValueError(f"backward: {len(weights)} grad_tensors for {len(outputs)} tensors")
    if inputs is None:
        for y, w in zip(outputs, weights):
            y.backward(w, create_graph=create_graph)
        return
    leaves = _as_list(inputs)
    found = grad(outputs, leaves, grad_outputs=weights, create_graph=create_graph, allow_unused=True)
    for leaf, g in zip(leaves, found):
        if g is not None:
            leaf.grad = g if leaf.grad is None else leaf.grad + g
