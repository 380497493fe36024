//! A small CNN on real MNIST (or Fashion-MNIST): conv 5×5 (1→8, padding 2) → ReLU → max-pool 2
//! → conv 5×5 (8→16, padding 2) → ReLU → max-pool 2 → dense 784→10, the network of
//! `bench/torch_train.py --model cnn`, softmax cross-entropy, Adam 1e-3, batch 128.
//!
//! `scripts/fetch-data.sh && cargo run --release --example mnist_cnn -- [--epochs N] ...`
//! (the flags of `mnist`)

use std::process::ExitCode;

mod common;
mod mnist_common;

fn main() -> ExitCode {
    mnist_common::main("mnist_cnn", 2, common::small_cnn)
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
            "3",
        ];
        let results = mnist_common::run_with("mnist_cnn", 2, common::small_cnn, &argv).unwrap();
        mnist_common::assert_learned(&results);
    }
}
