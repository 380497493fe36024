//! Replays the reference run of `scripts/tinynn_reference.py --dump DIR` (the seed's MNIST
//! training written directly in numpy): same initial parameters, same sample order, one epoch
//! through ferrograd's `Model`, printing each step's loss next to the reference's.
//!
//! `cargo run --release --example mnist_reference -- DIR [--data data/mnist]`

use std::path::{Path, PathBuf};

use ferrograd::data::Mnist;
use ferrograd::metrics::accuracy;
use ferrograd::prelude::*;

#[cfg(test)]
mod common;

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, String> {
    std::fs::read(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
}

fn run(dir: &Path, data: &Path) -> Result<(), String> {
    let (train, test) = (
        Mnist::load(data, true).map_err(|e| e.to_string())?,
        Mnist::load(data, false).map_err(|e| e.to_string())?,
    );
    let dense = |i: usize, fan_in: usize, fan_out: usize| -> Result<Box<dyn Layer>, String> {
        let floats = |bytes: Vec<u8>| -> Vec<f32> {
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        // The reference keeps W as [in, out] (x @ W); Dense holds PyTorch's [out, in].
        let w = Tensor::try_from_vec(
            floats(read(dir, &format!("param{i}.f32"))?),
            &[fan_in, fan_out],
        )
        .map_err(|e| e.to_string())?
        .t()
        .contiguous();
        let b = Tensor::try_from_vec(
            floats(read(dir, &format!("param{}.f32", i + 1))?),
            &[fan_out],
        )
        .map_err(|e| e.to_string())?;
        Ok(Box::new(Dense::from_tensors(w, b)))
    };
    let net = Net::new(vec![
        dense(0, 784, 400)?,
        Box::new(Relu::new()),
        dense(2, 400, 100)?,
        Box::new(Relu::new()),
        dense(4, 100, 10)?,
    ]);
    let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(1e-3));
    let order: Vec<usize> = read(dir, "order.u32")?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as usize)
        .collect();
    let reference: Vec<f64> = read(dir, "losses.f64")?
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for (step, batch) in order.chunks(128).enumerate() {
        let x = train.images.index_select(0, batch);
        let y = train.targets.index_select(0, batch);
        let loss = model.train_step(&x, &y) as f64;
        if step < 5 || step % 50 == 0 || step + 1 == reference.len() {
            let want = reference.get(step).copied().unwrap_or(f64::NAN);
            println!(
                "step {step:3}: loss {loss:.6}  reference {want:.6}  relative difference {:.1e}",
                (loss - want).abs() / want
            );
        }
    }
    let scores = model.predict(&test.images);
    println!(
        "test accuracy after the epoch: {}",
        accuracy(&scores, &test.labels)
    );
    Ok(())
}

/// Replays the numpy reference's epoch and prints both losses step by step.
#[derive(clap::Parser)]
struct Args {
    /// The directory `scripts/tinynn_reference.py --dump DIR` wrote.
    dir: PathBuf,
    /// Directory of the MNIST IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
}

fn main() -> std::process::ExitCode {
    let args = <Args as clap::Parser>::parse();
    match run(&args.dir, &args.data) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `values` as the little-endian file `name` of `dir`.
    fn write<const N: usize>(dir: &Path, name: &str, values: impl Iterator<Item = [u8; N]>) {
        std::fs::write(dir.join(name), values.flatten().collect::<Vec<u8>>()).unwrap();
    }

    #[test]
    fn replays_a_dump_in_the_references_format() {
        // Weights [in, out] as numpy keeps them, zero biases, one shuffled epoch of 256 images.
        let data = common::tiny_mnist("mnist_reference-example", 256, 40);
        let dir = common::scratch("mnist_reference-dump");
        for (i, (fan_in, fan_out)) in [(784, 400), (400, 100), (100, 10)].into_iter().enumerate() {
            let w = (0..fan_in * fan_out).map(|k| ((k % 7) as f32 * 0.01 - 0.03).to_le_bytes());
            write(&dir, &format!("param{}.f32", 2 * i), w);
            let b = (0..fan_out).map(|_| 0f32.to_le_bytes());
            write(&dir, &format!("param{}.f32", 2 * i + 1), b);
        }
        write(&dir, "order.u32", (0..256u32).rev().map(u32::to_le_bytes));
        write(
            &dir,
            "losses.f64",
            [2.3f64, 2.2].into_iter().map(f64::to_le_bytes),
        );
        run(&dir, &data).unwrap();
    }
}
