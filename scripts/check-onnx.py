#!/usr/bin/env python3
"""Runs every model that `cargo test --features ferrograd/onnx --test io onnx` exported (in
target/onnx-models) in onnxruntime, at the traced batch size and at another, and compares with
the outputs ferrograd computed: 1e-5 (f32). Needs onnx, onnxruntime, numpy and safetensors.

With model files as arguments (`gpt --export-onnx`'s, say), runs each in onnxruntime and in
ferrograd (`fg.onnx.load`) on random inputs of batch 3 (ids below the output's last size for an
integer input) and compares the two.
"""

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime
from safetensors.numpy import load_file

root = pathlib.Path(__file__).resolve().parent.parent


def compare_with_ferrograd(path):
    import ferrograd as fg

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        shape = [3] + [int(d) for d in i.shape[1:]]
        if "int64" in i.type:
            feeds[i.name] = rng.integers(0, session.get_outputs()[0].shape[-1], size=shape)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    got = session.run(None, feeds)[0]
    model = fg.onnx.load(str(path))
    out = model(*[fg.tensor(v) for v in feeds.values()])
    want = (out[0] if isinstance(out, tuple) else out).numpy()
    err = float(np.max(np.abs(got - want) / (1.0 + np.abs(want)), initial=0.0))
    if not err <= 1e-5:
        sys.exit(f"check-onnx: {path}: onnxruntime and ferrograd differ by {err:.2e}")
    print(f"check-onnx: {path}: onnxruntime and ferrograd agree at batch 3 ({err:.1e})")


if sys.argv[1:]:
    for arg in sys.argv[1:]:
        compare_with_ferrograd(pathlib.Path(arg))
    sys.exit(0)
models = sorted((root / "target" / "onnx-models").glob("*.onnx"))
if not models:
    sys.exit("check-onnx: no models in target/onnx-models: run the Rust ONNX tests first")
worst = 0.0
for path in models:
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    io = load_file(str(path.with_suffix(".io.safetensors")))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for suffix in ["", "_other"]:
        (got,) = session.run(None, {"input": io["input" + suffix]})
        want = io["output" + suffix]
        if got.shape != want.shape:
            sys.exit(f"check-onnx: {path.name}{suffix}: shape {got.shape}, ferrograd {want.shape}")
        err = float(np.max(np.abs(got - want) / (1.0 + np.abs(want)), initial=0.0))
        worst = max(worst, err)
        if not err <= 1e-5:
            sys.exit(f"check-onnx: {path.name}{suffix}: differs from ferrograd by {err:.2e}")
    print(
        f"check-onnx: {path.name}: onnxruntime gives ferrograd's outputs at batch "
        f"{io['input'].shape[0]} and {io['input_other'].shape[0]}"
    )
print(f"check-onnx: {len(models)} models, largest difference {worst:.1e}")
