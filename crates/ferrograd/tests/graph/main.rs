//! Static-graph mode (seed 001): building with checked shapes, sessions and feeds, gradients
//! from the eager engine (first and second order), training ops, the optimisation pass,
//! listings, DOT, and saving variables; graphs traced from eager code.

#[path = "../common/mod.rs"]
mod common;

mod compiled;
mod trace;

use common::{panic_message, scratch};
use ferrograd::graph::{Feed, GradientDescentOptimizer, Graph, GraphOptimizer, Node, Session};
use ferrograd::prelude::*;
use ferrograd::RecurrentWeights;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

/// The seed's data: y = 3x + N(0, 0.5²) on 100 points in [−1, 1].
fn seed_data() -> (Tensor, Tensor) {
    let xs = Tensor::linspace(-1.0, 1.0, 100, DType::F64);
    let mut rng = StdRng::seed_from_u64(0);
    let noise = Normal::new(0.0, 0.5).unwrap();
    let ys: Vec<f64> = xs
        .to_vec::<f64>()
        .iter()
        .map(|x| 3.0 * x + noise.sample(&mut rng))
        .collect();
    (xs, Tensor::from_vec(ys, &[100]))
}

#[test]
fn the_seeds_linear_regression_converges() {
    let g = Graph::new();
    let x = g.placeholder("x");
    let y_ = g.placeholder("y");
    let w = g.variable("weight", Tensor::from_vec(vec![1.0f64], &[1, 1]));
    let b = g.variable("threshold", Tensor::scalar(0.0f64));
    let y = &(&x * &w) + &b;
    let loss = (&y - &y_).square().sum();
    let train = GradientDescentOptimizer::new(0.005).minimize(&loss);
    let (xs, ys) = seed_data();
    let feed = Feed::new().with(&x, xs).with(&y_, ys);
    let mut sess = Session::new(&g);
    let first = sess.run(&loss, &feed).unwrap().item();
    for _ in 0..20 {
        sess.run(&train, &feed).unwrap();
    }
    let last = sess.run(&loss, &feed).unwrap().item();
    let (wv, bv) = (sess.run(&w, &feed).unwrap(), sess.run(&b, &feed).unwrap());
    assert!(last < first / 4.0, "loss {first} → {last}");
    assert!((wv.item() - 3.0).abs() < 0.3, "w = {}", wv.item());
    assert!(bv.item().abs() < 0.2, "b = {}", bv.item());
    assert_eq!(wv.shape(), &[1, 1]);
}

#[test]
fn a_node_consumed_twice_gets_both_contributions() {
    let g = Graph::new();
    let r = g.variable("r", Tensor::scalar(3.0f64));
    let y = &r * &r;
    let dr = g.gradients(&y, &[&r]);
    let mut sess = Session::new(&g);
    assert_eq!(sess.run(&dr[0], &Feed::new()).unwrap().item(), 6.0);
    // Two branches through an intermediate node: z = h + 2h with h = r², dz/dr = 3·2r.
    let h = r.square();
    let z = &h + &(&h * 2.0);
    let dz = g.gradients(&z, &[&r]);
    assert_eq!(sess.run(&dz[0], &Feed::new()).unwrap().item(), 18.0);
}

#[test]
fn gradients_of_gradients() {
    let g = Graph::new();
    let x = g.placeholder("x");
    let y = x.powf(3.0);
    let d1 = g.gradients(&y, &[&x]);
    let d2 = g.gradients(&d1[0], &[&x]);
    let d3 = g.gradients(&d2[0], &[&x]);
    let mut sess = Session::new(&g);
    let feed = Feed::new().with(&x, Tensor::scalar(2.0f64));
    let v = sess.run_many(&[&y, &d1[0], &d2[0], &d3[0]], &feed).unwrap();
    let v: Vec<f64> = v.iter().map(Tensor::item).collect();
    assert_eq!(v, vec![8.0, 12.0, 12.0, 6.0]);
    // The listing shows the gradient nodes as nodes of the graph.
    assert!(format!("{g}").contains("grad(%1, %0)"), "{g}");
}

#[test]
fn feeds_are_checked_and_errors_name_what_is_wrong() {
    let g = Graph::new();
    let x = g.placeholder_with("x", &[None, Some(3)], DType::F32);
    let y = x.sum();
    let mut sess = Session::new(&g);
    let err = sess.run(&y, &Feed::new()).unwrap_err().to_string();
    assert!(err.contains("no value fed for placeholder \"x\""), "{err}");
    let bad = Feed::new().with(&x, Tensor::zeros(&[2, 4], DType::F32));
    let err = sess.run(&y, &bad).unwrap_err().to_string();
    assert!(
        err.contains("placeholder \"x\" takes [?, 3] f32, fed [2, 4] f32"),
        "{err}"
    );
    let bad = Feed::new().with(&x, Tensor::zeros(&[2, 3], DType::F64));
    let err = sess.run(&y, &bad).unwrap_err().to_string();
    assert!(err.contains("fed [2, 3] f64"), "{err}");
    let ok = Feed::new().with(&x, Tensor::ones(&[5, 3], DType::F32));
    assert_eq!(sess.run(&y, &ok).unwrap().item(), 15.0);

    let other = Graph::new();
    let z = other.placeholder("z");
    assert!(sess
        .run(&z, &ok)
        .unwrap_err()
        .to_string()
        .contains("another graph"));
    let mixed = ok.clone().with(&z, Tensor::scalar(1.0f32));
    assert!(sess
        .run(&y, &mixed)
        .unwrap_err()
        .to_string()
        .contains("another graph"));
    let msg = panic_message(|| drop(&y + &z));
    assert!(msg.contains("another graph"), "{msg}");
    let not_a_placeholder = ok.with(&y, Tensor::scalar(0.0f32));
    let err = sess.run(&y, &not_a_placeholder).unwrap_err().to_string();
    assert!(
        err.contains("%1 (sum), which is not a placeholder"),
        "{err}"
    );
}

#[test]
fn shapes_are_checked_when_the_graph_is_built() {
    let g = Graph::new();
    let a = g.placeholder_with("a", &[None, Some(3)], DType::F32);
    let w = g.variable("w", Tensor::zeros(&[4, 2], DType::F32));
    let err = a.try_matmul(&w).unwrap_err().to_string();
    assert!(
        err.contains("matmul: inner dimensions differ: [?, 3] @ [4, 2]"),
        "{err}"
    );
    let msg = panic_message(|| drop(a.matmul(&w)));
    assert!(msg.contains("[?, 3] @ [4, 2]"), "{msg}");
    let v = g.variable("v", Tensor::zeros(&[3, 2], DType::F32));
    assert_eq!(a.matmul(&v).shape(), Some(vec![None, Some(2)]));
    let msg = panic_message(|| drop(&a + &v));
    assert!(msg.contains("do not broadcast"), "{msg}");
    assert!(a.try_reshape(&[6]).is_ok(), "the free axis may be 2");
    assert!(a.try_reshape(&[5]).is_err(), "3 does not divide 5");
    assert!(v.try_reshape(&[5]).is_err());
}

#[test]
fn each_needed_node_is_evaluated_once_per_run() {
    let g = Graph::new();
    let x = g.placeholder("x");
    let h = x.exp(); // read by two consumers
    let a = h.sum();
    let b = h.mean();
    let unused = x.log().sum();
    let mut sess = Session::unoptimized(&g);
    let feed = Feed::new().with(&x, Tensor::ones(&[4], DType::F64));
    sess.run_many(&[&a, &b], &feed).unwrap();
    assert_eq!(
        sess.evaluations(),
        3,
        "exp once, sum, mean; the log branch not at all"
    );
    sess.run(&a, &feed).unwrap();
    assert_eq!(sess.evaluations(), 5);
    drop(unused);
}

