#!/usr/bin/env python3
"""Runs every model that `cargo test --features ferrograd/onnx --test io onnx` exported (in
target/onnx-models) in onnxruntime, at the traced batch size and at another, and compares with
the outputs ferrograd computed: 1e-5 (f32). Needs onnx, onnxruntime, numpy and safetensors.
"""

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime
from safetensors.numpy import load_file

root = pathlib.Path(__file__).resolve().parent.parent
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
    print(f"check-onnx: {path.name}: onnxruntime gives ferrograd's outputs at batch "
          f"{io['input'].shape[0]} and {io['input_other'].shape[0]}")
print(f"check-onnx: {len(models)} models, largest difference {worst:.1e}")
