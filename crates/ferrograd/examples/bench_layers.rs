//! Forward + backward time of single layers, the cases of `bench/torch_layers.py`
//! with the same shapes and output format, to run side by side with it.
//!
//! Each case times `loss = (layer(x) * up).sum(); loss.backward()` (gradients of the input and
//! of every parameter), best and median of several repeats, after warm-up.
//!
//! `cargo run --release --example bench_layers -- [--repeats 20] [CASE ...]`

mod common;

use common::sorted_ms;

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

type Case = (&'static str, fn() -> Box<dyn Layer>, &'static [usize]);

/// Causal scaled dot-product attention with q = k = v = `x`, a contiguous `[N, H, T, E]` of
/// `examples/gpt`'s shape (whose q, k, v are strided views of one projection), timed as
/// `bench/torch_layers.py` times PyTorch's `F.scaled_dot_product_attention`.
struct SelfAttention;

impl Module for SelfAttention {}

impl Layer for SelfAttention {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        x.scaled_dot_product_attention(x, x, &Attention::new().causal(true))
    }
}

/// `x @ xᵀ` over a batch of small matrices: the products of attention with small heads and of
/// per-sample gradients (its backward is two more batched products, one of transposes).
struct Gram;

impl Module for Gram {}

impl Layer for Gram {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        x.matmul(&x.transpose(-2, -1))
    }
}

const CASES: [Case; 12] = [
    (
        "conv3x3_64",
        || Box::new(Conv2d::new(64, 64, 3).padding(1)),
        &[32, 64, 32, 32],
    ),
    (
        "conv5x5_lenet1",
        || Box::new(Conv2d::new(1, 8, 5).padding(2)),
        &[128, 1, 28, 28],
    ),
    (
        "conv5x5_lenet2",
        || Box::new(Conv2d::new(8, 16, 5).padding(2)),
        &[128, 8, 14, 14],
    ),
    (
        "convT_dcgan",
        || Box::new(ConvTranspose2d::new(128, 64, 4).stride(2).padding(1)),
        &[64, 128, 7, 7],
    ),
    (
        "maxpool2",
        || Box::new(MaxPool2d::new(2, 2)),
        &[128, 16, 28, 28],
    ),
    ("bn2d", || Box::new(BatchNorm2d::new(64)), &[32, 64, 32, 32]),
    ("lstm", || Box::new(Lstm::new(32, 128)), &[64, 50, 32]),
    ("gru", || Box::new(Gru::new(32, 128)), &[64, 50, 32]),
    (
        "attention_gpt",
        || Box::new(SelfAttention),
        &[12, 4, 64, 32],
    ),
    ("bmm_4", || Box::new(Gram), &[65536, 4, 4]),
    ("bmm_16", || Box::new(Gram), &[8192, 16, 16]),
    ("bmm_64", || Box::new(Gram), &[1024, 64, 64]),
];

fn run(name: &str, make: fn() -> Box<dyn Layer>, shape: &[usize], repeats: usize) {
    manual_seed(0);
    let layer = make();
    let x = Tensor::randn(shape, DType::F32, &mut StdRng::seed_from_u64(0)).requires_grad();
    let step = || {
        let y = layer.forward(&x, Mode::Train);
        let up = Tensor::ones(y.shape(), DType::F32);
        drop((&y * &up).sum().backward());
    };
    let times = sorted_ms(3, repeats, step);
    println!(
        "RESULT ferrograd_layers {name} shape={shape:?} fwd+bwd_ms: min={:.3} median={:.3} (n={repeats})",
        times[0],
        times[repeats / 2]
    );
}

/// Forward+backward times of the layer cases of `bench/torch_layers.py`.
#[derive(clap::Parser)]
struct Args {
    /// Timed repetitions of each case (after one warm-up).
    #[arg(long, default_value_t = 20)]
    repeats: usize,
    /// The cases to run, by name (all when none is given).
    cases: Vec<String>,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    for (name, make, shape) in CASES {
        if args.cases.is_empty() || args.cases.iter().any(|a| a == name) {
            run(name, make, shape, args.repeats.max(1));
        }
    }
}
