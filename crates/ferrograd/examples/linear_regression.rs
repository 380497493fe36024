//! Seed 001's run in graph mode: y = 3x + N(0, 0.5²) on 100 points in [−1, 1], a weight w = 1
//! and a bias b = 0 fitted by plain gradient descent (lr 0.005) on the summed squared error for
//! 20 steps, printed as the seed prints them; then an SVG of the points and the fitted line.
//!
//! `cargo run --release --features pictures --example linear_regression -- --out-dir docs`

use std::path::PathBuf;

use clap::Parser;
use ferrograd::graph::{Feed, GradientDescentOptimizer, Graph, Session};
use ferrograd::prelude::*;
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

mod common;

#[derive(Parser)]
#[command(about = "Seed 001's linear regression in graph mode")]
struct Args {
    /// Seed of the noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Gradient descent steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Where to write linear_regression.svg.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let (xs, ys) = data(args.seed);

    // The seed's graph: placeholders for the data, variables for the parameters.
    let g = Graph::new();
    let x = g.placeholder("x");
    let y_ = g.placeholder("y");
    let w = g.variable("weight", Tensor::from_vec(vec![1.0f64], &[1, 1]));
    let b = g.variable("threshold", Tensor::scalar(0.0f64));
    let y = &(&x * &w) + &b;
    let loss = (&y - &y_).square().sum();
    let train_op = GradientDescentOptimizer::new(0.005).minimize(&loss);

    let feed = Feed::new().with(&x, xs.clone()).with(&y_, ys.clone());
    let mut sess = Session::new(&g);
    for step in 0..args.steps {
        let loss_value = sess.run(&loss, &feed)?.item();
        let mse = loss_value / xs.numel() as f64;
        println!("step: {step}, loss: {loss_value}, mse: {mse}");
        sess.run(&train_op, &feed)?;
    }
    let (w_value, b_value) = (sess.run(&w, &feed)?.item(), sess.run(&b, &feed)?.item());
    println!("w: {w_value}, b: {b_value}");

    let path = args.out_dir.join("linear_regression.svg");
    plot(&path, &xs.to_vec(), &ys.to_vec(), (w_value, b_value))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// 100 points in [−1, 1] and y = 3x + N(0, 0.5²) noise drawn from `seed`.
fn data(seed: u64) -> (Tensor, Tensor) {
    let xs = Tensor::linspace(-1.0, 1.0, 100, DType::F64);
    let mut rng = StdRng::seed_from_u64(seed);
    let noise = Normal::new(0.0, 0.5).expect("a valid deviation");
    let ys: Vec<f64> = xs
        .to_vec::<f64>()
        .iter()
        .map(|x| 3.0 * x + noise.sample(&mut rng))
        .collect();
    (xs, Tensor::from_vec(ys, &[100]))
}

/// The points and the line y = w·x + b.
fn plot(
    path: &std::path::Path,
    xs: &[f64],
    ys: &[f64],
    (w, b): (f64, f64),
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (640, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("y = 3x + noise; fitted y = {w:.3}x + {b:.3}"),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(-1.1f64..1.1f64, -5.0f64..5.0f64)?;
    chart.configure_mesh().x_desc("x").y_desc("y").draw()?;
    chart.draw_series(
        xs.iter()
            .zip(ys)
            .map(|(&x, &y)| Circle::new((x, y), 3, BLUE.filled())),
    )?;
    chart.draw_series(LineSeries::new(
        [-1.0, 1.0].map(|x| (x, w * x + b)),
        RED.stroke_width(2),
    ))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_and_plots() {
        let dir = common::scratch("linear_regression-example");
        let argv = ["linear_regression", "--out-dir", dir.to_str().unwrap()];
        run(Args::try_parse_from(argv).unwrap()).unwrap();
        let svg = std::fs::read_to_string(dir.join("linear_regression.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
    }
}
