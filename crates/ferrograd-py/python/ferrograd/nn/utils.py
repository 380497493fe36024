"""``ferrograd.nn.utils``: gradient clipping with PyTorch's names and numbers, on the
``.grad`` of each parameter, and ``rnn.pad_sequence``."""

import sys
import types

from .. import _core


def _with_grads(parameters):
    params = [parameters] if isinstance(parameters, _core.Tensor) else list(parameters)
    return [p for p in params if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales every ``.grad`` by ``max_norm / (total_norm + 1e-6)`` when that is below 1;
    returns the total norm of all gradients together (before clipping), as PyTorch's."""
    params = _with_grads(parameters)
    if not params:
        return _core.tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == float("inf"):
        total = max(float(p.grad.abs().max()) for p in params)
    elif norm_type == -float("inf"):
        total = min(float(p.grad.abs().min()) for p in params)
    elif norm_type == 2.0:
        total = _core._global_norm([p.grad for p in params])
    elif norm_type == 0.0:  # the count of non-zero entries, as PyTorch's order 0
        total = float(sum(int((p.grad != 0).sum()) for p in params))
    else:
        total = sum(float((p.grad.abs() ** norm_type).sum()) for p in params) ** (1.0 / norm_type)
    if error_if_nonfinite and not (total == total and total != float("inf")):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite")
    coef = min(float(max_norm) / (total + 1e-6), 1.0)
    if not coef >= 1.0:  # a factor of 1 changes no bit (a NaN factor still spreads, as in PyTorch)
        for p in params:
            p.grad = p.grad * coef
    return _core.tensor(total, dtype=params[0].grad.dtype)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Limits every ``.grad`` element to ``[−clip_value, clip_value]``."""
    for p in _with_grads(parameters):
        p.grad = p.grad.clamp(-float(clip_value), float(clip_value))


def parameters_to_vector(parameters):
    return _core.cat([p.reshape(-1) for p in parameters], 0)


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of ``vec`` into the parameters' values."""
    start = 0
    for p in parameters:
        n = p.numel()
        p.data = vec[start : start + n].reshape(*p.shape).detach()
        start += n


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Sequences of different lengths ``[T_i, *]`` padded with ``padding_value`` to the
    longest and stacked: ``[T, B, *]``, or ``[B, T, *]`` with ``batch_first``, as PyTorch's
    ``nn.utils.rnn.pad_sequence`` (differentiable in the sequences)."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        if missing:
            fill = _core.full((missing,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype)
            s = _core.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)
    return _core.stack(padded, 0 if batch_first else 1)


rnn = types.ModuleType("ferrograd.nn.utils.rnn", "PyTorch's ``nn.utils.rnn``: ``pad_sequence``.")
rnn.pad_sequence = pad_sequence
sys.modules[rnn.__name__] = rnn
