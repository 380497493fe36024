//! A model from PyTorch, trained by ferrograd: the MNIST CNN of the peer `torch_cnn.py` as
//! PyTorch initializes it, exported by `torch.onnx.export`
//! (`tests/fixtures/onnx/torch_mnist_cnn.onnx`, made by `scripts/make-torch-onnx-fixtures.py`),
//! imported with `onnx::load` and trained on real MNIST with Adam, with the flags and
//! per-epoch lines of the `mnist` example.
//!
//! `scripts/fetch-data.sh && cargo run --release --features onnx --example onnx_finetune`

use std::process::ExitCode;

use ferrograd::prelude::*;

mod common;
mod mnist_common;

/// PyTorch's exported network with the MNIST job's loss and optimizer.
fn pytorch_cnn(lr: f64) -> Model {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/onnx/torch_mnist_cnn.onnx"
    );
    let cnn = ferrograd::onnx::load(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Model::new(
        Net::new(vec![Box::new(cnn)]),
        SoftmaxCrossEntropy::new(),
        Adam::new(lr),
    )
}

fn main() -> ExitCode {
    mnist_common::main("onnx_finetune", 1, pytorch_cnn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_on_tiny_data() {
        let data = common::tiny_mnist("onnx_finetune-example", 200, 40);
        let argv = [
            "onnx_finetune",
            "--data",
            data.to_str().unwrap(),
            "--epochs",
            "3",
        ];
        let results = mnist_common::run_with("onnx_finetune", 1, pytorch_cnn, &argv).unwrap();
        mnist_common::assert_learned(&results);
    }
}
