//! Autograd overhead: a micrograd-style graph of scalar ops (mixed add/mul/relu) timed forward
//! and backward per node; the seed's MLP step (784-400-100-10, batch 128) split into kernel
//! time and graph bookkeeping; and the same training step (Adam) in eager mode and through a
//! static graph's Session.
//!
//! `cargo run --release --example bench_autograd`

use std::time::Instant;

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

mod common;

fn scalar_graph(n_ops: usize) -> (f64, f64, usize) {
    let x = Tensor::scalar(0.5f64).requires_grad();
    let w = Tensor::scalar(1.0001f64).requires_grad();
    let t = Instant::now();
    let mut y = x.clone();
    for i in 0..n_ops / 3 {
        y = &y * &w;
        y = &y + 0.001;
        y = if i % 2 == 0 { y.relu() } else { &y + &x };
    }
    let fwd = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let g = y.backward();
    let bwd = t.elapsed().as_secs_f64();
    assert!(g.get(&w).is_some());
    (fwd, bwd, 3 * (n_ops / 3))
}

fn main() {
    scalar_graph_report();
    mlp_step_report();
    session_step_report();
}

/// One Adam training step of the seed's MLP, eager (`Model::train_step`) against a static
/// graph's `Session::run` of its `minimize` node, alternating, best of each.
fn session_step_report() {
    use ferrograd::graph::{Feed, Graph, GraphOptimizer, Session};
    let mut rng = StdRng::seed_from_u64(1);
    let x = Tensor::randn(&[128, 784], DType::F32, &mut rng);
    let labels: Vec<usize> = (0..128).map(|i| i % 10).collect();
    let y = one_hot(&labels, 10);
    manual_seed(0);
    let mut model = common::seed_mlp(1e-3);
    let g = Graph::new();
    let (gx, gy) = (g.placeholder("x"), g.placeholder("y"));
    let mut h = gx.clone();
    let params = model.net().params();
    for (i, wb) in params.chunks(2).enumerate() {
        let w = g.variable(&wb[0].0, wb[0].1.tensor().detach());
        let b = g.variable(&wb[1].0, wb[1].1.tensor().detach());
        h = &h.matmul(&w.transpose(0, 1)) + &b;
        if i < 2 {
            h = h.relu();
        }
    }
    let loss = -(&h.log_softmax(1) * &gy).sum_axes(&[1], false).mean();
    let train = GraphOptimizer::new(Adam::new(1e-3)).minimize(&loss);
    let mut sess = Session::new(&g);
    let feed = Feed::new().with(&gx, x.clone()).with(&gy, y.clone());
    let reps = 20;
    let (mut eager, mut graph) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..reps {
            model.train_step(&x, &y);
        }
        eager = eager.min(t.elapsed().as_secs_f64() / reps as f64);
        let t = Instant::now();
        for _ in 0..reps {
            sess.run(&train, &feed).expect("a fed graph runs");
        }
        graph = graph.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    println!(
        "MLP Adam step 784-400-100-10, batch 128: eager {:.3} ms, static graph {:.3} ms (graph/eager {:.2})",
        eager * 1e3,
        graph * 1e3,
        graph / eager
    );
}

/// Per-node costs of a micrograd-style graph of scalar ops, best of ten.
fn scalar_graph_report() {
    let n = 150_000;
    scalar_graph(n); // warm up the allocator
    let mut best = (f64::INFINITY, f64::INFINITY, 0);
    for _ in 0..10 {
        let r = scalar_graph(n);
        if r.0 + r.1 < best.0 + best.1 {
            best = r;
        }
    }
    let (fwd, bwd, nodes) = best;
    println!(
        "scalar graph, {nodes} nodes: forward {:.0} ns/node, backward {:.0} ns/node, total {:.0} ns/node",
        fwd / nodes as f64 * 1e9,
        bwd / nodes as f64 * 1e9,
        (fwd + bwd) / nodes as f64 * 1e9
    );
}

/// One MLP training step with and without recording: the difference is autodiff's own cost.
fn mlp_step_report() {
    let mut rng = StdRng::seed_from_u64(0);
    let x = Tensor::randn(&[128, 784], DType::F32, &mut rng);
    let y = Tensor::zeros(&[128, 10], DType::F32).index_add(
        1,
        &[3],
        &Tensor::ones(&[128, 1], DType::F32),
    );
    let dims = [784, 400, 100, 10];
    let params: Vec<(Tensor, Tensor)> = dims
        .windows(2)
        .map(|d| {
            let w = (&Tensor::randn(&[d[0], d[1]], DType::F32, &mut rng)
                * (1.0 / (d[0] as f64).sqrt()))
            .requires_grad();
            (w, Tensor::zeros(&[d[1]], DType::F32).requires_grad())
        })
        .collect();
    let forward = |x: &Tensor| {
        let mut h = x.clone();
        for (i, (w, b)) in params.iter().enumerate() {
            h = &h.matmul(w) + b;
            if i + 1 < params.len() {
                h = h.relu();
            }
        }
        -(&h.log_softmax(1) * &y).sum_axes(&[1], false).mean()
    };
    // Tracked and untracked rounds alternate; the best of each is kept (noise only slows).
    let reps = 20;
    let tracked = || {
        let _ = forward(&x).backward();
    };
    let ws: Vec<(Tensor, Tensor)> = params
        .iter()
        .map(|(w, b)| (w.detach(), b.detach()))
        .collect();
    // The kernels alone: the same forward ops and the products backward needs, untracked.
    let untracked = || {
        no_grad(|| {
            let mut hs = vec![x.clone()];
            for (i, (w, b)) in ws.iter().enumerate() {
                let mut h = &hs.last().unwrap().matmul(w) + b;
                if i + 1 < ws.len() {
                    h = h.relu();
                }
                hs.push(h);
            }
            let p = hs.last().unwrap().log_softmax(1);
            let mut up = &(&p.exp() - &y) * (1.0 / 128.0);
            for (i, (w, _)) in ws.iter().enumerate().rev() {
                let _gw = hs[i].t().matmul(&up);
                let _gb = up.sum_axes(&[0], false);
                if i > 0 {
                    up = &up.matmul(&w.t()) * &hs[i].gt_scalar(0.0);
                }
            }
        })
    };
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        t.elapsed().as_secs_f64() / reps as f64
    };
    let (mut step, mut kernels) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..7 {
        step = step.min(time(&tracked));
        kernels = kernels.min(time(&untracked));
    }
    println!(
        "MLP step 784-400-100-10, batch 128: {:.3} ms tracked, {:.3} ms same kernels untracked, bookkeeping {:.1}%",
        step * 1e3,
        kernels * 1e3,
        ((step - kernels) / step * 100.0).max(0.0)
    );
}
