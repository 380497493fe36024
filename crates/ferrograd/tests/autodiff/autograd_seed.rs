//! The worked numbers of seed 002 (branch accumulation, detach, the ReLU kink, one-step
//! updates) reproduced by the engine.

use ferrograd::prelude::*;

fn s(v: f64) -> Tensor {
    Tensor::scalar(v)
}

struct Net {
    x: Tensor,
    w: Tensor,
    b: Tensor,
    v: Tensor,
}

impl Net {
    fn new(w: f64, b: f64, v: f64) -> Net {
        Net {
            x: s(2.0).requires_grad(),
            w: s(w).requires_grad(),
            b: s(b).requires_grad(),
            v: s(v).requires_grad(),
        }
    }

    /// Returns (p, loss); `skip` = None drops the direct branch, Some(true) detaches it.
    fn loss(&self, skip: Option<bool>) -> (Tensor, Tensor) {
        let p = &self.w * &self.x;
        let z = &p + &self.b;
        let h = z.relu();
        let q = &self.v * &h;
        let y = match skip {
            None => q,
            Some(false) => &q + &p,
            Some(true) => &q + &p.detach(),
        };
        let loss = &(&y - 1.0).square() * 0.5;
        (p, loss)
    }
}

#[test]
fn every_branch_contributes() {
    let net = Net::new(1.0, -1.0, 3.0);
    let (p, loss) = net.loss(Some(false));
    assert_eq!(loss.item(), 8.0);
    let g = grad(&loss, &[&p, &net.w, &net.b, &net.v, &net.x]);
    let g: Vec<f64> = g.iter().map(|t| t.item()).collect();
    assert_eq!(g, vec![16.0, 32.0, 12.0, 4.0, 16.0]);
    // A second backward over the same graph gives the same, fresh numbers.
    for _ in 0..2 {
        let grads = loss.backward();
        assert_eq!(grads.get(&net.w).unwrap().item(), 32.0);
        assert_eq!(grads.get(&net.b).unwrap().item(), 12.0);
        assert_eq!(grads.get(&net.v).unwrap().item(), 4.0);
        assert_eq!(grads.get(&net.x).unwrap().item(), 16.0);
    }
}

#[test]
fn detached_skip_loses_the_direct_branch() {
    let net = Net::new(1.0, -1.0, 3.0);
    let (_, loss) = net.loss(Some(true));
    assert_eq!(loss.item(), 8.0);
    assert_eq!(loss.backward().get(&net.w).unwrap().item(), 24.0);
}

#[test]
fn exercises_without_skip_and_with_zero_output_weight() {
    let net = Net::new(1.0, -1.0, 3.0);
    let (_, loss) = net.loss(None);
    assert_eq!(loss.item(), 2.0);
    let g = loss.backward();
    assert_eq!(
        [&net.w, &net.b, &net.v].map(|t| g.get(t).unwrap().item()),
        [12.0, 6.0, 2.0]
    );

    let net = Net::new(1.0, -1.0, 0.0);
    let (_, loss) = net.loss(Some(false));
    assert_eq!(loss.item(), 0.5);
    let g = loss.backward();
    assert_eq!(
        [&net.w, &net.b, &net.v].map(|t| g.get(t).unwrap().item()),
        [2.0, 0.0, 1.0]
    );
}

#[test]
fn repeated_operand_counts_twice() {
    let r = s(3.0).requires_grad();
    let y = &r * &r;
    assert_eq!(y.backward().get(&r).unwrap().item(), 6.0);
}

#[test]
fn relu_kink_convention_and_finite_differences() {
    let net = Net::new(1.0, -2.0, 3.0);
    let (_, loss) = net.loss(Some(false));
    // z = 0 exactly: relu'(0) = 0, so only the direct branch counts.
    assert_eq!(loss.backward().get(&net.w).unwrap().item(), 2.0);
    let at = |w: f64| no_grad(|| Net::new(w, -2.0, 3.0).loss(Some(false)).1.item());
    let h = 1e-6;
    let left = (at(1.0) - at(1.0 - h)) / h;
    let right = (at(1.0 + h) - at(1.0)) / h;
    let central = (at(1.0 + h) - at(1.0 - h)) / (2.0 * h);
    assert!((left - 2.0).abs() < 1e-4, "left {left}");
    assert!((right - 8.0).abs() < 1e-4, "right {right}");
    assert!((central - 5.0).abs() < 1e-4, "central {central}");
}

#[test]
fn one_sgd_step() {
    for (lr, want) in [(0.01, 0.57287808), (0.1, 14.58)] {
        let net = Net::new(1.0, -1.0, 3.0);
        let (_, loss) = net.loss(Some(false));
        let g = loss.backward();
        let step = |t: &Tensor| (t - &(&g.get(t).unwrap() * lr)).detach().requires_grad();
        let next = Net {
            x: net.x.clone(),
            w: step(&net.w),
            b: step(&net.b),
            v: step(&net.v),
        };
        let after = next.loss(Some(false)).1.item();
        assert!(
            (after - want).abs() < 1e-9,
            "lr {lr}: loss {after}, want {want}"
        );
    }
}

#[test]
fn seed_004_linear_mse_step_converges() {
    // y = 2x - 1 learned by a 1-in 1-out linear layer trained with plain gradient descent.
    let xs = Tensor::from_vec(vec![-1.0f32, -0.5, 0.0, 0.5, 1.0, 1.5], &[6, 1]);
    let ys = &(&xs * 2.0) - 1.0;
    let w = Param::new(Tensor::from_vec(vec![0.1f32], &[1, 1]));
    let b = Param::new(Tensor::zeros(&[1], DType::F32));
    let mut last = f64::INFINITY;
    for _ in 0..300 {
        let pred = &xs.matmul(&w.tensor()) + &b.tensor();
        let loss = (&pred - &ys).square().mean();
        let g = loss.backward();
        for p in [&w, &b] {
            p.set(&(&p.tensor().detach() - &(&g.get_param(p).unwrap() * 0.1)));
        }
        last = loss.item();
    }
    assert!(last < 1e-6, "loss after 300 steps: {last}");
    assert!((w.tensor().item() - 2.0).abs() < 1e-3);
    assert!((b.tensor().item() + 1.0).abs() < 1e-3);
}
