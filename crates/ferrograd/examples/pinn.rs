//! A physics-informed network: a small MLP `u(x)` trained so that `u″(x) = −π² sin(πx)` on
//! [0, 1] with `u(0) = u(1) = 0`, whose solution is `sin(πx)`. The derivatives of the network
//! in its input come from forward mode (`func::jvp` inside `func::jvp`); the training gradient
//! is reverse mode over them. Prints the loss and the largest error against the exact
//! solution, and draws both.
//!
//! `cargo run --release --features pictures --example pinn -- --out-dir docs`

use std::f64::consts::PI;
use std::path::PathBuf;

use clap::Parser;
use ferrograd::func;
use ferrograd::prelude::*;
use plotters::prelude::*;

mod common;

#[derive(Parser)]
#[command(about = "A physics-informed network for u'' = -π² sin(πx) on [0, 1]")]
struct Args {
    /// Adam steps.
    #[arg(long, default_value_t = 2000, value_parser = common::count)]
    steps: usize,
    /// Collocation points in [0, 1] (the boundary points included).
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(3..=100_000))]
    points: u64,
    /// Width of the two hidden layers.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=4096))]
    width: u64,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 3e-3, value_parser = common::rate)]
    lr: f64,
    /// Seed of the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where to write pinn.svg.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let error = run(Args::parse())?;
    println!("largest error against sin(πx): {error:.2e}");
    Ok(())
}

/// `u(x)` for points `x` `[N, 1]`: a tanh MLP with weights `p` (three layers).
fn u(p: &[Tensor], x: &Tensor) -> Tensor {
    let h = x.linear(&p[0], Some(&p[1])).tanh();
    let h = h.linear(&p[2], Some(&p[3])).tanh();
    h.linear(&p[4], Some(&p[5]))
}

/// `u″` at each point: the network acts on each row alone, so the derivative along a tangent
/// of ones is each row's own derivative; the tangent of that tangent is the second.
fn second_derivative(p: &[Tensor], x: &Tensor) -> Tensor {
    let ones = x.ones_like();
    let slope = |q: &[Tensor]| func::jvp(|r: &[Tensor]| u(p, &r[0]), &[&q[0]], &[&ones]).1;
    func::jvp(slope, &[x], &[&ones]).1
}

/// The residual of the equation at the points, and the boundary values, squared and averaged.
fn loss(p: &[Tensor], x: &Tensor, source: &Tensor, ends: &Tensor) -> Tensor {
    let residual = &second_derivative(p, x) + source;
    &residual.square().mean() + &u(p, ends).square().mean()
}

fn run(args: Args) -> Result<f64, Box<dyn std::error::Error>> {
    manual_seed(args.seed);
    let (n, w) = (args.points as usize, args.width as usize);
    let params: Vec<(String, Param)> = [[w, 1], [w, 0], [w, w], [w, 0], [1, w], [1, 0]]
        .iter()
        .enumerate()
        .map(|(i, &[rows, cols])| {
            let shape: Vec<usize> = if cols == 0 {
                vec![rows]
            } else {
                vec![rows, cols]
            };
            let fan_in = if cols == 0 { 1.0 } else { cols as f64 };
            let t = with_default_rng(|rng| Tensor::randn(&shape, DType::F64, rng));
            (format!("p{i}"), Param::new(&t * (1.0 / fan_in.sqrt())))
        })
        .collect();
    let x = Tensor::linspace(0.0, 1.0, n, DType::F64).reshape(&[n, 1]);
    let source = &(&x * PI).sin() * (PI * PI);
    let ends = Tensor::from_vec(vec![0.0f64, 1.0], &[2, 1]);
    let mut opt = Adam::new(args.lr);
    for step in 0..=args.steps {
        let p: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor()).collect();
        let l = loss(&p, &x, &source, &ends);
        if step % (args.steps / 10).max(1) == 0 {
            println!("step {step:5}: loss {:.3e}", l.item());
        }
        if step < args.steps {
            opt.step(&params, &l.backward());
        }
    }
    let p: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor().detach()).collect();
    let grid = Tensor::linspace(0.0, 1.0, 201, DType::F64).reshape(&[201, 1]);
    let learned = no_grad(|| u(&p, &grid)).reshape(&[201]).to_vec::<f64>();
    let xs = grid.reshape(&[201]).to_vec::<f64>();
    let error = xs
        .iter()
        .zip(&learned)
        .map(|(x, v)| (v - (PI * x).sin()).abs())
        .fold(0.0, f64::max);
    let path = args.out_dir.join("pinn.svg");
    plot(&path, &xs, &learned, error)?;
    println!("wrote {}", path.display());
    Ok(error)
}

/// The learned solution over the exact one.
fn plot(
    path: &std::path::Path,
    xs: &[f64],
    learned: &[f64],
    error: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("u'' = -π² sin(πx), u(0) = u(1) = 0; largest error {error:.1e}"),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0.0f64..1.0f64, -0.1f64..1.15f64)?;
    chart.configure_mesh().x_desc("x").y_desc("u").draw()?;
    let exact = xs.iter().map(|&x| (x, (PI * x).sin()));
    chart
        .draw_series(LineSeries::new(exact, BLUE.stroke_width(4)))?
        .label("exact: sin(πx)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    let net = xs.iter().zip(learned).map(|(&x, &v)| (x, v));
    chart
        .draw_series(LineSeries::new(net, RED.stroke_width(2)))?
        .label("network")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart.configure_series_labels().border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_solves_the_equation_and_is_drawn() {
        let dir = common::scratch("pinn-example");
        let argv = ["pinn", "--steps", "600", "--out-dir", dir.to_str().unwrap()];
        let error = run(Args::try_parse_from(argv).unwrap()).unwrap();
        assert!(error < 5e-3, "largest error {error}");
        let svg = std::fs::read_to_string(dir.join("pinn.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn flags_are_checked_before_training() {
        for bad in [["--points", "2"], ["--width", "0"], ["--lr", "-1"]] {
            let argv = [&["pinn"][..], &bad[..]].concat();
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }
}