#[test]
fn common_subexpressions_merge_and_constants_fold_before_the_first_run() {
    let g = Graph::new();
    let x = g.placeholder("x");
    let c = g.constant(Tensor::from_vec(vec![1.0f64, 2.0], &[2]));
    let k = (&c * 2.0).exp().sum(); // constant: folded
    let y = &(&x.tanh() * &k) + &x.tanh(); // tanh(x) twice: merged
    let feed = Feed::new().with(&x, Tensor::from_vec(vec![0.5f64, -0.5], &[2]));
    let mut plain = Session::unoptimized(&g);
    let mut optimized = Session::new(&g);
    let (p, o) = (
        plain.run(&y, &feed).unwrap(),
        optimized.run(&y, &feed).unwrap(),
    );
    assert_eq!(p.to_vec::<f64>(), o.to_vec::<f64>());
    // Unoptimised: mul, exp, sum, tanh, tanh, mul, add. Optimised: tanh, mul, add.
    assert_eq!(plain.evaluations(), 7);
    assert_eq!(optimized.evaluations(), 3);
}

/// An MLP 4-8-3 with a softmax cross-entropy on one-hot targets, in graph mode, and the same
/// weights in eager mode.
#[test]
fn graph_and_eager_gradients_agree_on_an_mlp() {
    let mut rng = StdRng::seed_from_u64(3);
    let w1 = Tensor::randn(&[4, 8], DType::F64, &mut rng);
    let b1 = Tensor::randn(&[8], DType::F64, &mut rng);
    let w2 = Tensor::randn(&[8, 3], DType::F64, &mut rng);
    let xs = Tensor::randn(&[5, 4], DType::F64, &mut rng);
    let ys = one_hot(&[0usize, 2, 1, 1, 0], 3).to_dtype(DType::F64);

    let g = Graph::new();
    let x = g.placeholder_with("x", &[None, Some(4)], DType::F64);
    let y = g.placeholder_with("y", &[None, Some(3)], DType::F64);
    let (gw1, gb1, gw2) = (
        g.variable("w1", w1.clone()),
        g.variable("b1", b1.clone()),
        g.variable("w2", w2.clone()),
    );
    let h = (&x.matmul(&gw1) + &gb1).relu();
    let loss = -(&h.matmul(&gw2).log_softmax(1) * &y).sum() / 5.0;
    let grads = g.gradients(&loss, &[&gw1, &gb1, &gw2]);
    let mut sess = Session::new(&g);
    let feed = Feed::new().with(&x, xs.clone()).with(&y, ys.clone());
    let refs: Vec<&ferrograd::graph::Node> = grads.iter().collect();
    let graph_grads = sess.run_many(&refs, &feed).unwrap();

    let (w1, b1, w2) = (w1.requires_grad(), b1.requires_grad(), w2.requires_grad());
    let h = (&xs.matmul(&w1) + &b1).relu();
    let eager_loss = -(&h.matmul(&w2).log_softmax(1) * &ys).sum() / 5.0;
    let eager = grad(&eager_loss, &[&w1, &b1, &w2]);
    for (a, b) in graph_grads.iter().zip(&eager) {
        assert!(a.allclose(b, 0.0, 1e-12));
    }
}

#[test]
fn any_optimizer_trains_a_graph_as_it_trains_eagerly() {
    let start = Tensor::from_vec(vec![1.0f32, -2.0, 0.5], &[3]);
    let target = Tensor::from_vec(vec![0.0f32, 1.0, 2.0], &[3]);
    let g = Graph::new();
    let w = g.variable("w", start.clone());
    let t = g.constant(target.clone());
    let loss = (&w - &t).square().sum();
    let train = GraphOptimizer::new(Adam::new(0.1)).minimize(&loss);
    let mut sess = Session::new(&g);
    for _ in 0..5 {
        sess.run(&train, &Feed::new()).unwrap();
    }

    let p = Param::new(start);
    let mut adam = Adam::new(0.1);
    for _ in 0..5 {
        let grads = (&p.tensor() - &target).square().sum().backward();
        adam.step(&[("w".to_string(), p.clone())], &grads);
    }
    assert_eq!(
        sess.run(&w, &Feed::new()).unwrap().to_vec::<f32>(),
        p.tensor().to_vec::<f32>()
    );
}

#[test]
fn variables_survive_save_and_restore() {
    let path = scratch("graph_save").join("vars.safetensors");
    let g = Graph::new();
    let w = g.variable("w", Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
    let loss = w.square().sum();
    let train = GradientDescentOptimizer::new(0.25).minimize(&loss);
    let mut sess = Session::new(&g);
    sess.run(&train, &Feed::new()).unwrap();
    let trained = sess.run(&w, &Feed::new()).unwrap().to_vec::<f32>();
    assert_eq!(trained, vec![0.5, 1.0]);
    sess.save(&path).unwrap();
    sess.run(&train, &Feed::new()).unwrap();
    sess.restore(&path).unwrap();
    assert_eq!(sess.run(&w, &Feed::new()).unwrap().to_vec::<f32>(), trained);

    // A graph whose variables do not match is refused, and keeps its values.
    let other = Graph::new();
    let v = other.variable("w", Tensor::zeros(&[3], DType::F32));
    let mut s2 = Session::new(&other);
    let err = s2.restore(&path).unwrap_err().to_string();
    assert!(err.contains("w: expected [3] f32, found [2] f32"), "{err}");
    assert_eq!(
        s2.run(&v, &Feed::new()).unwrap().to_vec::<f32>(),
        vec![0.0; 3]
    );
}

#[test]
fn a_graph_prints_as_a_listing_and_as_dot() {
    let g = Graph::new();
    let x = g.placeholder_with("x", &[None, Some(2)], DType::F32);
    let w = g.variable("w", Tensor::zeros(&[2, 1], DType::F32));
    let y = x.matmul(&w).sum();
    let listing = format!("{g}");
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("%0 = placeholder \"x\"") && lines[0].ends_with("[?, 2] f32"));
    assert!(lines[2].starts_with("%2 = matmul(%0, %1)") && lines[2].ends_with("[?, 1] f32"));
    assert!(lines[3].ends_with("[] f32"), "{}", lines[3]);
    let dot = g.to_dot();
    assert!(dot.starts_with("digraph ferrograd {") && dot.trim_end().ends_with('}'));
    assert_eq!(dot.matches(" [label=").count(), 4);
    for edge in ["n0 -> n2;", "n1 -> n2;", "n2 -> n3;"] {
        assert!(dot.contains(edge), "{dot}");
    }
    assert_eq!(dot.matches(" -> ").count(), 3);
    drop(y);
}

#[test]
fn convolution_pooling_and_structure_ops_infer_shapes_and_match_eager() {
    let mut rng = StdRng::seed_from_u64(5);
    let xs = Tensor::randn(&[2, 1, 8, 8], DType::F64, &mut rng);
    let k = Tensor::randn(&[4, 1, 3, 3], DType::F64, &mut rng);
    let kt = Tensor::randn(&[4, 2, 2, 2], DType::F64, &mut rng);
    let opts = ConvOpts::new().padding(1);
    let up = ConvOpts::new().stride(2);

    let g = Graph::new();
    let x = g.placeholder_with("x", &[None, Some(1), Some(8), Some(8)], DType::F64);
    let w = g.variable("w", k.clone());
    let wt = g.variable("wt", kt.clone());
    let h = x.conv2d(&w, &opts).relu().max_pool2d(2, 2, 0);
    assert_eq!(h.shape(), Some(vec![None, Some(4), Some(4), Some(4)]));
    let u = h.conv_transpose2d(&wt, &up);
    assert_eq!(u.shape(), Some(vec![None, Some(2), Some(8), Some(8)]));
    let pooled = u.avg_pool2d(2, 2, 0).flatten_from(1);
    assert_eq!(pooled.shape(), Some(vec![None, Some(32)]));
    let joined = Node::cat(&[&pooled, &pooled.narrow(1, 0, 8)], 1);
    assert_eq!(joined.shape(), Some(vec![None, Some(40)]));
    let classes = joined.argmax(1);
    assert_eq!(
        (classes.shape(), classes.dtype()),
        (Some(vec![None]), Some(DType::I64))
    );
    let loss = joined.square().sum();
    let grads = g.gradients(&loss, &[&w, &wt]);

    let mut sess = Session::new(&g);
    let feed = Feed::new().with(&x, xs.clone());
    let out = sess
        .run_many(&[&loss, &grads[0], &grads[1], &classes], &feed)
        .unwrap();

    let (k, kt) = (k.requires_grad(), kt.requires_grad());
    let h = xs.conv2d(&k, &opts).relu().max_pool2d(2, 2, 0);
    let pooled = h
        .conv_transpose2d(&kt, &up)
        .avg_pool2d(2, 2, 0)
        .flatten_from(1);
    let joined = Tensor::cat(&[&pooled, &pooled.narrow(1, 0, 8)], 1);
    let eager_loss = joined.square().sum();
    let eager = grad(&eager_loss, &[&k, &kt]);
    assert_eq!(out[0].item(), eager_loss.item());
    assert!(out[1].allclose(&eager[0], 0.0, 1e-12));
    assert!(out[2].allclose(&eager[1], 0.0, 1e-12));
    assert_eq!(out[3].to_vec::<i64>(), joined.argmax(1).to_vec::<i64>());

    let bad = g.variable("bad", Tensor::zeros(&[4, 3, 3, 3], DType::F64));
    let msg = panic_message(|| drop(x.conv2d(&bad, &opts)));
    assert!(msg.contains("do not fit 1 group(s)"), "{msg}");
}

