//! tinynn's nn_paint: a picture learned as a function from pixel coordinates (x, y) to colour
//! (r, g, b) by an MLP trained with the mean squared error, then painted back pixel by pixel.
//! Paints a picture it generates, or any PNG/JPEG given with `--image`, and prints the PSNR of
//! the painting against the original.
//!
//! `cargo run --release --features pictures --example nn_paint -- --out-dir docs`

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use ferrograd::prelude::*;
use image::{ImageReader, Rgb, RgbImage};
use indicatif::{ProgressBar, ProgressStyle};

mod common;

#[derive(Parser)]
#[command(about = "Paint a picture with an MLP from pixel coordinates to colours")]
struct Args {
    /// A PNG or JPEG to paint (scaled to --size); a generated picture when absent.
    #[arg(long)]
    image: Option<PathBuf>,
    /// The painting's width and height in pixels.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    size: u32,
    /// Passes over every pixel.
    #[arg(long, default_value_t = 2000)]
    epochs: u64,
    /// Pixels per step.
    #[arg(long, default_value_t = 256, value_parser = common::count)]
    batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 3e-3, value_parser = common::rate)]
    lr: f64,
    /// Seed of the weights and the shuffles.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    output: common::Output,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let picture = match &args.image {
        Some(path) => ImageReader::open(path)?
            .decode()?
            .resize_exact(args.size, args.size, image::imageops::FilterType::Triangle)
            .to_rgb8(),
        None => generated(args.size),
    };
    std::fs::create_dir_all(&args.output.out_dir)?;
    picture.save(args.output.out_dir.join("nn_paint_original.png"))?;
    let (coords, colours) = pixels(&picture);
    let data = TensorDataset::new(coords.clone(), colours.clone());

    manual_seed(args.seed);
    let net = Net::new(vec![
        Box::new(Dense::new(2, 64)),
        Box::new(Relu::new()),
        Box::new(Dense::new(64, 64)),
        Box::new(Relu::new()),
        Box::new(Dense::new(64, 64)),
        Box::new(Relu::new()),
        Box::new(Dense::new(64, 3)),
        Box::new(Sigmoid::new()),
    ]);
    let mut model = Model::new(net, Mse::new(), Adam::new(args.lr));
    let bar = ProgressBar::new(args.epochs);
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} epochs {msg}",
    )?);
    let start = Instant::now();
    for epoch in 0..args.epochs {
        let batches = BatchIterator::epoch(&data, args.batch_size, true, args.seed, epoch, false);
        for batch in batches {
            model.train_step(&batch.inputs, &batch.targets);
        }
        if epoch % 10 == 0 {
            bar.set_message(format!(
                "PSNR {:.2} dB",
                psnr(&model.predict(&coords), &colours)
            ));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let painted = model.predict(&coords);
    println!(
        "{} epochs in {secs:.2} s ({:.3} s per epoch): PSNR {:.2} dB against the original",
        args.epochs,
        secs / args.epochs.max(1) as f64,
        psnr(&painted, &colours)
    );
    let path = args.output.out_dir.join("nn_paint.png");
    to_image(&painted, picture.width(), picture.height()).save(&path)?;
    println!("wrote {}", path.display());
    if let Some(path) = &args.output.save {
        model.net().save_safetensors(path)?;
    }
    Ok(())
}

/// Concentric rings over a diagonal gradient, with a sharp-edged square: smooth areas and
/// edges, which an MLP of coordinates learns at different speeds.
fn generated(size: u32) -> RgbImage {
    RgbImage::from_fn(size, size, |x, y| {
        let (u, v) = (x as f64 / size as f64, y as f64 / size as f64);
        let r = ((u - 0.5).powi(2) + (v - 0.5).powi(2)).sqrt();
        let ring = 0.5 + 0.5 * (r * 25.0).cos();
        let square = (0.6..0.85).contains(&u) && (0.15..0.4).contains(&v);
        let c = if square {
            [0.95, 0.85, 0.1]
        } else {
            [ring, 0.6 * u + 0.2, 0.8 * (1.0 - v) * ring + 0.1]
        };
        Rgb(c.map(|c| (c * 255.0).round() as u8))
    })
}

/// Coordinates in [0, 1]² `[H·W, 2]` and colours in [0, 1] `[H·W, 3]`, row by row.
fn pixels(picture: &RgbImage) -> (Tensor, Tensor) {
    let (w, h) = picture.dimensions();
    let mut coords = Vec::with_capacity((w * h * 2) as usize);
    let mut colours = Vec::with_capacity((w * h * 3) as usize);
    for (x, y, p) in picture.enumerate_pixels() {
        coords.extend([
            x as f32 / (w - 1).max(1) as f32,
            y as f32 / (h - 1).max(1) as f32,
        ]);
        colours.extend(p.0.map(|c| c as f32 / 255.0));
    }
    let n = (w * h) as usize;
    (
        Tensor::from_vec(coords, &[n, 2]),
        Tensor::from_vec(colours, &[n, 3]),
    )
}

/// The colours `[H·W, 3]` in [0, 1] as an image.
fn to_image(colours: &Tensor, w: u32, h: u32) -> RgbImage {
    let values = colours.to_vec::<f32>();
    RgbImage::from_fn(w, h, |x, y| {
        let at = ((y * w + x) * 3) as usize;
        Rgb([0, 1, 2].map(|c| (values[at + c].clamp(0.0, 1.0) * 255.0).round() as u8))
    })
}

/// Peak signal-to-noise ratio in dB of colours in [0, 1].
fn psnr(painted: &Tensor, original: &Tensor) -> f64 {
    let mse = (painted - original).square().mean().item();
    10.0 * (1.0 / mse.max(1e-12)).log10()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paints_a_given_picture() {
        let dir = common::scratch("nn_paint-example");
        let source = dir.join("stripes.png");
        image::RgbImage::from_fn(20, 12, |x, _| image::Rgb([(x * 12) as u8, 40, 200]))
            .save(&source)
            .unwrap();
        let argv = [
            "nn_paint",
            "--image",
            source.to_str().unwrap(),
            "--size",
            "16",
        ];
        let rest = ["--epochs", "3", "--out-dir", dir.to_str().unwrap()];
        run(Args::try_parse_from(argv.iter().chain(&rest)).unwrap()).unwrap();
        for name in ["nn_paint_original.png", "nn_paint.png"] {
            let painted = image::open(dir.join(name)).unwrap();
            assert_eq!((painted.width(), painted.height()), (16, 16), "{name}");
        }
        let missing = ["nn_paint", "--image", "/nonexistent.png", "--epochs", "1"];
        assert!(run(Args::try_parse_from(missing).unwrap()).is_err());
    }
}
