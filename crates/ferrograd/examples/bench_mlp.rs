//! One epoch of the seed's MLP (784-400-100-10, ReLU, softmax cross-entropy, Adam 1e-3,
//! batch 128) on 60,000 random inputs: seconds per epoch, the optimizer's share, peak memory.
//!
//! `cargo run --release --example bench_mlp`

use std::time::{Duration, Instant};

mod common;

use common::{peak_rss_mib, seed_mlp};
use ferrograd::data::{one_hot, BatchIterator, TensorDataset};
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn main() {
    let mut rng = StdRng::seed_from_u64(0);
    let n = 60_000;
    let x = Tensor::rand_uniform(&[n, 784], 0.0, 1.0, DType::F32, &mut rng);
    let labels: Vec<u8> = (0..n).map(|i| (i * 7 % 10) as u8).collect();
    let data = TensorDataset::new(x, one_hot(&labels, 10));
    manual_seed(0);
    let mut model = seed_mlp(1e-3);
    for epoch in 0..3 {
        let (mut grad_time, mut opt_time) = (Duration::ZERO, Duration::ZERO);
        let start = Instant::now();
        for batch in BatchIterator::epoch(&data, 128, true, 0, epoch, false) {
            let t = Instant::now();
            let grads = {
                let pred = model.forward(&batch.inputs);
                model.backward(&pred, &batch.targets).1
            };
            grad_time += t.elapsed();
            let t = Instant::now();
            model.apply_grads(&grads);
            opt_time += t.elapsed();
        }
        let total = start.elapsed().as_secs_f64();
        println!(
            "epoch {epoch}: {total:.3} s ({:.0} samples/s); forward+backward {:.3} s, optimizer {:.3} s ({:.1}%), data {:.3} s",
            n as f64 / total,
            grad_time.as_secs_f64(),
            opt_time.as_secs_f64(),
            opt_time.as_secs_f64() / total * 100.0,
            total - grad_time.as_secs_f64() - opt_time.as_secs_f64()
        );
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak RSS {mib:.0} MiB (includes the 180 MiB of random inputs)");
    }
}
