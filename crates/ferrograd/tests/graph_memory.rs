//! A training loop must not grow the graph: every step's nodes are freed when its loss and
//! gradients are dropped. Alone in its binary so that the process-wide node count is ours.

use ferrograd::autograd::live_nodes;
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn ten_thousand_steps_do_not_grow_live_nodes() {
    let mut rng = StdRng::seed_from_u64(0);
    let x = Tensor::randn(&[8, 4], DType::F32, &mut rng);
    let y = Tensor::randn(&[8, 2], DType::F32, &mut rng);
    let w = Param::new(&Tensor::randn(&[4, 2], DType::F32, &mut rng) * 0.1);
    let b = Param::new(Tensor::zeros(&[2], DType::F32));
    let baseline = live_nodes();
    let mut peak = 0;
    for _ in 0..10_000 {
        let pred = (&x.matmul(&w.tensor()) + &b.tensor()).tanh();
        let loss = (&pred - &y).square().mean();
        let g = loss.backward();
        peak = peak.max(live_nodes());
        for p in [&w, &b] {
            p.set(&(&p.tensor().detach() - &(&g.get_param(p).unwrap() * 0.01)));
        }
    }
    assert_eq!(live_nodes(), baseline, "nodes leaked across steps");
    assert!(
        peak <= baseline + 16,
        "one step's graph holds {} nodes",
        peak - baseline
    );
}