#[test]
fn the_remaining_core_ops_match_eager_values_and_gradients() {
    let mut rng = StdRng::seed_from_u64(9);
    let v0 = Tensor::randn(&[2, 1, 2, 3], DType::F64, &mut rng);
    let g = Graph::new();
    let v = g.variable("v", v0.clone());
    let zero = g.constant(Tensor::scalar(0.0f64));
    let a = v.clamp(-0.5, 0.5).elu(1.0) + v.erf() * v.detach().sign();
    let b = v.gt(&zero).where_cond(&v, &(&v * 0.1)) + v.detach().lt(&zero) * 2.0;
    let c = (&a + &b).squeeze(1).unsqueeze(0).squeeze(0); // [2, 2, 3]
    let d = c
        .pad(&[(0, 0), (1, 0), (0, 2)], 0.5)
        .index_select(2, &[4, 0, 0]); // [2, 3, 3]
    let e = Node::stack(&[&d, &d.square()], 1); // [2, 2, 3, 3]
    let f = e.upsample_nearest2d(2, 2).adaptive_avg_pool2d(2, 2); // [2, 2, 2, 2]
    assert_eq!(f.shape(), Some(vec![Some(2), Some(2), Some(2), Some(2)]));
    let loss = &f.sum() + &(&e.max() - &e.min());
    let dv = g.gradients(&loss, &[&v]);
    let mut sess = Session::new(&g);
    let out = sess.run_many(&[&loss, &dv[0]], &Feed::new()).unwrap();

    let v = v0.requires_grad();
    let zero = Tensor::scalar(0.0f64);
    let a = &v.clamp(-0.5, 0.5).elu(1.0) + &(&v.erf() * &v.detach().sign());
    let b = &v.gt(&zero).where_cond(&v, &(&v * 0.1)) + &(&v.detach().lt(&zero) * 2.0);
    let c = (&a + &b).squeeze(1);
    let d = c
        .pad(&[(0, 0), (1, 0), (0, 2)], 0.5)
        .index_select(2, &[4, 0, 0]);
    let e = Tensor::stack(&[&d, &d.square()], 1);
    let f = e.upsample_nearest2d(2, 2).adaptive_avg_pool2d(2, 2);
    let loss = &f.sum() + &(&e.max() - &e.min());
    assert!((out[0].item() - loss.item()).abs() < 1e-12);
    assert!(out[1].allclose(&grad(&loss, &[&v])[0], 0.0, 1e-12));
}

#[test]
fn gradients_with_respect_to_constants_and_merged_expressions_are_exact() {
    let g = Graph::new();
    let c = g.constant(Tensor::from_vec(vec![1.0f64, -2.0], &[2]));
    let y = (&c * &c).sum();
    let dc = g.gradients(&y, &[&c]);
    let x = g.placeholder("x");
    let (a, b) = (x.exp(), x.exp());
    let z = (&a + &(&b * 2.0)).sum();
    let da = g.gradients(&z, &[&a]);
    let feed = Feed::new().with(&x, Tensor::from_vec(vec![0.5f64], &[1]));
    for mut sess in [Session::new(&g), Session::unoptimized(&g)] {
        let out = sess.run_many(&[&dc[0], &da[0]], &feed).unwrap();
        assert_eq!(out[0].to_vec::<f64>(), vec![2.0, -4.0]);
        assert_eq!(out[1].to_vec::<f64>(), vec![1.0], "b is not a");
    }
}

#[test]
fn run_time_misfits_are_errors_and_build_time_misuse_panics_clearly() {
    let g = Graph::new();
    let (p, q) = (g.placeholder("p"), g.placeholder("q"));
    let s = &p + &q;
    let mut sess = Session::new(&g);
    let feed = Feed::new()
        .with(&p, Tensor::zeros(&[2], DType::F32))
        .with(&q, Tensor::zeros(&[3], DType::F32));
    let err = sess.run(&s, &feed).unwrap_err().to_string();
    assert!(
        err.contains("run: %2 add: shapes [2] and [3] do not broadcast"),
        "{err}"
    );
    let labels = g.placeholder("labels");
    let dl = g.gradients(&labels.to_dtype(DType::F32).sum(), &[&labels]);
    let ints = Feed::new().with(&labels, Tensor::from_vec(vec![1i64, 2], &[2]));
    let err = sess.run(&dl[0], &ints).unwrap_err().to_string();
    assert!(err.contains("whose value is i64"), "{err}");

    let w = g.variable("w", Tensor::zeros(&[3], DType::F32));
    let msg = panic_message(|| drop(g.gradients(&w, &[&p])));
    assert!(msg.contains("one-element value"), "{msg}");
    let msg = panic_message(|| drop(g.variable("w", Tensor::zeros(&[1], DType::F32))));
    assert!(msg.contains("already has a variable named \"w\""), "{msg}");
    let msg = panic_message(|| drop(GradientDescentOptimizer::new(0.1).minimize(&p.sum())));
    assert!(msg.contains("no variable reaches the loss"), "{msg}");
    let other = Graph::new();
    let v = other.variable("v", Tensor::zeros(&[1], DType::F32));
    let msg =
        panic_message(|| drop(GradientDescentOptimizer::new(0.1).minimize_vars(&w.sum(), &[&v])));
    assert!(msg.contains("belongs to another graph"), "{msg}");
}

#[test]
fn negative_axes_named_ops_and_adjoint_ops_match_eager() {
    let mut rng = StdRng::seed_from_u64(11);
    let (x0, dy0) = (
        Tensor::randn(&[2, 3, 5, 5], DType::F64, &mut rng),
        Tensor::randn(&[2, 4, 3, 3], DType::F64, &mut rng),
    );
    let g = Graph::new();
    let x = g.variable("x", x0.clone());
    let dy = g.constant(dy0.clone());
    let opts = ConvOpts::new();
    let wg = x.conv2d_weight(&dy, (3, 3), &opts); // [4, 3, 3, 3]
    assert_eq!(wg.shape(), Some(vec![Some(4), Some(3), Some(3), Some(3)]));
    let s = wg.softmax(-1).sum_axes(&[-1, -2], false).sum_to(&[1, 3]); // [4, 3] → [1, 3]
    let t = s.index_add(-1, &[0, 0], &s.narrow(-1, 1, 2).mul_scalar(2.0));
    let u = t
        .add(&t.neg().div_scalar(4.0))
        .rsub_scalar(1.0)
        .transpose(-1, -2);
    let loss = u.sum();
    let dx = g.gradients(&loss, &[&x]);
    let out = Session::new(&g)
        .run_many(&[&loss, &dx[0]], &Feed::new())
        .unwrap();

    let xe = x0.requires_grad();
    let wg = xe.conv2d_weight(&dy0, (3, 3), &opts);
    let s = wg.softmax(-1).sum_axes(&[-1, -2], false).sum_to(&[1, 3]);
    let t = s.index_add(-1, &[0, 0], &s.narrow(-1, 1, 2).mul_scalar(2.0));
    let u = (&t + &(-&t).div_scalar(4.0))
        .rsub_scalar(1.0)
        .transpose(-1, -2);
    let loss = u.sum();
    assert!((out[0].item() - loss.item()).abs() < 1e-12);
    assert!(out[1].allclose(&grad(&loss, &[&xe])[0], 0.0, 1e-12));

    let free = g.placeholder("free");
    let msg = panic_message(|| drop(free.softmax(-1)));
    assert!(msg.contains("needs the rank"), "{msg}");
    assert_eq!(free.softmax(1).index(), free.index() + 1);
}

