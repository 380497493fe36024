//! The public API contract of DESIGN.md, written as its users write it. If this stops compiling, code outside the repository breaks too.

use crate::common::turn;

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn the_contract_compiles_and_behaves() {
    let mut rng = StdRng::seed_from_u64(0);
    // tensors
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let b = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.0], &[2, 2]);
    let d = Tensor::from_vec(vec![1.0f64, 2.0], &[2]);
    let s = Tensor::scalar(2.0f32);
    let z = Tensor::zeros(&[2, 3], DType::F32);
    let _ = (
        Tensor::ones(&[2], DType::F64),
        Tensor::full(&[2], 3.0, DType::F32),
    );
    let r = Tensor::randn(&[2, 3], DType::F32, &mut rng);
    let _turn = turn();
    manual_seed(42);
    assert_eq!(a.shape(), &[2, 2]);
    assert_eq!(d.dtype(), DType::F64);
    assert_eq!(a.to_vec::<f32>().len(), 4);
    assert_eq!(s.item(), 2.0);
    assert_eq!(a.to_dtype(DType::F64).dtype(), DType::F64);
    assert_eq!((z.shape(), r.shape()), (&[2usize, 3][..], &[2usize, 3][..]));

    // ops
    let _ = (&a + &b, &a - &b, &a * &b, &a / &b, -&a, &a * 2.0, &a + 1.0);
    let _ = a.matmul(&b);
    let _ = (
        a.exp(),
        b.abs().log(),
        a.sqrt(),
        a.powf(2.0),
        a.square(),
        a.abs(),
        a.tanh(),
        a.sigmoid(),
        a.relu(),
    );
    let _ = (a.maximum(&b), a.minimum(&b));
    let _ = (a.sum(), a.mean());
    let _ = (
        a.sum_axes(&[1], false),
        a.mean_axes(&[0, 1], true),
        a.max_axes(&[1], false),
    );
    let _ = (
        a.reshape(&[4]),
        a.transpose(0, 1),
        a.permute(&[1, 0]),
        a.broadcast_to(&[3, 2, 2]),
    );
    let _ = (a.softmax(1), a.log_softmax(1), a.argmax(1));
    let _ = (
        Tensor::cat(&[&a, &b], 0),
        a.narrow(0, 1, 1),
        a.index_select(0, &[1, 0]),
    );

    // autodiff
    let w = Tensor::from_vec(vec![1.0f32], &[1]).requires_grad();
    let loss = (&w * 3.0).sum();
    let grads: Gradients = loss.backward();
    assert_eq!(grads.get(&w).unwrap().item(), 3.0);
    let gs: Vec<Tensor> = grad(&loss, &[&w]);
    assert_eq!(gs[0].item(), 3.0);
    let g2 = loss.backward_with_graph();
    assert!(g2.get(&w).is_some());
    assert!(!a.detach().is_tracked());
    no_grad(|| assert!(!(&w * 2.0).is_tracked()));
    let x = Tensor::scalar(100.0f32).requires_grad();
    let y = custom_gradient(&[&x], |xs: &[Tensor]| {
        let e = xs[0].exp();
        let y = (&e + 1.0).log();
        (y, move |up: &Tensor| {
            vec![up * &(1.0 - &(1.0 / &(&e + 1.0)))]
        })
    });
    assert_eq!(grad(&y, &[&x])[0].item(), 1.0);

    // training library
    let net = Net::new(vec![
        Box::new(Dense::new(784, 400)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(400, 100)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(100, 10)),
    ]);
    let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(1e-3));
    let x = Tensor::randn(&[4, 784], DType::F32, &mut rng);
    let y = ferrograd::data::one_hot(&[1, 2, 3, 4], 10);
    let pred = model.forward(&x);
    let (loss, grads) = model.backward(&pred, &y);
    let _: f32 = loss;
    model.apply_grads(&grads);
    let l: Tensor = SoftmaxCrossEntropy::new().loss(&pred, &y);
    assert_eq!(l.shape(), &[] as &[usize]);
}

#[test]
fn the_static_graph_contract() -> Result<()> {
    let g = Graph::new();
    let x = g.placeholder("x");
    let w = g.variable("weight", Tensor::from_vec(vec![1.0f32], &[1, 1]));
    let y = g.placeholder("y");
    let loss = (&(&x * &w) - &y).square().sum();
    let train = GradientDescentOptimizer::new(0.005).minimize(&loss);
    let dw: Vec<Node> = g.gradients(&loss, &[&w]);
    let mut sess = Session::new(&g);
    let xs = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    let ys = Tensor::from_vec(vec![3.0f32, 6.0], &[2]);
    let feed = Feed::new().with(&x, xs).with(&y, ys);
    let value: Tensor = sess.run(&loss, &feed)?;
    assert_eq!(value.item(), 20.0); // (1 − 3)² + (2 − 6)²
    assert_eq!(sess.run(&dw[0], &feed)?.item(), -20.0); // Σ 2(xw − y)x
    sess.run(&train, &feed)?;
    let vals: Vec<Tensor> = sess.run_many(&[&loss, &w], &feed)?;
    assert!((vals[1].item() - 1.1).abs() < 1e-6); // 1 − 0.005·(−20)
    assert!(vals[0].item() < 20.0);
    let d2: Vec<Node> = g.gradients(&dw[0], &[&w]);
    assert_eq!(sess.run(&d2[0], &feed)?.item(), 10.0); // Σ 2x²
    let dot: String = g.to_dot();
    assert!(dot.starts_with("digraph"));
    Ok(())
}
