//! Helpers shared by the examples (each uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;

use ferrograd::prelude::*;

/// Flags of the examples that train on MNIST with Adam.
#[derive(clap::Args)]
pub struct Training {
    /// Directory of the IDX files (MNIST, or Fashion-MNIST: same format).
    #[arg(long, default_value = "data/mnist")]
    pub data: PathBuf,
    /// Images per step.
    #[arg(long, default_value_t = 128)]
    pub batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Seed of the weights and the shuffles.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
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

/// Peak resident memory of this process in MiB (Linux `VmHWM`), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