#[test]
fn a_gradient_reaching_an_op_without_a_derivative_is_an_error_naming_it() {
    let g = Graph::new();
    let x = g.placeholder("x");
    let w = g.variable("w", Tensor::from_vec(vec![1.0f32, -2.0, 3.0], &[3]));
    let zero = g.constant(Tensor::zeros(&[3], DType::F32));
    let through: Vec<(&str, Node)> = vec![
        ("argmax", (&w.argmax(0).to_dtype(DType::F32) * &x).sum()),
        ("gt", (&w.gt(&zero) * &w).sum()),
        ("sign", (&w.sign() * &x).sum()),
        (
            "to_dtype",
            w.to_dtype(DType::I64).to_dtype(DType::F32).sum(),
        ),
    ];
    let mut sess = Session::new(&g);
    let feed = Feed::new().with(&x, Tensor::ones(&[3], DType::F32));
    for (op, loss) in &through {
        let dw = g.gradients(loss, &[&w]);
        let err = sess.run(&dw[0], &feed).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{op} has no derivative")),
            "{op}: {err}"
        );
        let step = GradientDescentOptimizer::new(0.1).minimize(loss);
        let err = sess.run(&step, &feed).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{op} has no derivative")),
            "{op}: {err}"
        );
        assert_eq!(
            sess.run(&w, &feed).unwrap().to_vec::<f32>(),
            vec![1.0, -2.0, 3.0]
        );
    }
    // A mask used to select, not differentiated, is fine: relu written with `where`.
    let relu = w.gt(&zero).where_cond(&w, &zero).sum();
    let dw = g.gradients(&relu, &[&w]);
    assert_eq!(
        sess.run(&dw[0], &feed).unwrap().to_vec::<f32>(),
        vec![1.0, 0.0, 1.0]
    );

    // Eager: the try_ forms return the same error, the plain forms panic with it.
    let v = Tensor::from_vec(vec![1.0f32, -2.0], &[2]).requires_grad();
    let y = (&v * &v.sign()).sum();
    let err = try_grad(&y, &[&v], false).unwrap_err().to_string();
    assert!(err.starts_with("sign has no derivative"), "{err}");
    let err = y.try_backward().unwrap_err().to_string();
    assert!(err.starts_with("sign has no derivative"), "{err}");
    assert!(panic_message(|| drop(y.backward())).starts_with("sign has no derivative"));
    let err = v.try_backward().unwrap_err().to_string();
    assert!(err.contains("one-element result"), "{err}");
    let err = v.detach().sum().try_backward().unwrap_err().to_string();
    assert!(err.contains("not tracked"), "{err}");
    let seed = Tensor::ones(&[3], DType::F32);
    let err = v.try_backward_with(&seed, false).unwrap_err().to_string();
    assert!(
        err.contains("seed gradient has shape [3], the output [2]"),
        "{err}"
    );
}

#[test]
fn every_op_on_mixed_dtypes_gives_the_dtype_the_graph_inferred() {
    // Each first run compares every node's inferred shape and dtype with the eager result
    // (a disagreement panics): here on f32 meeting f64 and i64 in every multi-input op.
    let g = Graph::new();
    let a = g.constant(Tensor::from_vec(vec![1.0f32, -2.0], &[2]));
    let b = g.constant(Tensor::from_vec(vec![0.5f64, 3.0], &[2]));
    let i = g.constant(Tensor::from_vec(vec![1i64, -2], &[2]));
    let nodes = [
        a.gt(&b),
        b.gt(&a),
        a.eq(&i),
        i.lt(&i),
        &a + &b,
        &i * &a,
        a.gt(&b).where_cond(&a, &b),
        Node::cat(&[&a, &b], 0),
        Node::stack(&[&b, &a], 0),
    ];
    let want = [
        DType::F64,
        DType::F64,
        DType::F32,
        DType::I64,
        DType::F64,
        DType::F32,
        DType::F64,
        DType::F64,
        DType::F64,
    ];
    let mut sess = Session::unoptimized(&g);
    for (n, d) in nodes.iter().zip(want) {
        assert_eq!(sess.run(n, &Feed::new()).unwrap().dtype(), d, "{n:?}");
    }
    // The eager comparison agrees: f32 against f64 compares in f64.
    let (x, y) = (Tensor::scalar(0.1f32), Tensor::scalar(0.1f64));
    assert_eq!(x.eq(&y).dtype(), DType::F64);
    assert_eq!(x.eq(&y).item(), 0.0, "0.1f32 is not 0.1f64");
}

#[test]
fn eager_ops_and_graph_inference_refuse_integers_alike() {
    // One dtype rule per op: an integer operand that the eager op refuses, naming itself, is
    // refused as the node is added, with the same reason; one it promotes is promoted in both.
    let x = Tensor::from_vec(vec![1i64, 2, 3, 4], &[1, 1, 2, 2]);
    let w = Tensor::from_vec(vec![0.5f32], &[1, 1, 1, 1]);
    type Case = (
        &'static str,
        fn(&Tensor, &Tensor) -> Tensor,
        fn(&Node, &Node) -> Node,
    );
    let refused: [Case; 9] = [
        ("softmax", |x, _| x.softmax(1), |x, _| x.softmax(1)),
        (
            "mean_axes",
            |x, _| x.mean_axes(&[0], false),
            |x, _| x.mean_axes(&[0], false),
        ),
        (
            "max_axes",
            |x, _| x.max_axes(&[2], true),
            |x, _| x.max_axes(&[2], true),
        ),
        ("argmax", |x, _| x.argmax(3), |x, _| x.argmax(3)),
        (
            "sum_to",
            |x, _| x.sum_to(&[1, 1, 1, 2]),
            |x, _| x.sum_to(&[1, 1, 1, 2]),
        ),
        (
            "max_pool2d",
            |x, _| x.max_pool2d(2, 2, 0),
            |x, _| x.max_pool2d(2, 2, 0),
        ),
        (
            "adaptive_avg_pool2d",
            |x, _| x.adaptive_avg_pool2d(1, 1),
            |x, _| x.adaptive_avg_pool2d(1, 1),
        ),
        (
            "conv2d",
            |x, w| x.conv2d(w, &ConvOpts::new()),
            |x, w| x.conv2d(w, &ConvOpts::new()),
        ),
        (
            "conv2d",
            |x, w| w.conv2d(x, &ConvOpts::new()),
            |x, w| w.conv2d(x, &ConvOpts::new()),
        ),
    ];
    for (op, eager, graph) in refused {
        let eager_msg = panic_message(|| drop(eager(&x, &w)));
        let g = Graph::new();
        let (gx, gw) = (g.constant(x.clone()), g.constant(w.clone()));
        let graph_msg = panic_message(|| drop(graph(&gx, &gw)));
        for msg in [&eager_msg, &graph_msg] {
            assert!(msg.starts_with(op), "{op}: {msg}");
            assert!(msg.contains("an i64 tensor reached"), "{op}: {msg}");
        }
    }
    // A sum of integers is an exact integer sum in both, with nothing to add too.
    let g = Graph::new();
    let gx = g.constant(x.clone());
    for axes in [&[0usize, 2][..], &[]] {
        let eager = x.sum_axes(axes, false);
        let node = gx.sum_axes(axes, false);
        assert_eq!(
            (eager.dtype(), node.dtype()),
            (DType::I64, Some(DType::I64))
        );
        let got = Session::new(&g).run(&node, &Feed::new()).unwrap();
        assert_eq!(got.to_vec::<i64>(), eager.to_vec::<i64>());
    }
    // Upsampling moves elements: an integer image (labels, say) upsamples in both.
    let up = x.upsample_nearest2d(2, 1);
    assert_eq!(up.dtype(), DType::I64);
    let g = Graph::new();
    let gx = g.constant(x.clone());
    let got = Session::new(&g).run(&gx.upsample_nearest2d(2, 1), &Feed::new());
    assert_eq!(got.unwrap().to_vec::<i64>(), up.to_vec::<i64>());
    // matmul promotes an integer operand beside a float one, and refuses two integers.
    let (a, b) = (x.reshape(&[2, 2]), w.reshape(&[1, 1]).broadcast_to(&[2, 2]));
    assert_eq!(a.matmul(&b).dtype(), DType::F32);
    assert!(a
        .try_matmul(&a)
        .unwrap_err()
        .to_string()
        .starts_with("matmul: an i64"));
    let g = Graph::new();
    let (ga, gb) = (g.constant(a.clone()), g.constant(b.contiguous()));
    assert_eq!(
        Session::new(&g)
            .run(&ga.matmul(&gb), &Feed::new())
            .unwrap()
            .dtype(),
        DType::F32
    );
    let err = ga.try_matmul(&ga).unwrap_err().to_string();
    assert!(err.starts_with("matmul: an i64"), "{err}");
}

