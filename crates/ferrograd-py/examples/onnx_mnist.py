"""Classifies the MNIST test set with an ONNX model in onnxruntime: a runtime that knows
nothing of ferrograd runs the network ferrograd trained.

    cargo run --release --features ferrograd/onnx --example mnist_cnn -- --epochs 1 \\
        --export-onnx target/mnist_cnn.onnx
    python crates/ferrograd-py/examples/onnx_mnist.py target/mnist_cnn.onnx

It prints the accuracy, which is the one the training run printed for its last epoch.
"""

import argparse

import numpy as np
import onnxruntime

from ferrograd.data import load_mnist


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an ONNX file (mnist or mnist_cnn --export-onnx)")
    parser.add_argument("--data-dir", default="data/mnist")
    args = parser.parse_args()
    images, labels = load_mnist(args.data_dir, train=False)
    images, labels = np.asarray(images, dtype=np.float32), np.asarray(labels)
    session = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    hits = 0
    for start in range(0, len(labels), 1000):
        (scores,) = session.run(None, {name: images[start : start + 1000]})
        hits += int((scores.argmax(axis=1) == labels[start : start + 1000]).sum())
    print(f"onnxruntime: {hits} of {len(labels)} test images, accuracy {hits / len(labels):.4f}")


if __name__ == "__main__":
    main()
