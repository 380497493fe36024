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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_saves_and_resumes_on_tiny_data() {
        let data = common::tiny_mnist("mnist-example", 300, 50);
        let (data, ck) = (data.to_str().unwrap(), data.join("ck.safetensors"));
        let ck = ck.to_str().unwrap();
        let run = |argv: &[&str]| mnist_common::run_with("mnist", 20, common::seed_mlp, argv);
        let first = run(&["mnist", "--data", data, "--epochs", "1", "--save", ck]).unwrap();
        let rest = run(&["mnist", "--data", data, "--epochs", "3", "--resume", ck]).unwrap();
        assert_eq!(rest.len(), 2, "the resumed run starts after epoch 1");
        mnist_common::assert_learned(&[first, rest].concat());
        let missing = run(&["mnist", "--data", "/nonexistent", "--epochs", "1"]).unwrap_err();
        assert!(missing.contains("scripts/fetch-data.sh"), "{missing}");
        // Careless flags are clap's errors, naming the flag, before anything runs.
        for flag in ["--batch-size=0", "--lr=NaN", "--lr=-1", "--threads=0"] {
            let err = run(&["mnist", "--data", data, flag]).unwrap_err();
            let name = flag.split('=').next().unwrap();
            assert!(err.contains(name) && err.contains("invalid value"), "{err}");
        }
    }
}
