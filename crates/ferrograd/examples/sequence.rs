//! An LSTM reading MNIST digits as sequences: each image is 28 time steps of 28 pixels (one
//! row per step), an LSTM(28, 128) reads them in order and a dense layer classifies its last
//! output. Test accuracy per epoch, with the flags of `mnist`.
//!
//! `scripts/fetch-data.sh && cargo run --release --example sequence -- [--epochs N] ...`

use std::process::ExitCode;

use ferrograd::prelude::*;

mod common;
mod mnist_common;

/// The last time step of a `[N, T, H]` sequence: `[N, H]`.
struct LastStep;

impl Module for LastStep {}

impl Layer for LastStep {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let steps = x.shape()[1];
        x.narrow(1, steps - 1, 1).squeeze(1)
    }
}

fn rows_lstm(lr: f64) -> Model {
    let net = Net::new(vec![
        Box::new(Reshape::new(&[28, 28])),
        Box::new(Lstm::new(28, 128)),
        Box::new(LastStep),
        Box::new(Dense::new(128, 10)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(lr))
}

fn main() -> ExitCode {
    mnist_common::main("sequence", 3, rows_lstm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_on_tiny_data() {
        let data = common::tiny_mnist("sequence-example", 200, 40);
        let argv = [
            "sequence",
            "--data",
            data.to_str().unwrap(),
            "--epochs",
            "4",
            "--lr",
            "0.01",
            "--batch-size",
            "20",
        ];
        let results = mnist_common::run_with("sequence", 2, rows_lstm, &argv).unwrap();
        mnist_common::assert_learned(&results);
    }
}
