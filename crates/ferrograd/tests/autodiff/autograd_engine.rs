//! Engine behaviour: fresh gradients per call, explicit accumulation, higher order, detach and
//! no_grad, ops without a derivative, anomaly detection, very long graphs.

use ferrograd::prelude::*;

fn s(v: f64) -> Tensor {
    Tensor::scalar(v)
}

#[test]
fn backward_returns_fresh_gradients_and_they_add_explicitly() {
    let w = s(2.0).requires_grad();
    let g1 = (&w * 3.0).backward();
    let g2 = (&w * 3.0).backward();
    assert_eq!(g1.get(&w).unwrap().item(), 3.0);
    assert_eq!(g2.get(&w).unwrap().item(), 3.0);
    let total = &g1 + &g2;
    assert_eq!(total.get(&w).unwrap().item(), 6.0);
    assert_eq!(total.scale(0.5).get(&w).unwrap().item(), 3.0);
}

#[test]
fn unreached_inputs() {
    let w = s(2.0).requires_grad();
    let u = s(5.0).requires_grad();
    let loss = &w * 3.0;
    assert!(loss.backward().get(&u).is_none());
    let gs = grad(&loss, &[&w, &u]);
    assert_eq!((gs[0].item(), gs[1].item()), (3.0, 0.0));
    // An untracked result: grad gives zeros.
    let c = s(1.0);
    assert_eq!(grad(&(&c * 2.0), &[&w])[0].item(), 0.0);
}

#[test]
#[should_panic(expected = "backward: this tensor is not tracked")]
fn backward_of_untracked_panics() {
    let _ = (&s(1.0) * 2.0).backward();
}

#[test]
#[should_panic(expected = "backward needs a one-element result")]
fn backward_of_non_scalar_panics() {
    let w = Tensor::ones(&[3], DType::F64).requires_grad();
    let _ = (&w * 2.0).backward();
}

#[test]
fn backward_with_an_explicit_seed() {
    let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad();
    let y = w.square();
    let seed = Tensor::from_vec(vec![1.0f64, 10.0], &[2]);
    assert_eq!(
        y.backward_with(&seed, false)
            .get(&w)
            .unwrap()
            .to_vec::<f64>(),
        vec![2.0, 40.0]
    );
}

#[test]
fn higher_order_derivatives_of_a_cube() {
    let x = s(2.0).requires_grad();
    let y = x.powf(3.0);
    let d1 = grad_with_graph(&y, &[&x]).remove(0);
    assert_eq!(d1.item(), 12.0); // 3x²
    let d2 = grad_with_graph(&d1, &[&x]).remove(0);
    assert_eq!(d2.item(), 12.0); // 6x
    let d3 = grad_with_graph(&d2, &[&x]).remove(0);
    assert_eq!(d3.item(), 6.0);
    let d4 = grad(&d3, &[&x]).remove(0);
    assert_eq!(d4.item(), 0.0);
    // Without a graph the gradient is a plain value.
    assert!(!grad(&y, &[&x])[0].is_tracked());
    let g = y.backward_with_graph();
    assert!(g.get(&x).unwrap().is_tracked());
}

#[test]
fn higher_order_through_exp_and_tanh() {
    // d²/dx² tanh(x) = -2 tanh(x) (1 - tanh²(x)).
    let x = s(0.7).requires_grad();
    let d1 = grad_with_graph(&x.tanh(), &[&x]).remove(0);
    let d2 = grad(&d1, &[&x]).remove(0).item();
    let t = 0.7f64.tanh();
    assert!((d2 - (-2.0 * t * (1.0 - t * t))).abs() < 1e-12);
    // Gradient penalty style: ‖∇ₓ f‖² differentiated with respect to a weight.
    let w = s(1.5).requires_grad();
    let f = (&w * &x).exp();
    let gx = grad_with_graph(&f, &[&x]).remove(0); // w e^{wx}
    let pen = gx.square();
    let dw = grad(&pen, &[&w]).remove(0).item();
    // d/dw (w² e^{2wx}) = 2w e^{2wx} + 2x w² e^{2wx}
    let e = (2.0 * 1.5 * 0.7f64).exp();
    assert!((dw - (2.0 * 1.5 * e + 2.0 * 0.7 * 1.5 * 1.5 * e)).abs() < 1e-9);
}

