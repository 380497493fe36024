//! Differentially private training (DP-SGD, Abadi et al. 2016) of an MLP (784-128-10) on
//! MNIST: each example's gradient, from `func::vmap` of `func::grad`, is clipped to norm `C`;
//! the clipped gradients are summed, Gaussian noise of deviation `σ·C` is added, and SGD steps
//! by their mean. Prints the test accuracy after each epoch beside the privacy spent, ε at the
//! given δ, from the Rényi accountant of the subsampled Gaussian mechanism (Mironov 2017;
//! batches are drawn by shuffling, as most DP-SGD code does, where the analysis assumes each
//! example is sampled with probability q = batch / N).
//!
//! `scripts/fetch-data.sh && cargo run --release --example dp_sgd -- [--noise 1.1] [--clip 1]`

use std::path::PathBuf;

use clap::Parser;
use ferrograd::data::Mnist;
use ferrograd::func;
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

mod common;

#[derive(Parser)]
#[command(about = "DP-SGD on MNIST with per-example gradients from vmap(grad)")]
struct Args {
    /// Folder of the MNIST IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Epochs.
    #[arg(long, default_value_t = 2, value_parser = common::count)]
    epochs: usize,
    /// Examples per step.
    #[arg(long, default_value_t = 256, value_parser = common::count)]
    batch: usize,
    /// SGD's learning rate.
    #[arg(long, default_value_t = 0.2, value_parser = common::rate)]
    lr: f64,
    /// The norm C each example's gradient is clipped to.
    #[arg(long, default_value_t = 1.0, value_parser = common::rate)]
    clip: f64,
    /// The noise multiplier σ: the noise's deviation is σ·C.
    #[arg(long, default_value_t = 1.1, value_parser = common::rate)]
    noise: f64,
    /// The δ at which ε is reported.
    #[arg(long, default_value_t = 1e-5, value_parser = common::rate)]
    delta: f64,
    /// Seed of the weights, the batches and the noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() {
    if let Err(e) = run(Args::parse()).map(|_| ()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

/// The MLP's logits for `x` `[N, 784]` with weights `p`.
fn logits(p: &[Tensor], x: &Tensor) -> Tensor {
    x.linear(&p[0], Some(&p[1]))
        .relu()
        .linear(&p[2], Some(&p[3]))
}

/// One example's gradient of the loss, flattened: `a` is the weights, then the image `[784]`
/// and the label (0-d, i64).
fn example_gradient(a: &[Tensor]) -> Tensor {
    let (x, y) = (a[4].unsqueeze(0), a[5].unsqueeze(0));
    let loss = |p: &[Tensor]| CrossEntropy::new().loss(&logits(p, &x), &y);
    let g = func::grad(loss, &a[..4].iter().collect::<Vec<_>>());
    let flat: Vec<Tensor> = g.iter().map(|t| t.reshape(&[t.numel()])).collect();
    Tensor::cat(&flat.iter().collect::<Vec<_>>(), 0)
}

/// One DP-SGD step on the examples `x` `[B, 784]`, `y` `[B]`.
fn step(params: &[Param], x: &Tensor, y: &Tensor, args: &Args, rng: &mut StdRng) {
    let weights: Vec<Tensor> = params.iter().map(|p| p.tensor().detach()).collect();
    let mut inputs: Vec<&Tensor> = weights.iter().collect();
    inputs.extend([x, y]);
    let per_example = func::vmap(
        example_gradient,
        &[None, None, None, None, Some(0), Some(0)],
    )(&inputs);
    // Each row scaled to norm at most C: min(1, C / ‖g‖).
    let norms = per_example.square().sum_axes(&[1], true).sqrt();
    let scale = norms
        .add_scalar(1e-12)
        .rdiv_scalar(args.clip)
        .clamp(0.0, 1.0);
    let summed = (&per_example * &scale).sum_axes(&[0], false);
    let noise = &Tensor::randn(summed.shape(), DType::F32, rng) * (args.noise * args.clip);
    let update = &(&summed + &noise) * (args.lr / x.shape()[0] as f64);
    let mut start = 0;
    for (p, w) in params.iter().zip(&weights) {
        let part = update.narrow(0, start, w.numel()).reshape(w.shape());
        p.set(&(w - &part));
        start += w.numel();
    }
}

/// ε at `delta` after `steps` steps of the Gaussian mechanism with noise multiplier `sigma`,
/// each on a sample of rate `q`: the Rényi divergence of order α of the subsampled mechanism,
/// `log Σₖ C(α,k) (1−q)^(α−k) qᵏ exp((k²−k)/2σ²) / (α−1)` per step (Mironov, Talwar and Zhang
/// 2019, integer α), summed over the steps and turned into (ε, δ) at the best α.
fn epsilon(q: f64, sigma: f64, steps: usize, delta: f64) -> f64 {
    (2..=256u32)
        .map(|alpha| {
            let a = f64::from(alpha);
            let terms: Vec<f64> = (0..=alpha)
                .map(|k| {
                    let k = f64::from(k);
                    let log_binom = ln_gamma(a + 1.0) - ln_gamma(k + 1.0) - ln_gamma(a - k + 1.0);
                    let log_q = if k > 0.0 { k * q.ln() } else { 0.0 };
                    log_binom
                        + (a - k) * (1.0 - q).ln()
                        + log_q
                        + (k * k - k) / (2.0 * sigma * sigma)
                })
                .collect();
            let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let log_sum = top + terms.iter().map(|t| (t - top).exp()).sum::<f64>().ln();
            steps as f64 * log_sum / (a - 1.0) + (1.0 / delta).ln() / (a - 1.0)
        })
        .fold(f64::INFINITY, f64::min)
}

/// `ln Γ(x)` for `x ≥ 1` (Stirling's series, shifted up to 10: exact to about 1e-13).
fn ln_gamma(x: f64) -> f64 {
    let (mut x, mut shift) = (x, 0.0);
    while x < 10.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let series = 1.0 / (12.0 * x) - 1.0 / (360.0 * x.powi(3)) + 1.0 / (1260.0 * x.powi(5))
        - 1.0 / (1680.0 * x.powi(7));
    shift + (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + series
}

fn accuracy(params: &[Param], test: &Mnist) -> f64 {
    let p: Vec<Tensor> = params.iter().map(|p| p.tensor().detach()).collect();
    let predicted = no_grad(|| logits(&p, &test.images))
        .argmax(1)
        .to_vec::<i64>();
    let hits = predicted
        .iter()
        .zip(&test.labels)
        .filter(|(a, b)| **a == i64::from(**b))
        .count();
    hits as f64 / test.labels.len() as f64
}

/// Trains; the last epoch's test accuracy.
fn run(args: Args) -> Result<f64, String> {
    let load = |train| Mnist::load(&args.data, train).map_err(|e| e.to_string());
    let (train, test) = (load(true)?, load(false)?);
    manual_seed(args.seed);
    let init = |shape: &[usize], fan_in: usize| {
        let t = with_default_rng(|rng| Tensor::randn(shape, DType::F32, rng));
        Param::new(&t * (1.0 / (fan_in as f64).sqrt()))
    };
    let params = [
        init(&[128, 784], 784),
        init(&[128], 784),
        init(&[10, 128], 128),
        init(&[10], 128),
    ];
    let n = train.labels.len();
    let labels = Tensor::from_vec(train.labels.iter().map(|&l| i64::from(l)).collect(), &[n]);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut order: Vec<usize> = (0..n).collect();
    let (mut steps, mut last) = (0, 0.0);
    for epoch in 1..=args.epochs {
        let start = std::time::Instant::now();
        order.shuffle(&mut rng);
        for batch in order.chunks(args.batch).filter(|b| b.len() == args.batch) {
            let (x, y) = (
                train.images.index_select(0, batch),
                labels.index_select(0, batch),
            );
            step(&params, &x, &y, &args, &mut rng);
            steps += 1;
        }
        let eps = epsilon(args.batch as f64 / n as f64, args.noise, steps, args.delta);
        last = accuracy(&params, &test);
        println!(
            "epoch {epoch}: test accuracy {:.4}, ε = {eps:.2} at δ = {:e} (σ = {}, C = {}, q = {:.5}, {steps} steps), {:.1} s",
            last,
            args.delta,
            args.noise,
            args.clip,
            args.batch as f64 / n as f64,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_training_learns_and_accounts() {
        let data = common::tiny_mnist("dp-sgd-example", 600, 100);
        let data = data.to_str().unwrap();
        let argv = [
            "dp_sgd", "--data", data, "--epochs", "3", "--batch", "50", "--noise", "0.5",
        ];
        let accuracy = run(Args::try_parse_from(argv).unwrap()).unwrap();
        assert!(accuracy > 0.5, "{accuracy}"); // ten classes: chance is 0.1
        let missing = run(Args::try_parse_from(["dp_sgd", "--data", "/nonexistent"]).unwrap());
        assert!(missing.unwrap_err().contains("scripts/fetch-data.sh"));
        for bad in [["--noise", "0"], ["--batch", "0"], ["--clip", "-1"]] {
            assert!(Args::try_parse_from([&["dp_sgd"][..], &bad[..]].concat()).is_err());
        }
    }

    #[test]
    fn the_accountant_gives_known_values() {
        // Abadi et al.'s MNIST setting: q = 0.01, σ = 4, 10,000 steps give ε ≈ 1.25 by the
        // moments accountant at δ = 1e-5 (the Rényi accountant is a little tighter); no noise
        // to speak of gives no privacy.
        let eps = epsilon(0.01, 4.0, 10_000, 1e-5);
        assert!((0.9..1.4).contains(&eps), "{eps}");
        assert!(epsilon(0.01, 0.3, 1000, 1e-5) > 50.0);
        // More steps spend more.
        assert!(
            epsilon(256.0 / 60_000.0, 1.1, 469, 1e-5) < epsilon(256.0 / 60_000.0, 1.1, 938, 1e-5)
        );
    }

    #[test]
    fn the_log_gamma_is_exact_at_integers() {
        for n in 1..20u32 {
            let factorial: f64 = (1..n).map(f64::from).product();
            assert!(
                (ln_gamma(f64::from(n)) - factorial.ln()).abs() < 1e-10,
                "{n}"
            );
        }
    }
}
