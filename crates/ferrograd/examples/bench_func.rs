//! Function transforms on the seed's MLP (784-400-100-10, ReLU, softmax cross-entropy) at batch
//! 128, in f32: the cost of a forward-mode `jvp` against the forward pass, of an `hvp` against
//! a gradient, and per-example gradients by `vmap(grad)` against a loop over the examples.
//! `bench/torch_func.py` does the same work with `torch.func`; RESULT lines give the best and
//! median milliseconds of each, for `bench/pairs.sh`.
//!
//! `cargo run --release --example bench_func`

mod common;

use common::sorted_ms;
use ferrograd::func;
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// The MLP's loss with its six parameters first, then the inputs and one-hot targets.
fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let h = x.linear(&p[0], Some(&p[1])).relu();
    let h = h.linear(&p[2], Some(&p[3])).relu();
    let logits = h.linear(&p[4], Some(&p[5]));
    SoftmaxCrossEntropy::new().loss(&logits, y)
}

/// Best and median milliseconds of `runs` calls of `f` after one warm-up.
fn time(name: &str, runs: usize, f: impl FnMut()) -> f64 {
    let ms = sorted_ms(1, runs, f);
    let median = ms[ms.len() / 2];
    println!(
        "RESULT ferrograd {name} ms: min={:.3} median={median:.3} (n={runs})",
        ms[0]
    );
    median
}

fn main() {
    let mut rng = StdRng::seed_from_u64(0);
    let mut randn =
        |shape: &[usize], scale: f64| &Tensor::randn(shape, DType::F32, &mut rng) * scale;
    let params = vec![
        randn(&[400, 784], 0.05),
        randn(&[400], 0.05),
        randn(&[100, 400], 0.05),
        randn(&[100], 0.05),
        randn(&[10, 100], 0.05),
        randn(&[10], 0.05),
    ];
    let x = randn(&[128, 784], 1.0);
    let labels: Vec<u8> = (0..128).map(|i| (i * 7 % 10) as u8).collect();
    let y = ferrograd::data::one_hot(&labels, 10);
    let shapes: Vec<Vec<usize>> = params.iter().map(|p| p.shape().to_vec()).collect();
    let tangents: Vec<Tensor> = shapes.iter().map(|s| randn(s, 1.0)).collect();
    let refs: Vec<&Tensor> = params.iter().collect();
    let trefs: Vec<&Tensor> = tangents.iter().collect();

    let forward = time("forward", 20, || {
        no_grad(|| loss(&params, &x, &y));
    });
    let jvp = time("jvp", 20, || {
        func::jvp(|p: &[Tensor]| loss(p, &x, &y), &refs, &trefs);
    });
    let grad = time("grad", 20, || {
        func::grad(|p: &[Tensor]| loss(p, &x, &y), &refs);
    });
    let hvp = time("hvp_reverse_over_reverse", 10, || {
        func::hvp(|p: &[Tensor]| loss(p, &x, &y), &refs, &trefs);
    });
    let fwd_rev = time("hvp_forward_over_reverse", 10, || {
        let g = |p: &[Tensor]| {
            let inner = func::grad(
                |q: &[Tensor]| loss(q, &x, &y),
                &p.iter().collect::<Vec<_>>(),
            );
            Tensor::cat(
                &inner
                    .iter()
                    .map(|t| t.reshape(&[t.numel()]))
                    .collect::<Vec<_>>()
                    .iter()
                    .collect::<Vec<_>>(),
                0,
            )
        };
        func::try_jvp(g, &refs, &trefs).unwrap();
    });
    let per_example = |a: &[Tensor]| {
        let p = &a[..6];
        let (xi, yi) = (a[6].unsqueeze(0), a[7].unsqueeze(0));
        let g = func::grad(
            |q: &[Tensor]| loss(q, &xi, &yi),
            &p.iter().collect::<Vec<_>>(),
        );
        let flat: Vec<Tensor> = g.iter().map(|t| t.reshape(&[t.numel()])).collect();
        Tensor::cat(&flat.iter().collect::<Vec<_>>(), 0)
    };
    let mut inputs: Vec<&Tensor> = refs.clone();
    inputs.extend([&x, &y]);
    let in_dims = [None, None, None, None, None, None, Some(0), Some(0)];
    let vmapped = time("per_example_vmap", 5, || {
        func::vmap(per_example, &in_dims)(&inputs);
    });
    if std::env::var("PROFILE_VMAP").is_ok() {
        let (_, prof) = ferrograd::profiler::profile(|| func::vmap(per_example, &in_dims)(&inputs));
        println!("{}", prof.table());
    }
    let looped = time("per_example_loop", 3, || {
        let rows: Vec<Tensor> = (0..128)
            .map(|i| {
                let mut a: Vec<Tensor> = params.clone();
                a.push(x.narrow(0, i, 1).squeeze(0));
                a.push(y.narrow(0, i, 1).squeeze(0));
                per_example(&a)
            })
            .collect();
        Tensor::stack(&rows.iter().collect::<Vec<_>>(), 0);
    });
    println!(
        "jvp / forward {:.2}; hvp / grad {:.2} (reverse over reverse), {:.2} (forward over \
         reverse); vmap / loop {:.2}",
        jvp / forward,
        hvp / grad,
        fwd_rev / grad,
        vmapped / looped
    );
}