#[test]
fn graphs_nodes_and_sessions_move_between_threads() {
    fn sendable<T: Send + Sync>(_: &T) {}
    let g = Graph::new();
    let x = g.placeholder("x");
    let w = g.variable("w", Tensor::from_vec(vec![2.0f32], &[1]));
    let loss = (&x * &w).sum();
    let step = GradientDescentOptimizer::new(0.5).minimize(&loss);
    let mut sess = Session::new(&g);
    sendable(&g);
    sendable(&loss);
    sendable(&sess);
    // Runs on several threads at once read the graph; one of them also adds nodes to it.
    let values: Vec<f32> = std::thread::scope(|s| {
        let runs: Vec<_> = (1..=4)
            .map(|k| {
                let (g, x, loss) = (g.clone(), x.clone(), loss.clone());
                s.spawn(move || {
                    let extra = &loss * (k as f64);
                    let feed = Feed::new().with(&x, Tensor::full(&[3], k as f64, DType::F32));
                    Session::new(&g).run(&extra, &feed).unwrap().item() as f32
                })
            })
            .collect();
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(values, vec![6.0, 24.0, 54.0, 96.0]);
    let feed = Feed::new().with(&x, Tensor::ones(&[3], DType::F32));
    std::thread::spawn(move || sess.run(&step, &feed).map(drop))
        .join()
        .unwrap()
        .unwrap();
    let after = Session::new(&g).run(&w, &Feed::new()).unwrap();
    assert_eq!(
        after.to_vec::<f32>(),
        vec![0.5],
        "one step of 0.5 × 3 from 2"
    );
}

#[test]
fn layer_norm_is_one_node_with_the_eager_values_and_gradients() {
    let xs = Tensor::from_vec((0..12).map(|i| (i as f64 * 0.7).sin()).collect(), &[3, 4]);
    let (w0, b0) = (
        Tensor::from_vec(vec![1.0, 0.5, -2.0, 3.0], &[4]),
        Tensor::from_vec(vec![0.1, 0.0, -0.3, 0.2], &[4]),
    );
    let g = Graph::new();
    let x = g.placeholder("x");
    let (w, b) = (g.variable("w", w0.clone()), g.variable("b", b0.clone()));
    let y = x.layer_norm(&w, &b, 1e-5);
    let loss = (&y * &y).sum();
    let dw = g.gradients(&loss, &[&w]).remove(0);
    assert!(format!("{y:?}").contains("layer_norm"), "{y:?}");
    let mut sess = Session::new(&g);
    let feed = Feed::new().with(&x, xs.clone());
    let got = sess.run_many(&[&y, &dw], &feed).unwrap();
    // The same op run eagerly, its gradient by backward.
    let wl = w0.requires_grad();
    let eager = xs.layer_norm(&wl, &b0, 1e-5);
    let eager_dw = (&eager * &eager).sum().backward().get(&wl).unwrap();
    assert_eq!(got[0].to_vec::<f64>(), eager.to_vec::<f64>());
    assert_eq!(got[1].to_vec::<f64>(), eager_dw.to_vec::<f64>());
    // A weight that does not fit the last axis is refused when the shapes are known.
    let short = g.variable("short", Tensor::ones(&[3], DType::F64));
    let bad = x.layer_norm(&short, &b, 1e-5);
    let err = sess.run(&bad, &feed).unwrap_err().to_string();
    assert!(
        err.contains("layer_norm(eps=1e-5): expected input [..., D] with weight and bias [D]"),
        "{err}"
    );
}

/// A graph node refuses at build time exactly what the eager op refuses, in the same words:
/// both check with the op's one shape rule (`ops::shape`).
#[test]
fn graph_and_eager_ops_refuse_the_same_shapes_in_the_same_words() {
    type Build<'a> = &'a dyn Fn(&[Tensor]) -> Tensor;
    type Node1<'a> = &'a dyn Fn(&[Node]) -> Node;
    let t = |s: &[usize]| Tensor::zeros(s, DType::F32);
    let cases: Vec<(&str, Vec<Tensor>, Build, Node1)> = vec![
        ("reshape", vec![t(&[2, 3])], &|x| x[0].reshape(&[4]), &|x| {
            x[0].reshape(&[4])
        }),
        (
            "permute",
            vec![t(&[2, 3])],
            &|x| x[0].permute(&[0, 0]),
            &|x| x[0].permute(&[0, 0]),
        ),
        (
            "broadcast_to",
            vec![t(&[2, 3])],
            &|x| x[0].broadcast_to(&[4, 3]),
            &|x| x[0].broadcast_to(&[4, 3]),
        ),
        (
            "narrow",
            vec![t(&[2, 3])],
            &|x| x[0].narrow(1, 2, 2),
            &|x| x[0].narrow(1, 2, 2),
        ),
        ("squeeze", vec![t(&[2, 3])], &|x| x[0].squeeze(0), &|x| {
            x[0].squeeze(0)
        }),
        (
            "flatten_from",
            vec![t(&[2, 3])],
            &|x| x[0].flatten_from(3),
            &|x| x[0].flatten_from(3),
        ),
        ("sum_to", vec![t(&[2, 3])], &|x| x[0].sum_to(&[2]), &|x| {
            x[0].sum_to(&[2])
        }),
        (
            "sum_axes",
            vec![t(&[2, 3])],
            &|x| x[0].sum_axes(&[1, 1], false),
            &|x| x[0].sum_axes(&[1, 1], false),
        ),
        (
            "cat",
            vec![t(&[2, 3]), t(&[2, 4])],
            &|x| Tensor::cat(&[&x[0], &x[1]], 0),
            &|x| Node::cat(&[&x[0], &x[1]], 0),
        ),
        (
            "pad",
            vec![t(&[2, 3])],
            &|x| x[0].pad(&[(1, 1)], 0.0),
            &|x| x[0].pad(&[(1, 1)], 0.0),
        ),
        (
            "index_select",
            vec![t(&[2, 3])],
            &|x| x[0].index_select(0, &[5]),
            &|x| x[0].index_select(0, &[5]),
        ),
        (
            "matmul",
            vec![t(&[2, 3]), t(&[4, 2])],
            &|x| x[0].matmul(&x[1]),
            &|x| x[0].matmul(&x[1]),
        ),
        (
            "max_pool2d",
            vec![t(&[1, 1, 0, 4])],
            &|x| x[0].max_pool2d(2, 2, 0),
            &|x| x[0].max_pool2d(2, 2, 0),
        ),
        (
            "avg_pool2d",
            vec![t(&[1, 1, 4, 4])],
            &|x| x[0].avg_pool2d(2, 2, 2),
            &|x| x[0].avg_pool2d(2, 2, 2),
        ),
        (
            "upsample_nearest2d",
            vec![t(&[1, 1, 2, 2])],
            &|x| x[0].upsample_nearest2d(0, 2),
            &|x| x[0].upsample_nearest2d(0, 2),
        ),
        (
            "layer_norm",
            vec![t(&[2, 3]), t(&[2]), t(&[3])],
            &|x| x[0].layer_norm(&x[1], &x[2], 1e-5),
            &|x| x[0].layer_norm(&x[1], &x[2], 1e-5),
        ),
    ];
    let convs: Vec<(&str, Vec<Tensor>, Build, Node1)> = vec![
        (
            "conv2d",
            vec![t(&[1, 3, 4, 4]), t(&[2, 3, 5, 5])],
            &|x| x[0].conv2d(&x[1], &ConvOpts::new()),
            &|x| x[0].conv2d(&x[1], &ConvOpts::new()),
        ),
        (
            "conv2d",
            vec![t(&[1, 3, 4, 4]), t(&[2, 2, 3, 3])],
            &|x| x[0].conv2d(&x[1], &ConvOpts::new()),
            &|x| x[0].conv2d(&x[1], &ConvOpts::new()),
        ),
        (
            "conv_transpose2d",
            vec![t(&[1, 3, 0, 4]), t(&[3, 2, 3, 3])],
            &|x| x[0].conv_transpose2d(&x[1], &ConvOpts::new()),
            &|x| x[0].conv_transpose2d(&x[1], &ConvOpts::new()),
        ),
        (
            "conv_transpose2d",
            vec![t(&[1, 3, 4, 4]), t(&[3, 2, 3, 3])],
            &|x| x[0].conv_transpose2d(&x[1], &ConvOpts::new().output_padding(1)),
            &|x| x[0].conv_transpose2d(&x[1], &ConvOpts::new().output_padding(1)),
        ),
        (
            "conv2d_weight",
            vec![t(&[2, 3, 4, 4]), t(&[1, 2, 2, 2])],
            &|x| x[0].conv2d_weight(&x[1], (3, 3), &ConvOpts::new()),
            &|x| x[0].conv2d_weight(&x[1], (3, 3), &ConvOpts::new()),
        ),
        (
            "conv2d_weight",
            vec![t(&[1, 3, 4, 4]), t(&[1, 2, 3, 3])],
            &|x| x[0].conv2d_weight(&x[1], (3, 3), &ConvOpts::new()),
            &|x| x[0].conv2d_weight(&x[1], (3, 3), &ConvOpts::new()),
        ),
    ];
    for (op, inputs, eager, graph) in cases.into_iter().chain(convs) {
        let eager_msg = panic_message(|| drop(eager(&inputs)));
        let reason = eager_msg
            .strip_prefix(&format!("{op}: "))
            .unwrap_or_else(|| panic!("{op}: the eager message names the op: {eager_msg}"));
        let g = Graph::new();
        let nodes: Vec<Node> = inputs.iter().map(|x| g.constant(x.clone())).collect();
        let graph_msg = panic_message(|| drop(graph(&nodes)));
        assert!(
            graph_msg.contains(reason),
            "{op}: the graph says {graph_msg:?}, the eager op {eager_msg:?}"
        );
    }
}

/// One pre-norm transformer block `[n, t, c]` → `[n, t, c]` with `h` heads, written once and
/// expanded for tensors and for nodes: the graph is built with the eager calls. `p` holds the
/// two norms, the fused QKV projection, the output projection and the MLP (12 values).
macro_rules! transformer_block {
    ($x:expr, $p:expr, ($n:expr, $t:expr, $c:expr, $h:expr)) => {{
        let (x, p, (n, t, c, h)) = ($x, $p, ($n, $t, $c, $h));
        let qkv = x.layer_norm(&p[0], &p[1], 1e-5).linear(&p[2], Some(&p[3]));
        let split = |i: usize| {
            qkv.narrow(2, i * c, c)
                .reshape(&[n, t, h, c / h])
                .transpose(1, 2)
        };
        let (q, k, v) = (split(0), split(1), split(2));
        let a = q.scaled_dot_product_attention(&k, &v, &Attention::new().causal(true));
        let x = x + &a
            .transpose(1, 2)
            .reshape(&[n, t, c])
            .linear(&p[4], Some(&p[5]));
        let hidden = x
            .layer_norm(&p[6], &p[7], 1e-5)
            .linear(&p[8], Some(&p[9]))
            .gelu_tanh();
        &x + &hidden.linear(&p[10], Some(&p[11]))
    }};
}

/// Values for a block of width `c`, in `transformer_block!`'s order.
fn block_values(c: usize, seed: u64) -> Vec<Tensor> {
    let mut rng = StdRng::seed_from_u64(seed);
    let shapes: [&[usize]; 12] = [
        &[c],
        &[c],
        &[3 * c, c],
        &[3 * c],
        &[c, c],
        &[c],
        &[c],
        &[c],
        &[4 * c, c],
        &[4 * c],
        &[c, 4 * c],
        &[c],
    ];
    shapes
        .iter()
        .map(|s| &Tensor::randn(s, DType::F64, &mut rng) * 0.3)
        .collect()
}

#[test]
fn a_transformer_block_built_as_a_graph_gives_eagers_values_and_gradients() {
    let (n, t, c, h) = (2, 5, 8, 2);
    let mut rng = StdRng::seed_from_u64(7);
    let x0 = Tensor::randn(&[n, t, c], DType::F64, &mut rng);
    let m0 = Tensor::randn(&[c, 3], DType::F64, &mut rng);
    let values = block_values(c, 1);

    let x = x0.requires_grad();
    let m = m0.requires_grad();
    let p: Vec<Tensor> = values.iter().map(|v| v.requires_grad()).collect();
    let y = transformer_block!(&x, &p, (n, t, c, h));
    let out = Tensor::einsum("btc,cd->btd", &[&y, &m]);
    let loss = out.square().mean();
    let mut wrt: Vec<&Tensor> = vec![&x, &m];
    wrt.extend(&p);
    let eager_grads = grad(&loss, &wrt);

    let g = Graph::new();
    let gx = g.placeholder_with("x", &[None, Some(t), Some(c)], DType::F64);
    let gm = g.variable("m", m0.clone());
    let gp: Vec<Node> = values
        .iter()
        .enumerate()
        .map(|(i, v)| g.variable(&format!("p{i}"), v.clone()))
        .collect();
    let gy = transformer_block!(&gx, &gp, (n, t, c, h));
    let gout = Node::einsum("btc,cd->btd", &[&gy, &gm]);
    assert_eq!(gout.shape(), Some(vec![Some(n), Some(t), Some(3)]));
    let gloss = gout.square().mean();
    let mut gwrt: Vec<&Node> = vec![&gx, &gm];
    gwrt.extend(&gp);
    let mut fetches = vec![gloss.clone()];
    fetches.extend(g.gradients(&gloss, &gwrt));
    let refs: Vec<&Node> = fetches.iter().collect();
    let got = Session::new(&g)
        .run_many(&refs, &Feed::new().with(&gx, x0.clone()))
        .unwrap();

    assert_eq!(got[0].to_vec::<f64>(), loss.to_vec::<f64>());
    assert_eq!(got.len(), eager_grads.len() + 1);
    for (i, (a, b)) in got[1..].iter().zip(&eager_grads).enumerate() {
        assert_eq!(a.to_vec::<f64>(), b.to_vec::<f64>(), "gradient {i}");
    }
    // The listing names each op with its attributes.
    let listing = g.to_string();
    for op in [
        "linear",
        "scaled_dot_product_attention(causal=true, scale=None, dropout=None)",
        "einsum(spec=\"btc,cd->btd\")",
        "gelu_tanh",
        "narrow(axis=2, start=8, len=8)",
    ] {
        assert!(listing.contains(op), "{op} not in\n{listing}");
    }
}

/// A two-block GPT's mean cross-entropy on `ids` `[n·t]` (i64) predicting `targets`
/// `[n, t, 1]`, written once for tensors and nodes; `p` holds the token table `[v, c]` (tied
/// to the output), the position table `[t, c]`, the final norm and 12 values per block.
macro_rules! tiny_gpt_loss {
    ($ids:expr, $targets:expr, $p:expr, ($n:expr, $t:expr, $c:expr, $h:expr)) => {{
        let (p, (n, t, c, h)) = ($p, ($n, $t, $c, $h));
        let tokens = p[0].index_select(0, $ids).reshape(&[n, t, c]);
        let mut x = &tokens + &p[1];
        for b in 0..2 {
            x = transformer_block!(&x, &p[4 + 12 * b..], (n, t, c, h));
        }
        let logits = x.layer_norm(&p[2], &p[3], 1e-5).linear(&p[0], None);
        -&logits.log_softmax(2).gather(2, $targets).mean()
    }};
}

#[test]
fn a_gpt_built_as_a_graph_trains_with_eagers_losses() {
    let (vocab, n, t, c, h) = (11, 3, 6, 8, 2);
    let mut rng = StdRng::seed_from_u64(3);
    let mut values = vec![
        &Tensor::randn(&[vocab, c], DType::F64, &mut rng) * 0.3,
        &Tensor::randn(&[t, c], DType::F64, &mut rng) * 0.3,
        Tensor::ones(&[c], DType::F64),
        Tensor::zeros(&[c], DType::F64),
    ];
    values.extend(block_values(c, 4));
    values.extend(block_values(c, 5));
    let batches: Vec<(Tensor, Tensor)> = (0..4)
        .map(|_| {
            let draw = |shape: &[usize], rng: &mut StdRng| {
                let ids: Vec<i64> = (0..shape.iter().product())
                    .map(|_| rng.gen_range(0..vocab as i64))
                    .collect();
                Tensor::from_vec(ids, shape)
            };
            (draw(&[n * t], &mut rng), draw(&[n, t, 1], &mut rng))
        })
        .collect();

    let params: Vec<Param> = values.iter().cloned().map(Param::new).collect();
    let named: Vec<(String, Param)> = params
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("p{i}"), p.clone()))
        .collect();
    let mut adam = Adam::new(1e-2);
    let mut eager_losses = Vec::new();
    for (ids, targets) in &batches {
        let p: Vec<Tensor> = params.iter().map(Param::tensor).collect();
        let loss = tiny_gpt_loss!(ids, targets, &p, (n, t, c, h));
        eager_losses.push(loss.item());
        adam.step(&named, &loss.backward());
    }

    let g = Graph::new();
    let ids = g.placeholder_with("ids", &[Some(n * t)], DType::I64);
    let targets = g.placeholder_with("targets", &[Some(n), Some(t), Some(1)], DType::I64);
    let p: Vec<Node> = values
        .iter()
        .enumerate()
        .map(|(i, v)| g.variable(&format!("p{i}"), v.clone()))
        .collect();
    let loss = tiny_gpt_loss!(&ids, &targets, &p, (n, t, c, h));
    let train = GraphOptimizer::new(Adam::new(1e-2)).minimize(&loss);
    let mut sess = Session::new(&g);
    let graph_losses: Vec<f64> = batches
        .iter()
        .map(|(i, y)| {
            let feed = Feed::new().with(&ids, i.clone()).with(&targets, y.clone());
            sess.run(&train, &feed).unwrap().item()
        })
        .collect();

    assert_eq!(graph_losses, eager_losses);
    assert!(eager_losses[3] < eager_losses[0], "{eager_losses:?}");
    let last = sess.run(&p[5], &Feed::new()).unwrap();
    assert_eq!(last.to_vec::<f64>(), params[5].tensor().to_vec::<f64>());
}

