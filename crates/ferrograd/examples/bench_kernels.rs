//! Kernel throughput: f32 matmul GFLOP/s (square sizes and the MLP's forward and backward
//! shapes, transposed operands as views), the three products of two convolutions, fused
//! attention forward and backward, element-wise add/mul and sum GB/s next to a plain memory
//! copy of the same size, and one Adam step on 1M weights with ordinary, tiny and zero
//! gradients (tiny gradients square to subnormals, which x86 computes slowly unless they are
//! flushed: the three figures should match).
//!
//! `cargo run --release --example bench_kernels`

use std::hint::black_box;
use std::time::Instant;

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// Best seconds per call of `f` over 5 repeats that each last at least `min_time`. The best,
/// not the median: on a shared machine noise only ever slows a run down.
fn time_it(mut f: impl FnMut(), min_time: f64) -> f64 {
    f();
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64().max(1e-7);
    let iters = ((min_time / one) as usize).max(1);
    let mut samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[0]
}

fn randn(shape: &[usize], rng: &mut StdRng) -> Tensor {
    Tensor::randn(shape, DType::F32, rng)
}

fn main() {
    let mut rng = StdRng::seed_from_u64(0);
    println!("f32 matmul (GFLOP/s, best of 5)");
    for n in [128, 256, 512, 1024, 2048] {
        let (a, b) = (randn(&[n, n], &mut rng), randn(&[n, n], &mut rng));
        let s = time_it(|| drop(black_box(a.matmul(&b))), 0.3);
        println!(
            "  {n:>4}x{n}   @ {n}x{n}: {:7.1}",
            2.0 * (n * n * n) as f64 / s / 1e9
        );
    }
    // The MLP 784-400-100-10 at batch 128: forward products, then the weight and input
    // gradients of backward, which read transposed views.
    let x = randn(&[128, 784], &mut rng);
    let w1 = randn(&[784, 400], &mut rng);
    let h1 = randn(&[128, 400], &mut rng);
    let w2 = randn(&[400, 100], &mut rng);
    let h2 = randn(&[128, 100], &mut rng);
    let w3 = randn(&[100, 10], &mut rng);
    // Dense keeps PyTorch's [out, in] weight: its forward reads the transposed view.
    let w1_out_in = Tensor::from_vec(w1.t().to_vec::<f32>(), &[400, 784]);
    let w2_out_in = Tensor::from_vec(w2.t().to_vec::<f32>(), &[100, 400]);
    let cases: [(&str, &Tensor, Tensor); 9] = [
        ("fwd1 128x784 @ 784x400", &x, w1.clone()),
        (
            "fwd1 128x784 @ 784x400 (W [out, in], W^T view)",
            &x,
            w1_out_in.t(),
        ),
        (
            "fwd2 128x400 @ 400x100 (W [out, in], W^T view)",
            &h1,
            w2_out_in.t(),
        ),
        ("fwd2 128x400 @ 400x100", &h1, w2.clone()),
        ("fwd3 128x100 @ 100x10 ", &h2, w3.clone()),
        ("dW1  784x128 @ 128x400 (x^T view)", &x, h1.clone()),
        ("dW2  400x128 @ 128x100 (h1^T view)", &h1, h2.clone()),
        ("dX2  128x100 @ 100x400 (W2^T view)", &h2, w2.t()),
        ("dX1  128x400 @ 400x784 (W1^T view)", &h1, w1.t()),
    ];
    for (name, a, b) in cases {
        let a = if name.starts_with("dW") {
            a.t()
        } else {
            (*a).clone()
        };
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
        let s = time_it(|| drop(black_box(a.matmul(&b))), 0.3);
        println!("  {name}: {:7.1}", 2.0 * (m * k * n) as f64 / s / 1e9);
    }

    conv_products(&mut rng);
    attention_timings(&mut rng);
    gelu_timings(&mut rng);

    println!("element-wise and reductions, f32 (GB/s of data read + written, best of 5)");
    for n in [1usize << 20, 16 << 20] {
        let label = if n == 1 << 20 { "1M " } else { "16M" };
        let a = randn(&[n], &mut rng);
        let b = randn(&[n], &mut rng);
        let bytes = (n * 4) as f64;
        let raw = a.to_vec::<f32>();
        let copy = time_it(|| drop(black_box(raw.clone())), 0.3);
        let add = time_it(|| drop(black_box(&a + &b)), 0.3);
        let mul = time_it(|| drop(black_box(&a * &b)), 0.3);
        let sum = time_it(|| drop(black_box(a.sum())), 0.3);
        println!(
            "  {label}: memcpy {:6.1} GB/s ({:.3} ms) | add {:6.1} GB/s ({:.3} ms, {:.2}x memcpy time) | mul {:6.1} GB/s | sum {:6.1} GB/s",
            2.0 * bytes / copy / 1e9,
            copy * 1e3,
            3.0 * bytes / add / 1e9,
            add * 1e3,
            add / copy,
            3.0 * bytes / mul / 1e9,
            bytes / sum / 1e9
        );
    }
    adam_steps(&mut rng);
}

