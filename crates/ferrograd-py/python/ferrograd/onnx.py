"""``torch.onnx``: ``export`` writes a module as an ONNX model that any ONNX runtime runs;
``load`` reads one (ferrograd's or another framework's) as a trainable layer.

The module's forward runs once on the example inputs while the core records each op it calls
(``ferrograd.graph`` tracing); the core's exporter writes the record, with the parameters and
buffers as initializers under their ``state_dict`` names. Control flow that depends on values
is recorded as it went for these inputs, as with PyTorch's tracing exporter.
"""

import os

from . import _core
from ._core import Tensor

__all__ = ["export", "load", "OnnxModule", "TrainingMode"]

OnnxModule = _core.OnnxModule


class TrainingMode:
    """``torch.onnx.TrainingMode``: ferrograd exports in eval mode."""

    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


_IGNORED = {
    "dynamo",
    "external_data",
    "optimize",
    "verify",
    "report",
    "profile",
    "artifacts_dir",
    "fallback",
    "do_constant_folding",
    "verbose",
    "operator_export_type",
    "custom_opsets",
    "export_modules_as_functions",
    "autograd_inlining",
}


def _split_args(args):
    """The example inputs as a tuple; a trailing dict (forward's keywords) must be empty."""
    if isinstance(args, Tensor):
        return (args,)
    args = tuple(args)
    if args and isinstance(args[-1], dict):
        if args[-1]:
            raise NotImplementedError("onnx.export: keyword inputs to forward are not supported")
        args = args[:-1]
    for a in args:
        if not isinstance(a, Tensor):
            raise TypeError(f"onnx.export: the inputs must be tensors, got {type(a).__name__}")
    return args


def _dynamic_batch(dynamic_axes):
    """Whether axis 0 is free: the only free axis the exporter keeps."""
    if not dynamic_axes:
        return False
    for name, axes in dynamic_axes.items():
        listed = axes.keys() if isinstance(axes, dict) else axes
        if any(int(a) != 0 for a in listed):
            raise NotImplementedError(f"onnx.export: only axis 0 can be dynamic, {name!r} asks for {list(listed)}")
    return True


def _named_state(model):
    """The module's parameters and buffers by their ``state_dict`` names."""
    named = []
    if hasattr(model, "named_parameters"):
        named += list(model.named_parameters())
    if hasattr(model, "named_buffers"):
        named += [(n, b) for n, b in model.named_buffers() if isinstance(b, Tensor)]
    return named


def export(
    model,
    args=(),
    f=None,
    export_params=True,
    *,
    input_names=None,
    output_names=None,
    opset_version=None,
    dynamic_axes=None,
    training=TrainingMode.EVAL,
    keep_initializers_as_inputs=None,
    dynamic_shapes=None,
    kwargs=None,
    **options,
):
    """``torch.onnx.export``: writes ``model`` (called on ``args``) to ``f``, a path or a binary
    file object. ``dynamic_axes`` may free axis 0 (the batch) of the inputs and outputs.
    Opsets 17 (the default) and 18. The path is replaced only once the model is written."""
    unknown = set(options) - _IGNORED
    if unknown:
        raise TypeError(f"onnx.export: unexpected arguments {sorted(unknown)}")
    if not export_params or keep_initializers_as_inputs:
        raise NotImplementedError("onnx.export: the parameters are always written as initializers")
    if training == TrainingMode.TRAINING:
        raise NotImplementedError("onnx.export: training mode is not exported")
    if dynamic_shapes is not None or kwargs:
        raise NotImplementedError("onnx.export: dynamic_shapes and kwargs are not supported")
    if f is None:
        raise TypeError("onnx.export: f (a path or a file object) is required")
    inputs = _split_args(args)
    names = list(input_names or [])
    names += [f"input{k}" if k else "input" for k in range(len(names), len(inputs))]
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        data = _core.onnx_export(
            model,
            list(inputs),
            names[: len(inputs)],
            _named_state(model),
            list(output_names or []),
            _dynamic_batch(dynamic_axes),
            17 if opset_version is None else int(opset_version),
        )
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    if hasattr(f, "write"):
        f.write(data)
    else:
        _core.write_file(data, os.fspath(f))


def load(f):
    """An ONNX model (a path or a binary file object) as an ``OnnxModule``: called on the
    model's inputs, in order, it gives its output (a tuple when it has several), computed by
    ferrograd's ops; its parameters are the model's float weights under their names, so it
    trains and fine-tunes as any module. Operators ferrograd cannot run are named together,
    with their nodes."""
    if hasattr(f, "read"):
        data = f.read()
    else:
        with open(os.fspath(f), "rb") as file:
            data = file.read()
    return _core.onnx_load(data)
