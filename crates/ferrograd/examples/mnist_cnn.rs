//! A small CNN on real MNIST (or Fashion-MNIST): conv 5×5 (1→8, padding 2) → ReLU → max-pool 2
//! → conv 5×5 (8→16, padding 2) → ReLU → max-pool 2 → dense 784→10, the network of
//! `../shared/bench/torch_cnn.py`, softmax cross-entropy, Adam 1e-3, batch 128.
//!
//! `scripts/fetch-data.sh && cargo run --release --example mnist_cnn -- [--epochs N] ...`
//! (the flags of `mnist`)

use std::process::ExitCode;

use ferrograd::prelude::*;

mod common;
mod mnist_common;

/// The images arrive as rows of 784 pixels and are viewed as 1×28×28.
fn cnn(lr: f64) -> Model {
    let net = Net::new(vec![
        Box::new(Reshape::new(&[1, 28, 28])),
        Box::new(Conv2d::new(1, 8, 5).padding(2)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Conv2d::new(8, 16, 5).padding(2)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(16 * 7 * 7, 10)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(lr))
}

fn main() -> ExitCode {
    mnist_common::main("mnist_cnn", 2, cnn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_on_tiny_data() {
        let data = common::tiny_mnist("mnist_cnn-example", 200, 40);
        let argv = [
            "mnist_cnn",
            "--data",
            data.to_str().unwrap(),
            "--epochs",
            "1",
        ];
        mnist_common::run_with("mnist_cnn", 2, cnn, &argv).unwrap();
    }
}