#[test]
fn ops_with_several_outputs_give_each_as_a_node_with_eagers_values_and_gradients() {
    let mut rng = StdRng::seed_from_u64(11);
    let (n, h) = (3, 4);
    let gi0 = Tensor::randn(&[n, 4 * h], DType::F64, &mut rng);
    let gh0 = Tensor::randn(&[n, 4 * h], DType::F64, &mut rng);
    let c0 = Tensor::randn(&[n, h], DType::F64, &mut rng);
    let x0 = Tensor::randn(&[n, h, 2], DType::F64, &mut rng);
    let (w0, b0) = (
        Tensor::randn(&[h], DType::F64, &mut rng),
        Tensor::ones(&[h], DType::F64),
    );

    let (gi, c, x) = (gi0.requires_grad(), c0.requires_grad(), x0.requires_grad());
    let (hn, cn) = Tensor::lstm_cell(&gi, &gh0, &c);
    let (top, at) = hn.topk(2);
    let (y, mean, var) = x.batch_norm(&w0, &b0, 1e-5);
    let loss = &(&(&top.sum() + &cn.square().sum()) + &y.square().mean()) + &(&mean + &var).sum();
    let eager = grad(&loss, &[&gi, &c, &x]);

    let g = Graph::new();
    let (ggi, gc, gx) = (
        g.variable("gi", gi0.clone()),
        g.variable("c", c0.clone()),
        g.variable("x", x0.clone()),
    );
    let (gw, gb, ggh) = (g.constant(w0), g.constant(b0), g.constant(gh0));
    let (ghn, gcn) = Node::lstm_cell(&ggi, &ggh, &gc);
    let (gtop, gat) = ghn.topk(2);
    assert_eq!(gat.shape(), Some(vec![Some(n), Some(2)]));
    assert_eq!(gat.dtype(), Some(DType::I64));
    let (gy, gmean, gvar) = gx.batch_norm(&gw, &gb, 1e-5);
    assert_eq!(gvar.shape(), Some(vec![Some(h)]));
    let gloss =
        &(&(&gtop.sum() + &gcn.square().sum()) + &gy.square().mean()) + &(&gmean + &gvar).sum();
    let grads = g.gradients(&gloss, &[&ggi, &gc, &gx]);
    let mut sess = Session::new(&g);
    let got = sess
        .run_many(
            &[&gloss, &gat, &grads[0], &grads[1], &grads[2]],
            &Feed::new(),
        )
        .unwrap();
    assert_eq!(got[0].to_vec::<f64>(), loss.to_vec::<f64>());
    assert_eq!(got[1].to_vec::<i64>(), at.to_vec::<i64>());
    for k in 0..3 {
        assert_eq!(
            got[2 + k].to_vec::<f64>(),
            eager[k].to_vec::<f64>(),
            "gradient {k}"
        );
    }
    // A second topk of the same node is merged with the first, outputs included.
    let again = ghn.topk(2).1;
    let before = sess.evaluations();
    sess.run_many(&[&gat, &again], &Feed::new()).unwrap();
    let lstm_and_topk = 2;
    assert_eq!(sess.evaluations() - before, lstm_and_topk);
    assert!(g.to_string().contains("output(1)"), "{g}");
}

