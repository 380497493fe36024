//! Compiled against eager, in one run: whole training steps (forward, loss and every
//! parameter's gradient) of the seed's MLP at batch 128, the small CNN at batch 64 and a
//! pre-norm transformer layer (width 128, 4 heads, GELU, causal attention) on [8, 64, 128],
//! a chain of element-wise ops written out by hand (PyTorch's tanh GELU) on 2²² elements, and a
//! chain of cheap element-wise ops on three vectors of 2²² elements (bound by memory).
//! Each line gives the median milliseconds of both, their ratio, and how many element-wise
//! regions the compiled plan fused.
//!
//! `cargo run --release --example bench_compile`

mod common;

use common::{seed_mlp, small_cnn, sorted_ms};
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// The median milliseconds of `runs` calls of `f`, after two warm-up calls.
fn median_ms(runs: usize, f: impl FnMut()) -> f64 {
    sorted_ms(2, runs, f)[runs / 2]
}

/// Times `f` eagerly and compiled on `inputs`, after checking that both give the same values.
fn compare(
    name: &str,
    runs: usize,
    params: &[(String, Param)],
    inputs: &[Tensor],
    f: impl Fn(&[Tensor]) -> Vec<Tensor>,
) {
    let mut compiled = ferrograd::compile(&f).params(params.to_vec());
    let (got, want) = (compiled.call(inputs).expect("traced"), f(inputs));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            g.to_vec::<f64>(),
            w.to_vec::<f64>(),
            "{name}: compiled values differ"
        );
    }
    let eager = median_ms(runs, || drop(f(inputs)));
    let fast = median_ms(runs, || drop(compiled.call(inputs).expect("planned")));
    let (regions, ops) = compiled.fused(inputs).unwrap_or_default();
    println!(
        "RESULT {name:<22} eager {eager:8.3} ms  compiled {fast:8.3} ms  ratio {:.2}  ({regions} fused regions, {ops} ops)",
        fast / eager
    );
}

/// The loss and the gradient of every parameter.
fn step(loss: Tensor, params: &[(String, Param)]) -> Vec<Tensor> {
    let ps: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor()).collect();
    let refs: Vec<&Tensor> = ps.iter().collect();
    let mut out = vec![loss.clone()];
    out.extend(ferrograd::autograd::grad(&loss, &refs));
    out
}

fn main() {
    println!("instruction set: {:?}", ferrograd::Isa::active());
    let mut rng = StdRng::seed_from_u64(0);
    manual_seed(0);
    let labels = |n: usize| {
        let ids: Vec<u8> = (0..n).map(|i| (i * 7 % 10) as u8).collect();
        ferrograd::data::one_hot(&ids, 10)
    };

    let mlp = seed_mlp(1e-3);
    let params = mlp.net().params();
    let x = Tensor::rand_uniform(&[128, 784], 0.0, 1.0, DType::F32, &mut rng);
    compare("mlp step", 200, &params, &[x, labels(128)], |xs| {
        step(mlp.loss(&mlp.forward(&xs[0]), &xs[1]), &params)
    });

    let cnn = small_cnn(1e-3);
    let params = cnn.net().params();
    let x = Tensor::rand_uniform(&[64, 784], 0.0, 1.0, DType::F32, &mut rng);
    compare("cnn step", 50, &params, &[x, labels(64)], |xs| {
        step(cnn.loss(&cnn.forward(&xs[0]), &xs[1]), &params)
    });

    let layer = TransformerEncoderLayer::new(128, 4)
        .dim_feedforward(512)
        .dropout(0.0)
        .gelu()
        .norm_first(true);
    let params = layer.params();
    let x = Tensor::rand_uniform(&[8, 64, 128], -1.0, 1.0, DType::F32, &mut rng);
    compare("transformer layer step", 50, &params, &[x], |xs| {
        let y = layer.forward_masked(&xs[0], Mode::Train, &Attention::new().causal(true));
        step(y.square().mean(), &params)
    });

    let x = Tensor::rand_uniform(&[1 << 22], -3.0, 3.0, DType::F32, &mut rng);
    compare("tanh gelu by hand", 100, &[], &[x], |xs| {
        let x = &xs[0];
        let inner = (x + &x.powf(3.0).mul_scalar(0.044715)).mul_scalar(0.797_884_6);
        vec![&x.mul_scalar(0.5) * &inner.tanh().add_scalar(1.0)]
    });

    let big = |rng: &mut StdRng| Tensor::rand_uniform(&[1 << 22], -1.0, 1.0, DType::F32, rng);
    let xyz = [big(&mut rng), big(&mut rng), big(&mut rng)];
    compare("memory-bound chain", 50, &[], &xyz, |xs| {
        let a = &(&xs[0] * &xs[1]) + &xs[2];
        vec![&a.relu().mul_scalar(0.5) - &xs[1]]
    });
}