#[test]
fn detach_and_no_grad_cut_the_graph() {
    let w = s(3.0).requires_grad();
    let d = w.detach();
    assert!(!d.is_tracked());
    assert_eq!(d.item(), 3.0);
    assert!(!w.stop_gradient().is_tracked());
    let y = no_grad(|| &w * 2.0);
    assert!(!y.is_tracked());
    // Nested and restored.
    no_grad(|| {
        no_grad(|| assert!(!is_enabled()));
        assert!(!is_enabled());
        assert!(enable_grad(|| (&w * 2.0).is_tracked()));
    });
    assert!(is_enabled());
    // Restored after a panic inside.
    let r = std::panic::catch_unwind(|| no_grad(|| panic!("inside")));
    assert!(r.is_err());
    assert!(is_enabled());
    assert!((&w * 2.0).is_tracked());
}

fn is_enabled() -> bool {
    ferrograd::autograd::is_grad_enabled()
}

#[test]
#[should_panic(expected = "argmax has no derivative")]
fn argmax_refuses_backward() {
    let x = Tensor::from_vec(vec![1.0f64, 3.0, 2.0], &[3]).requires_grad();
    let _ = (&x.argmax(0) * &x.sum()).backward();
}

#[test]
#[should_panic(expected = "gt has no derivative")]
fn comparison_refuses_backward() {
    let x = Tensor::from_vec(vec![1.0f64, -3.0], &[2]).requires_grad();
    let _ = (&x * &x.gt_scalar(0.0)).sum().backward();
}

#[test]
fn non_differentiable_ops_are_fine_when_detached_or_unused() {
    let x = Tensor::from_vec(vec![1.0f64, -3.0], &[2]).requires_grad();
    let mask = x.detach().gt_scalar(0.0);
    let g = (&x * &mask).sum().backward();
    assert_eq!(g.get(&x).unwrap().to_vec::<f64>(), vec![1.0, 0.0]);
    // A mask feeding only where_cond's condition receives no gradient, so no refusal.
    let y = x.gt_scalar(0.0).where_cond(&x, &(&x * 0.1));
    assert_eq!(
        y.sum().backward().get(&x).unwrap().to_vec::<f64>(),
        vec![1.0, 0.1]
    );
}

#[test]
fn anomaly_detection_names_the_first_op() {
    let x = Tensor::from_vec(vec![1.0f64, -1.0], &[2]).requires_grad();
    let err = detect_anomaly(|| x.log().sum().item())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "anomaly: forward of log produced NaN/Inf (input shapes: [2])"
    );
    let z = Tensor::from_vec(vec![0.0f64, 4.0], &[2]).requires_grad();
    let err = detect_anomaly(|| z.sqrt().sum().backward())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "anomaly: backward of sqrt produced NaN/Inf in the gradient of input 0 (input shapes: [2])"
    );
    assert_eq!(detect_anomaly(|| (&x * 2.0).sum().item()).unwrap(), 0.0);
    // Off outside the scope.
    let _ = x.log();
}

#[test]
fn a_million_node_chain_runs_and_drops_without_recursion() {
    let x = s(1.0).requires_grad();
    let mut y = x.clone();
    for _ in 0..1_000_000 {
        y = &y * 1.0;
    }
    let g = y.backward();
    assert_eq!(g.get(&x).unwrap().item(), 1.0);
    drop(g);
    drop(y); // dropping the chain must not overflow the stack either
}

