//! An autoencoder on MNIST (seed 000 lists it among tinynn's unsupervised models): dense
//! 784-256-64-256-784, or convolutional with `--conv`, trained on the mean squared error of its
//! reconstructions. Prints the test-set reconstruction MSE per epoch, writes a PNG of test
//! digits above their reconstructions and an SVG of the loss curves.
//!
//! `scripts/fetch-data.sh && cargo run --release --features pictures --example autoencoder -- --out-dir docs`

use std::time::Instant;

use clap::Parser;
use ferrograd::data::Mnist;
use ferrograd::prelude::*;
use image::{imageops, GrayImage, Luma};
use indicatif::{ProgressBar, ProgressStyle};

mod common;

#[derive(Parser)]
#[command(about = "A dense or convolutional autoencoder on MNIST")]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 5)]
    epochs: u64,
    /// The convolutional autoencoder instead of the dense one.
    #[arg(long)]
    conv: bool,
    /// Train on the first N training images only (a quick run).
    #[arg(long, value_parser = common::count)]
    limit: Option<usize>,
    #[command(flatten)]
    training: common::Training,
    #[command(flatten)]
    output: common::Output,
}

/// 784-256-64-256-784 with ReLU, a sigmoid output in [0, 1] as the pixels.
fn dense() -> Net {
    Net::new(vec![
        Box::new(Dense::new(784, 256)),
        Box::new(Relu::new()),
        Box::new(Dense::new(256, 64)),
        Box::new(Relu::new()),
        Box::new(Dense::new(64, 256)),
        Box::new(Relu::new()),
        Box::new(Dense::new(256, 784)),
        Box::new(Sigmoid::new()),
    ])
}

/// Two stride-2 convolutions down to 32×7×7, two transposed convolutions back up.
fn convolutional() -> Net {
    Net::new(vec![
        Box::new(Reshape::new(&[1, 28, 28])),
        Box::new(Conv2d::new(1, 16, 3).stride(2).padding(1)),
        Box::new(Relu::new()),
        Box::new(Conv2d::new(16, 32, 3).stride(2).padding(1)),
        Box::new(Relu::new()),
        Box::new(
            ConvTranspose2d::new(32, 16, 3)
                .stride(2)
                .padding(1)
                .output_padding(1),
        ),
        Box::new(Relu::new()),
        Box::new(
            ConvTranspose2d::new(16, 1, 3)
                .stride(2)
                .padding(1)
                .output_padding(1),
        ),
        Box::new(Sigmoid::new()),
        Box::new(Reshape::new(&[784])),
    ])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let (t, out) = (&args.training, &args.output);
    let load = |train| {
        Mnist::load(&t.data, train)
            .map_err(|e| format!("{e}\n(fetch the data with: scripts/fetch-data.sh)"))
    };
    let (train, test) = (load(true)?, load(false)?);
    let n = args
        .limit
        .map_or(train.images.shape()[0], |l| l.min(train.images.shape()[0]));
    let images = train.images.narrow(0, 0, n);
    let data = TensorDataset::new(images.clone(), images);
    manual_seed(t.seed);
    let net = if args.conv { convolutional() } else { dense() };
    let mut model = Model::new(net, Mse::new(), Adam::new(t.lr));
    std::fs::create_dir_all(&out.out_dir)?;
    let mut curves = Vec::new();
    for epoch in 0..args.epochs {
        let start = Instant::now();
        let batches = BatchIterator::epoch(&data, t.batch_size, true, t.seed, epoch, false);
        let bar = ProgressBar::new(batches.batches() as u64);
        bar.set_style(ProgressStyle::with_template(
            "epoch {prefix} {bar:30} {pos}/{len}",
        )?);
        bar.set_prefix(epoch.to_string());
        let (mut loss_sum, mut seen) = (0.0f64, 0usize);
        for batch in batches {
            loss_sum +=
                model.train_step(&batch.inputs, &batch.targets) as f64 * batch.indices.len() as f64;
            seen += batch.indices.len();
            bar.inc(1);
        }
        bar.finish_and_clear();
        let secs = start.elapsed().as_secs_f64();
        let test_mse = reconstruction_mse(&model, &test.images);
        println!(
            "Epoch {epoch} train MSE {:.5}  test MSE {test_mse:.5}  {secs:.2} s",
            loss_sum / seen as f64
        );
        curves.push((loss_sum / seen as f64, test_mse));
    }
    let name = if args.conv {
        "autoencoder_conv"
    } else {
        "autoencoder"
    };
    let grid = out.out_dir.join(format!("{name}.png"));
    digits_and_reconstructions(&model, &test.images, 10).save(&grid)?;
    let curve = out.out_dir.join(format!("{name}_loss.svg"));
    let points: Vec<(f64, f64, f64)> = (1..)
        .zip(&curves)
        .map(|(e, c)| (e as f64, c.0, c.1))
        .collect();
    common::plot_curves(
        &curve,
        "reconstruction MSE per epoch",
        ["epoch", "MSE"],
        ["train", "test"],
        &points,
    )?;
    println!("wrote {} and {}", grid.display(), curve.display());
    if let Some(path) = &out.save {
        model.net().save_safetensors(path)?;
    }
    Ok(())
}

/// The mean squared error of the model's reconstructions of `images`, 1,000 at a time.
fn reconstruction_mse(model: &Model, images: &Tensor) -> f64 {
    let n = images.shape()[0];
    let total: f64 = (0..n)
        .step_by(1000)
        .map(|i| {
            let x = images.narrow(0, i, 1000.min(n - i));
            (&model.predict(&x) - &x).square().sum().item()
        })
        .sum();
    total / images.numel() as f64
}

/// The first `count` test digits in a row, their reconstructions in the row below, scaled 3×.
fn digits_and_reconstructions(model: &Model, images: &Tensor, count: usize) -> GrayImage {
    let x = images.narrow(0, 0, count);
    let rows = [x.to_vec::<f32>(), model.predict(&x).to_vec::<f32>()];
    let grid = GrayImage::from_fn(28 * count as u32, 56, |px, py| {
        let (row, digit) = ((py / 28) as usize, (px / 28) as usize);
        let at = digit * 784 + (py % 28) as usize * 28 + (px % 28) as usize;
        Luma([(rows[row][at].clamp(0.0, 1.0) * 255.0).round() as u8])
    });
    imageops::resize(
        &grid,
        grid.width() * 3,
        grid.height() * 3,
        imageops::FilterType::Nearest,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_convolutional_train_and_draw_on_tiny_data() {
        let data = common::tiny_mnist("autoencoder-example", 64, 20);
        let dir = data.to_str().unwrap();
        for conv in [false, true] {
            let mut argv = vec![
                "autoencoder",
                "--data",
                dir,
                "--out-dir",
                dir,
                "--epochs",
                "2",
            ];
            if conv {
                argv.push("--conv");
            }
            run(Args::try_parse_from(argv).unwrap()).unwrap();
            let name = if conv {
                "autoencoder_conv"
            } else {
                "autoencoder"
            };
            let grid = image::open(data.join(format!("{name}.png"))).unwrap();
            assert_eq!((grid.width(), grid.height()), (28 * 10 * 3, 56 * 3));
            assert!(data.join(format!("{name}_loss.svg")).exists());
        }
    }
}
