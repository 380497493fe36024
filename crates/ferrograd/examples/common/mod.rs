//! Helpers shared by the examples (each uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Instant;

use ferrograd::prelude::*;

/// Flags of the examples that train on MNIST with Adam.
#[derive(clap::Args)]
pub struct Training {
    /// Directory of the IDX files (MNIST, or Fashion-MNIST: same format).
    #[arg(long, default_value = "data/mnist")]
    pub data: PathBuf,
    /// Images per step.
    #[arg(long, default_value_t = 128, value_parser = count)]
    pub batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3, value_parser = rate)]
    pub lr: f64,
    /// Seed of the weights and the shuffles.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// clap's parser of a rate (a learning rate): a finite number above 0, so that a careless
/// flag is an error naming it rather than a panic or NaN losses later.
pub fn rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not a finite number above 0"))
    }
}

/// clap's parser of a count that must be at least 1 (sizes, steps, threads).
pub fn count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}")),
    }
}

/// Flags of the examples that write pictures and weights.
#[derive(clap::Args)]
pub struct Output {
    /// Where to write the pictures.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// Save the trained network's weights to this safetensors file.
    #[arg(long)]
    pub save: Option<PathBuf>,
}

/// The seed's MNIST classifier: MLP 784-400-100-10 with ReLU, softmax cross-entropy and Adam at
/// learning rate `lr` (weights from the generator seeded by `manual_seed`).
pub fn seed_mlp(lr: f64) -> Model {
    let net = Net::new(vec![
        Box::new(Dense::new(784, 400)),
        Box::new(Relu::new()),
        Box::new(Dense::new(400, 100)),
        Box::new(Relu::new()),
        Box::new(Dense::new(100, 10)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(lr))
}

/// The CNN of `bench/torch_train.py --model cnn`: conv 5×5 (1→8, padding 2) → ReLU → max-pool 2 →
/// conv 5×5 (8→16, padding 2) → ReLU → max-pool 2 → dense 784→10, softmax cross-entropy and
/// Adam at `lr`. The images arrive as rows of 784 pixels and are viewed as 1×28×28.
pub fn small_cnn(lr: f64) -> Model {
    let net = Net::new(vec![
        Box::new(Reshape::new(&[1, 28, 28])),
        Box::new(Conv2d::new(1, 8, 5).padding(2)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Conv2d::new(8, 16, 5).padding(2)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(16 * 7 * 7, 10)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(lr))
}

/// The model's outputs for `images`, `batch` rows at a time: the activations of a whole test
/// set at once would dominate the peak memory of a convolutional network.
pub fn predict_in_batches(model: &Model, images: &Tensor, batch: usize) -> Tensor {
    let n = images.shape()[0];
    let parts: Vec<Tensor> = (0..n)
        .step_by(batch)
        .map(|i| model.predict(&images.narrow(0, i, batch.min(n - i))))
        .collect();
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
}

/// Peak resident memory of this process in MiB (Linux `VmHWM`), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Writes `n_train` and `n_test` 28×28 images, labelled 0–9 in turn (noise with a bright band
/// where the label says), as the four MNIST IDX files in a fresh directory named for `name`:
/// data for the examples' tests.
#[cfg(test)]
pub fn tiny_mnist(name: &str, n_train: usize, n_test: usize) -> PathBuf {
    use rand::{Rng, SeedableRng};
    let dir = scratch(name);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (prefix, n) in [("train", n_train), ("t10k", n_test)] {
        let count = (n as u32).to_be_bytes();
        let mut images = [
            &[0, 0, 8, 3][..],
            &count,
            &28u32.to_be_bytes(),
            &28u32.to_be_bytes(),
        ]
        .concat();
        // Noise, with a bright band of two rows at the label's place: a pattern a model can
        // learn in a few steps, so that the tests can ask that it did.
        for i in 0..n {
            let band = 4 + 2 * (i % 10);
            images.extend((0..784).map(|p| match p / 28 {
                row if row == band || row == band + 1 => 255,
                _ => rng.gen_range(0..96u8),
            }));
        }
        let mut labels = [&[0, 0, 8, 1][..], &count].concat();
        labels.extend((0..n).map(|i| (i % 10) as u8));
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), images).unwrap();
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), labels).unwrap();
    }
    dir
}

/// A fresh, empty directory for one test's files.
#[cfg(test)]
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrograd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A training curve and a held-out one against the step or epoch (`points`: x, train,
/// held out), written as an SVG file; `labels` names the two.
#[cfg(feature = "pictures")]
pub fn plot_curves(
    path: &std::path::Path,
    caption: &str,
    axes: [&str; 2],
    labels: [&str; 2],
    points: &[(f64, f64, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let first = points.first().map_or(0.0, |p| p.0);
    let last = points.last().map_or(1.0, |p| p.0).max(first + 1.0);
    let top = points.iter().map(|p| p.1.max(p.2)).fold(0.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(first..last, 0.0..top.max(1e-3))?;
    chart
        .configure_mesh()
        .x_desc(axes[0])
        .y_desc(axes[1])
        .draw()?;
    for (k, colour) in [BLUE, RED].into_iter().enumerate() {
        let series = points
            .iter()
            .map(move |p| (p.0, if k == 0 { p.1 } else { p.2 }));
        chart
            .draw_series(LineSeries::new(series, colour.stroke_width(2)))?
            .label(labels[k])
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart.configure_series_labels().border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

/// Milliseconds of `runs` calls of `f` after `warm_up` calls, sorted: the first is the best,
/// the middle one the median.
pub fn sorted_ms(warm_up: usize, runs: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..warm_up {
        f();
    }
    let mut ms: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}
