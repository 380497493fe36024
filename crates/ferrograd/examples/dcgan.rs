//! DCGAN on MNIST (seed 000 lists it among tinynn's unsupervised models), the network of
//! `bench/torch_dcgan.py` layer for layer: a generator from 100 normal numbers
//! through a dense layer and two transposed convolutions to a 28×28 image in [−1, 1], a
//! discriminator of two convolutions and a dense layer to a logit; sigmoid cross-entropy on
//! logits, Adam 2e-4 with β₁ = 0.5, batch 64. After each epoch it writes an 8×8 grid of the
//! samples of one fixed noise batch and prints both losses.
//!
//! `scripts/fetch-data.sh && cargo run --release --features pictures --example dcgan -- --epochs 1 --out-dir docs`

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use ferrograd::data::Mnist;
use ferrograd::prelude::*;
use image::{imageops, GrayImage, Luma};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::SeedableRng;

mod common;

#[derive(Parser)]
#[command(about = "A DCGAN on MNIST")]
struct Args {
    /// Directory of the IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Passes over the training set.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Stop each epoch after this many steps (a quick run).
    #[arg(long, value_parser = common::count)]
    steps: Option<usize>,
    /// Seed of the weights, the noise and the shuffles.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    output: common::Output,
}

fn generator() -> Net {
    Net::new(vec![
        Box::new(Dense::new(100, 128 * 7 * 7)),
        Box::new(BatchNorm1d::new(128 * 7 * 7)),
        Box::new(Relu::new()),
        Box::new(Reshape::new(&[128, 7, 7])),
        Box::new(ConvTranspose2d::new(128, 64, 4).stride(2).padding(1)),
        Box::new(BatchNorm2d::new(64)),
        Box::new(Relu::new()),
        Box::new(ConvTranspose2d::new(64, 1, 4).stride(2).padding(1)),
        Box::new(Tanh::new()),
    ])
}

fn discriminator() -> Net {
    Net::new(vec![
        Box::new(Conv2d::new(1, 64, 4).stride(2).padding(1)),
        Box::new(LeakyRelu::new(0.2)),
        Box::new(Conv2d::new(64, 128, 4).stride(2).padding(1)),
        Box::new(BatchNorm2d::new(128)),
        Box::new(LeakyRelu::new(0.2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(128 * 7 * 7, 1)),
    ])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let train = Mnist::load(&args.data, true)
        .map_err(|e| format!("{e}\n(fetch the data with: scripts/fetch-data.sh)"))?;
    let n = train.images.shape()[0];
    // Pixels to [−1, 1], as the generator's tanh produces.
    let images = (&train.images * 2.0 - 1.0).reshape(&[n, 1, 28, 28]);
    let data = TensorDataset::new(images.clone(), images);
    manual_seed(args.seed);
    let (g, d) = (generator(), discriminator());
    let adam = || Adam::new(2e-4).betas(0.5, 0.999);
    let (mut opt_g, mut opt_d) = (adam(), adam());
    let mut rng = StdRng::seed_from_u64(args.seed);
    let fixed = Tensor::randn(&[64, 100], DType::F32, &mut rng);
    let (ones, zeros) = (
        Tensor::ones(&[64, 1], DType::F32),
        Tensor::zeros(&[64, 1], DType::F32),
    );
    let bce = SigmoidCrossEntropy::new();
    std::fs::create_dir_all(&args.output.out_dir)?;
    for epoch in 0..args.epochs {
        let start = Instant::now();
        let batches = BatchIterator::epoch(&data, 64, true, args.seed, epoch, true);
        let total = args
            .steps
            .map_or(batches.batches(), |s| s.min(batches.batches()));
        let bar = ProgressBar::new(total as u64);
        bar.set_style(ProgressStyle::with_template(
            "epoch {prefix} {bar:30} {pos}/{len} {msg}",
        )?);
        bar.set_prefix(epoch.to_string());
        let (mut sum_d, mut sum_g) = (0.0, 0.0);
        for (step, batch) in batches.take(total).enumerate() {
            let z = Tensor::randn(&[64, 100], DType::F32, &mut rng);
            let fake = Layer::forward(&g, &z, Mode::Train);
            // The discriminator: real images towards 1, generated ones towards 0.
            let loss_d = &bce.loss(&Layer::forward(&d, &batch.inputs, Mode::Train), &ones)
                + &bce.loss(&Layer::forward(&d, &fake.detach(), Mode::Train), &zeros);
            opt_d.step(&d.params(), &loss_d.backward());
            // The generator: its images towards 1, through a discriminator that stays put.
            d.freeze();
            let loss_g = bce.loss(&Layer::forward(&d, &fake, Mode::Train), &ones);
            opt_g.step(&g.params(), &loss_g.backward());
            d.unfreeze();
            sum_d += loss_d.item();
            sum_g += loss_g.item();
            if step % 20 == 0 {
                bar.set_message(format!("D {:.3}  G {:.3}", loss_d.item(), loss_g.item()));
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let secs = start.elapsed().as_secs_f64();
        let path = args
            .output
            .out_dir
            .join(format!("dcgan_epoch_{}.png", epoch + 1));
        grid(&Layer::forward(&g, &fixed, Mode::Eval)).save(&path)?;
        println!(
            "Epoch {epoch}  loss D {:.4}  loss G {:.4}  {secs:.1} s ({:.2} s per 100 steps)  wrote {}",
            sum_d / total as f64,
            sum_g / total as f64,
            secs / total as f64 * 100.0,
            path.display()
        );
    }
    if let Some(path) = &args.output.save {
        g.save_safetensors(path)?;
    }
    Ok(())
}

/// 64 images `[64, 1, 28, 28]` in [−1, 1] as an 8×8 grid, scaled 2×.
fn grid(samples: &Tensor) -> GrayImage {
    let v = samples.to_vec::<f32>();
    let img = GrayImage::from_fn(8 * 28, 8 * 28, |x, y| {
        let k = (y / 28 * 8 + x / 28) as usize;
        let at = k * 784 + (y % 28) as usize * 28 + (x % 28) as usize;
        Luma([((v[at].clamp(-1.0, 1.0) + 1.0) * 127.5).round() as u8])
    });
    imageops::resize(&img, 8 * 56, 8 * 56, imageops::FilterType::Nearest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_both_networks_and_draws_samples_on_tiny_data() {
        let data = common::tiny_mnist("dcgan-example", 128, 10);
        let dir = data.to_str().unwrap();
        let argv = ["dcgan", "--data", dir, "--out-dir", dir, "--steps", "2"];
        run(Args::try_parse_from(argv).unwrap()).unwrap();
        let grid = image::open(data.join("dcgan_epoch_1.png")).unwrap();
        assert!(grid.width() >= 8 * 28 && grid.height() >= 8 * 28);
    }
}