#[test]
fn recurrent_layers_same_convolutions_and_rectangular_pools_match_eager() {
    let mut rng = StdRng::seed_from_u64(12);
    let mut randn = |s: &[usize]| &Tensor::randn(s, DType::F64, &mut rng) * 0.5;
    let (n, t, input, h) = (2, 4, 3, 5);
    let x0 = randn(&[n, t, input]);
    let h0 = randn(&[n, h]);
    let weights: Vec<[Tensor; 4]> = [4, 3, 1]
        .iter()
        .map(|&gates| {
            [
                randn(&[gates * h, input]),
                randn(&[gates * h, h]),
                randn(&[gates * h]),
                randn(&[gates * h]),
            ]
        })
        .collect();
    let image = randn(&[1, 2, 5, 6]);
    let kernel = randn(&[3, 2, 2, 3]);
    let opts = ConvOpts::new().dilation(2);

    let w = |k: usize| RecurrentWeights {
        w_ih: &weights[k][0],
        w_hh: &weights[k][1],
        b_ih: &weights[k][2],
        b_hh: &weights[k][3],
    };
    let x = x0.requires_grad();
    let (lo, lh, lc) = x.lstm(&h0, &h0, w(0));
    let (go, gh) = x.gru(&h0, w(1));
    let (ro, rh) = x.rnn_tanh(&h0, w(2));
    let conv = image.conv2d_same(&kernel, &opts);
    let pools = &conv.max_pool2d_hw([2, 3], [1, 2], [1, 1]).sum()
        + &conv.avg_pool2d_hw([3, 2], [2, 1], [0, 1]).sum();
    let parts = [&lo, &lh, &lc, &go, &gh, &ro, &rh];
    let loss = parts
        .iter()
        .fold(pools.clone(), |acc, p| &acc + &p.square().sum());
    let eager = grad(&loss, &[&x]).remove(0);

    let g = Graph::new();
    let gx = g.variable("x", x0.clone());
    let gh0 = g.constant(h0.clone());
    let gw: Vec<Vec<Node>> = weights
        .iter()
        .map(|ws| ws.iter().map(|v| g.constant(v.clone())).collect())
        .collect();
    let nw = |k: usize| RecurrentWeights {
        w_ih: &gw[k][0],
        w_hh: &gw[k][1],
        b_ih: &gw[k][2],
        b_hh: &gw[k][3],
    };
    let (glo, glh, glc) = gx.lstm(&gh0, &gh0, nw(0));
    let (ggo, ggh) = gx.gru(&gh0, nw(1));
    let (gro, grh) = gx.rnn_tanh(&gh0, nw(2));
    assert_eq!(glc.shape(), Some(vec![Some(n), Some(h)]));
    assert_eq!(gro.shape(), Some(vec![Some(n), Some(t), Some(h)]));
    let gconv = g.constant(image).conv2d_same(&g.constant(kernel), &opts);
    assert_eq!(
        gconv.shape(),
        Some(vec![Some(1), Some(3), Some(5), Some(6)])
    );
    let gpools = &gconv.max_pool2d_hw([2, 3], [1, 2], [1, 1]).sum()
        + &gconv.avg_pool2d_hw([3, 2], [2, 1], [0, 1]).sum();
    let gparts = [&glo, &glh, &glc, &ggo, &ggh, &gro, &grh];
    let gloss = gparts
        .iter()
        .fold(gpools.clone(), |acc, p| &acc + &p.square().sum());
    let dx = g.gradients(&gloss, &[&gx]).remove(0);
    let got = Session::new(&g)
        .run_many(&[&gloss, &dx], &Feed::new())
        .unwrap();
    assert_eq!(got[0].to_vec::<f64>(), loss.to_vec::<f64>());
    assert_eq!(got[1].to_vec::<f64>(), eager.to_vec::<f64>());
    // A weight of the wrong size is refused where the graph is built.
    let short = g.constant(Tensor::zeros(&[3 * h], DType::F64));
    let bad = RecurrentWeights {
        b_hh: &short,
        ..nw(0)
    };
    let msg = panic_message(|| {
        gx.lstm(&gh0, &gh0, bad);
    });
    assert!(msg.contains("lstm: expected x [N, T, in]"), "{msg}");
}