#[test]
fn parameters_keep_their_identity() {
    let p = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
    let loss = (&p.tensor() * &p.tensor()).sum();
    let g = loss.backward();
    assert_eq!(g.get_param(&p).unwrap().to_vec::<f32>(), vec![2.0, 4.0]);
    p.set(&Tensor::from_vec(vec![3.0f32, 4.0], &[2]));
    let g2 = (&p.tensor() * 2.0).sum().backward();
    assert_eq!(g2.get_param(&p).unwrap().to_vec::<f32>(), vec![2.0, 2.0]);
    assert!(p.tensor().is_leaf());
    assert_eq!(p.tensor().to_vec::<f32>(), vec![3.0, 4.0]);
}

#[test]
fn the_hook_sees_a_parameter_as_soon_as_its_last_consumer_is_done() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static FIRST_OP_RULES: AtomicUsize = AtomicUsize::new(0);
    // Parameters are created before the ops that use them (as a network's are), so they are
    // the oldest nodes: popping them off the queue would come after every op.
    let w1 = Tensor::from_vec(vec![2.0f32], &[1]).requires_grad();
    let w2 = Tensor::from_vec(vec![3.0f32], &[1]).requires_grad();
    let x = Tensor::from_vec(vec![5.0f32], &[1]);
    let a = custom_gradient(&[&w1], |v| {
        let w = v[0].clone();
        (&w * &x, move |up: &Tensor| {
            FIRST_OP_RULES.fetch_add(1, Ordering::SeqCst);
            vec![up * 5.0]
        })
    });
    let loss = (&a * &w2).sum();
    let mut seen = Vec::new();
    let grads = loss.backward_with_hook(|id, g| {
        seen.push((id, g.item(), FIRST_OP_RULES.load(Ordering::SeqCst)));
    });
    // w2's gradient (a = 10) arrives before the first op's rule has run; w1's (5·3) after.
    assert_eq!(
        seen,
        vec![(w2.id().unwrap(), 10.0, 0), (w1.id().unwrap(), 15.0, 1)]
    );
    assert_eq!(grads.get(&w1).unwrap().item(), 15.0);
}

#[test]
fn a_recorded_graph_names_its_ops_and_lists_at_any_depth() {
    let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad();
    let y = (&w * &w).exp().sum();
    assert_eq!(y.grad_fn().as_deref(), Some("sum_axes"));
    assert_eq!(w.grad_fn(), None);
    assert_eq!(w.detach().grad_fn(), None);
    let listing = y.graph_listing();
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 4, "{listing}");
    assert!(lines[0].starts_with("%0 = leaf  [2] f64"), "{listing}");
    assert!(lines[1].starts_with("%1 = mul(%0, %0)"), "{listing}");
    assert!(
        lines[3].starts_with("%3 = sum_axes(%2)  [] f64"),
        "{listing}"
    );
    assert_eq!(w.detach().graph_listing(), "");
    // A chain far deeper than any stack: listed iteratively, each node once.
    let mut z = w.clone();
    for _ in 0..200_000 {
        z = &z * 1.0;
    }
    assert_eq!(z.graph_listing().lines().count(), 200_001);
}

/// `loss`'s gradients for `leaves` by a plain backward (each block's gradient added in place)
/// and by one that builds a graph (padded and summed): the same values.
fn blocks_agree(loss: &Tensor, leaves: &[&Tensor], what: &str) -> Gradients {
    let (plain, graph) = (loss.backward(), loss.backward_with_graph());
    for (i, t) in leaves.iter().enumerate() {
        let (p, g) = (plain.get(t).unwrap(), graph.get(t).unwrap());
        assert_eq!(p.to_vec::<f64>(), g.to_vec::<f64>(), "{what}: leaf {i}");
    }
    plain
}