/// The three products of a convolution's training step (forward, input gradient, weight
/// gradient) in GFLOP/s, for conv3x3_64 and conv5x5_lenet2 of `bench_layers`: which of them
/// lags shows where a kernel is short of the machine's peak.
fn conv_products(rng: &mut StdRng) {
    println!("f32 convolution products (GFLOP/s, best of 5)");
    for (name, x_shape, w_shape, pad) in [
        ("conv3x3_64    ", [32, 64, 32, 32], [64, 64, 3, 3], 1),
        ("conv5x5_lenet2", [128, 8, 14, 14], [16, 8, 5, 5], 2),
    ] {
        let (x, w) = (randn(&x_shape, rng), randn(&w_shape, rng));
        let opts = ConvOpts::new().padding(pad);
        let dy = randn(x.conv2d(&w, &opts).shape(), rng);
        // Stride 1 and "same" padding: every product has the output's size times the taps.
        let flop = 2.0 * (dy.numel() * w_shape[1] * w_shape[2] * w_shape[3]) as f64;
        let rate = |f: &dyn Fn() -> Tensor| flop / time_it(|| drop(black_box(f())), 0.3) / 1e9;
        println!(
            "  {name}: forward {:6.1} | input gradient {:6.1} | weight gradient {:6.1}",
            rate(&|| x.conv2d(&w, &opts)),
            rate(&|| dy.conv_transpose2d(&w, &opts)),
            rate(&|| x.conv2d_weight(&dy, (w_shape[2], w_shape[3]), &opts)),
        );
    }
}

/// Fused attention forward, and forward plus backward, in microseconds: a GPT layer's (batch
/// 12 × 4 heads, 64 positions of width 32, causal) and a longer sequence's without a mask.
fn attention_timings(rng: &mut StdRng) {
    println!("f32 scaled dot-product attention (us, best of 5)");
    for (name, shape, causal) in [
        ("GPT layer [12, 4, 64, 32], causal", [12, 4, 64, 32], true),
        ("[2, 4, 512, 64], no mask        ", [2, 4, 512, 64], false),
    ] {
        let qkv: Vec<Tensor> = (0..3).map(|_| randn(&shape, rng).requires_grad()).collect();
        let opts = Attention::new().causal(causal);
        let forward = || qkv[0].scaled_dot_product_attention(&qkv[1], &qkv[2], &opts);
        let fwd = time_it(|| drop(black_box(forward())), 0.3);
        let both = time_it(|| drop(black_box(forward().sum().backward())), 0.3);
        println!(
            "  {name}: forward {:8.1} | forward + backward {:8.1}",
            fwd * 1e6,
            both * 1e6
        );
    }
}

/// GELU forward, and forward plus backward, in microseconds over a GPT block's hidden layer
/// `[768, 512]`, on every thread and on one.
fn gelu_timings(rng: &mut StdRng) {
    println!("f32 GELU over [768, 512] (us, best of 5)");
    let x = randn(&[768, 512], rng).requires_grad();
    let up = randn(&[768, 512], rng);
    let run = || {
        let fwd = time_it(|| drop(black_box(x.gelu())), 0.3);
        let both = time_it(
            || drop(black_box(grad(&(&x.gelu() * &up).sum(), &[&x]))),
            0.3,
        );
        (fwd, both)
    };
    let all = run();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one = pool.install(run);
    println!(
        "  {} threads: forward {:7.1} | forward + backward {:7.1}; 1 thread: {:7.1} | {:7.1}",
        rayon::current_num_threads(),
        all.0 * 1e6,
        all.1 * 1e6,
        one.0 * 1e6,
        one.1 * 1e6
    );
}

/// Milliseconds per Adam step on 1M f32 weights, for three gradient regimes: ordinary values,
/// tiny ones (1e-20: their squares are subnormal), and zero after one ordinary step (the
/// moments then decay geometrically through the subnormal range).
fn adam_steps(rng: &mut StdRng) {
    let n = 1 << 20;
    let w = Param::new(randn(&[n], rng));
    let grads_of = |g: &Tensor| (&w.tensor() * g).sum().backward();
    let ordinary = grads_of(&randn(&[n], rng).mul_scalar(1e-3));
    let tiny = grads_of(&Tensor::full(&[n], 1e-20, DType::F32));
    let zero = grads_of(&Tensor::zeros(&[n], DType::F32));
    let params = vec![("w".to_string(), w.clone())];
    let mut line = String::from("Adam step, 1M f32 weights (ms, best of 5):");
    for (label, g) in [("ordinary", &ordinary), ("tiny 1e-20", &tiny)] {
        let mut opt = Adam::new(1e-3);
        let s = time_it(|| opt.step(&params, g), 0.3);
        line += &format!(" {label} {:.3} |", s * 1e3);
    }
    let mut opt = Adam::new(1e-3);
    opt.step(&params, &ordinary);
    let s = time_it(|| opt.step(&params, &zero), 0.3);
    println!("{line} zero after one step {:.3}", s * 1e3);
}