/// The `Tensor` methods of the op layer (`src/ops`): the names of `pub fn`s in `impl Tensor`
/// blocks, and the comparisons its macro writes.
fn tensor_ops_in(dir: &std::path::Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            tensor_ops_in(&path, found);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut in_impl = false;
        for line in text.lines() {
            if line.starts_with("impl Tensor {") {
                in_impl = true;
            } else if line == "}" {
                in_impl = false;
            } else if let Some(rest) = line.trim_start().strip_prefix("comparison_with_scalar!(") {
                found.push(rest.split(", ").nth(1).unwrap().to_string());
            } else if let Some(rest) = line.strip_prefix("    pub fn ") {
                if in_impl {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    found.push(name);
                }
            }
        }
    }
}

#[test]
fn every_tensor_op_has_a_graph_form() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut ops = Vec::new();
    tensor_ops_in(&src.join("ops"), &mut ops);
    assert!(ops.len() > 60, "the scan found only {ops:?}");
    let mut graph = String::new();
    for entry in std::fs::read_dir(src.join("graph")).unwrap() {
        graph += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    // What is not an op a graph holds, and why.
    let outside = [
        ("allclose", "compares two values into a bool"),
        (
            "shuffle",
            "draws from the caller's generator; a graph's ops are pure",
        ),
        (
            "multinomial",
            "draws from the caller's generator; a graph's ops are pure",
        ),
    ];
    let missing: Vec<&String> = ops
        .iter()
        .filter(|op| !outside.iter().any(|(name, _)| name == op))
        .filter(|op| {
            let forms = [
                format!("pub fn {op}("),
                format!("pub fn {op}<"),
                format!("compare_scalar!({op} "),
            ];
            !forms.iter().any(|f| graph.contains(f.as_str()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "Tensor ops without a Node form: {missing:?}"
    );
}

/// Selections, scans, statistics and norms, written once for tensors and nodes: `x` `[3, 4]`,
/// `w` `[4]`, `at` `[3, 2]` positions along axis 1, `rows` 1-d positions along axis 0.
macro_rules! selections_and_statistics {
    ($x:expr, $w:expr, $at:expr, $rows:expr) => {{
        let (x, w) = ($x, $w);
        let mask = x.gt_scalar(0.3);
        let picked = x.gather(1, $at).cumsum(1).cumprod(0);
        let filled = x.masked_fill(&mask, -1.5).tril(0) + x.triu(1);
        let normed = x.rms_norm(Some(w), None) + x.reshape(&[1, 3, 4]).rope(2, 100.0).squeeze(0);
        let stats = &x.logsumexp(&[1], true) + &x.var_axes(&[0], 1, false);
        let moved = x
            .flip(&[0, 1])
            .roll(-1, 1)
            .repeat(&[2, 1])
            .index_select(0, $rows);
        let compared = &x.detach().le_scalar(0.0) + &x.detach().ne_scalar(0.5);
        picked.sum()
            + filled.square().sum()
            + normed.sum()
            + stats.std_axes(&[0, 1], 0, false)
            + moved.square().mean()
            + compared.sum()
    }};
}

#[test]
fn selections_scans_statistics_and_norms_match_eager() {
    let mut rng = StdRng::seed_from_u64(13);
    let x0 = Tensor::randn(&[3, 4], DType::F64, &mut rng);
    let w0 = Tensor::randn(&[4], DType::F64, &mut rng);
    let at = Tensor::from_vec(vec![3i64, 0, 1, 1, 2, 3], &[3, 2]);
    let rows = Tensor::from_vec(vec![5i64, 0, 2], &[3]);
    let (x, w) = (x0.requires_grad(), w0.requires_grad());
    let loss = selections_and_statistics!(&x, &w, &at, &rows);
    let eager = grad(&loss, &[&x, &w]);

    let g = Graph::new();
    let (gx, gw) = (g.variable("x", x0), g.variable("w", w0));
    let (gat, grows) = (
        g.constant(at),
        g.placeholder_with("rows", &[Some(3)], DType::I64),
    );
    let gloss = selections_and_statistics!(&gx, &gw, &gat, &grows);
    let grads = g.gradients(&gloss, &[&gx, &gw]);
    let got = Session::new(&g)
        .run_many(
            &[&gloss, &grads[0], &grads[1]],
            &Feed::new().with(&grows, rows),
        )
        .unwrap();
    assert_eq!(got[0].to_vec::<f64>(), loss.to_vec::<f64>());
    assert_eq!(got[1].to_vec::<f64>(), eager[0].to_vec::<f64>());
    assert_eq!(got[2].to_vec::<f64>(), eager[1].to_vec::<f64>());
}
