//! The seed's MNIST classifier: MLP 784-400-100-10, ReLU, softmax cross-entropy, Adam 1e-3,
//! batch 128, on real MNIST (or Fashion-MNIST: same format).
//!
//! `scripts/fetch-data.sh && cargo run --release --example mnist -- [--data DIR] [--epochs N]
//!  [--batch-size N] [--lr X] [--seed N] [--threads N] [--save PATH] [--resume PATH]`

use std::process::ExitCode;

mod common;
mod mnist_common;

fn main() -> ExitCode {
    mnist_common::main("mnist", 20, common::seed_mlp)
}