/// A tensor read through blocks (`narrow`, overlapping ones too): a plain backward adds each
/// block's gradient into its place, a backward that builds a graph pads it and sums, with the
/// same values, whether the gradient it joins is fresh, shared with another input's, a
/// broadcast view, or already handed to a hook.
#[test]
fn gradients_of_blocks_join_their_tensor_in_place() {
    for dtype in [DType::F64, DType::F32] {
        let wave = |shape: &[usize], a: f64| {
            let n: usize = shape.iter().product();
            let v: Vec<f64> = (0..n).map(|i| (a * i as f64).sin()).collect();
            Tensor::from_vec(v, shape).to_dtype(dtype)
        };
        // Blocks recorded first, so their gradients arrive last: onto the one buffer that the
        // addition's rule hands both x and y, which must not change y's.
        let (x, y) = (
            wave(&[4, 6], 0.3).requires_grad(),
            wave(&[4, 6], 0.7).requires_grad(),
        );
        let (a, b) = (x.narrow(1, 0, 3), x.narrow(1, 2, 4));
        let joint = (&(&x + &y) * &wave(&[4, 6], 1.1)).sum();
        let loss = &(&(&a * &wave(&[4, 3], 0.9)).sum() + &(&b * &b).sum()) + &joint;
        let plain = blocks_agree(&loss, &[&x, &y], &format!("{dtype} shared"));
        let want = wave(&[4, 6], 1.1).to_vec::<f64>();
        assert_eq!(plain.get(&y).unwrap().to_vec::<f64>(), want, "{dtype} y");
        // Onto a broadcast view (a sum's gradient), along the middle axis of a 3-d tensor,
        // with an empty block too.
        let z = wave(&[2, 5, 3], 0.4).requires_grad();
        let (m, none) = (z.narrow(1, 1, 3), z.narrow(1, 5, 0));
        let column = z.sum_axes(&[1], true);
        let loss = &(&(&m * &m).sum() + &none.sum()) + &(&column * &column).sum();
        blocks_agree(&loss, &[&z], &format!("{dtype} broadcast"));
        // A leaf whose gradient a hook saw when its last consumer was done: the blocks had
        // all arrived by then, and what the hook saw is the final gradient.
        let w = wave(&[3, 8], 0.2).requires_grad();
        let parts: Vec<Tensor> = (0..3).map(|i| w.narrow(1, 2 * i, 4)).collect();
        let loss = parts
            .iter()
            .zip([0.5, 1.5, 2.5])
            .fold(w.sum(), |acc, (p, k)| &acc + &(&(p * p) * k).sum());
        let mut seen = Vec::new();
        let hooked = loss.backward_with_hook(|_, g| seen.push(g.to_vec::<f64>()));
        let last = blocks_agree(&loss, &[&w], &format!("{dtype} hooked"));
        assert_eq!(seen, vec![last.get(&w).unwrap().to_vec::<f64>()]);
        assert_eq!(hooked.get(&w).unwrap().to_vec::<f64>(), seen[0]);
        // Under anomaly detection the blocks join through the recorded rule, whose sum is
        // checked: gradients that overflow only once added are reported.
        let big = Tensor::from_vec(vec![1e-3f32, 0.0], &[2]).requires_grad();
        let twice = &(&big.narrow(0, 0, 1) * 3e38).sum() + &(&big * 3e38).sum();
        let err = detect_anomaly(|| drop(twice.backward())).unwrap_err();
        assert!(err.to_string().contains("NaN/Inf"), "{err}");
        // Second order through a block: d/dx Σ (d/dx Σ b²)² = 8 b in the block, 0 elsewhere.
        let g1 = (&b * &b).sum().backward_with_graph().get(&x).unwrap();
        let g2 = (&g1 * &g1).sum().backward().get(&x).unwrap();
        let xs = x.to_vec::<f64>();
        let want: Vec<f64> = (0..24)
            .map(|i| if i % 6 >= 2 { 8.0 * xs[i] } else { 0.0 })
            .collect();
        assert_eq!(g2.to_vec::<f64>(), want, "{dtype} second order");
    }
}
