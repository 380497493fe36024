//! Four classic PyTorch tutorials written with ferrograd, kept as tests so that they keep
//! working: a cubic fit of sin(x), a custom backward (the Legendre polynomial P3), a two-moons
//! classifier with a checkpoint round trip, and a physics-informed fit of u'' = −u that needs
//! second derivatives.

use crate::common::{scratch, turn};
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// PyTorch's "fitting sin(x) with a third-order polynomial": a + bx + cx² + dx³ on [−π, π] by
/// gradient descent on the summed squared error.
#[test]
fn cubic_fit_of_sine() {
    let x = Tensor::linspace(
        -std::f64::consts::PI,
        std::f64::consts::PI,
        2000,
        DType::F64,
    );
    let y = x.sin();
    let coef: Vec<Param> = (0..4).map(|_| Param::new(Tensor::scalar(0.0f64))).collect();
    let mut loss = 0.0;
    for _ in 0..2000 {
        let pred = (0..4).fold(Tensor::zeros(&[2000], DType::F64), |acc, k| {
            &acc + &(&coef[k].tensor() * &x.powf(k as f64))
        });
        let l = (&pred - &y).square().sum();
        loss = l.item();
        let grads = l.backward();
        no_grad(|| {
            for p in &coef {
                let g = grads.get_param(p).unwrap();
                p.set(&(&p.tensor() - &g.mul_scalar(1e-6)));
            }
        });
    }
    // The tutorial reaches a loss near 9 after 2000 steps: y ≈ x − 0.09 x³ around 0.
    assert!(loss < 20.0, "loss {loss}");
    let d = coef[3].tensor().item();
    assert!((-0.1..-0.07).contains(&d), "x³ coefficient {d}");
}

/// PyTorch's custom `autograd.Function` example: P3(x) = ½(5x³ − 3x) with its derivative
/// written by hand, 1.5(5x² − 1), used in y = a + b·P3(c + dx).
#[test]
fn legendre_polynomial_with_a_custom_backward() {
    let p3 = |t: &Tensor| {
        custom_gradient(&[t], |xs| {
            let x = xs[0].clone();
            let y = (&(&x.powf(3.0) * 5.0) - &(&x * 3.0)).mul_scalar(0.5);
            (y, move |up: &Tensor| {
                vec![up * &(&(&x.square() * 5.0) - 1.0).mul_scalar(1.5)]
            })
        })
    };
    let x = Tensor::linspace(
        -std::f64::consts::PI,
        std::f64::consts::PI,
        2000,
        DType::F64,
    );
    let y = x.sin();
    let init = [0.0, -1.0, 0.0, 0.3];
    let w: Vec<Param> = init
        .iter()
        .map(|&v| Param::new(Tensor::scalar(v)))
        .collect();
    let mut loss = f64::INFINITY;
    for _ in 0..2000 {
        let inner = &w[2].tensor() + &(&w[3].tensor() * &x);
        let pred = &w[0].tensor() + &(&w[1].tensor() * &p3(&inner));
        let l = (&pred - &y).square().sum();
        loss = l.item();
        let grads = l.backward();
        no_grad(|| {
            for p in &w {
                p.set(&(&p.tensor() - &grads.get_param(p).unwrap().mul_scalar(5e-6)));
            }
        });
    }
    assert!(loss < 15.0, "loss {loss}");
    // The hand-written rule agrees with differentiating the polynomial itself.
    let t = Tensor::from_vec(vec![-0.7f64, 0.2, 1.1], &[3]).requires_grad();
    let custom = grad(&p3(&t).sum(), &[&t]).remove(0);
    let auto = grad(
        &(&(&t.powf(3.0) * 5.0) - &(&t * 3.0)).mul_scalar(0.5).sum(),
        &[&t],
    )
    .remove(0);
    assert!(custom.allclose(&auto, 1e-12, 1e-12));
}

/// Two interleaved half-moons with noise.
fn moons(n: usize, rng: &mut StdRng) -> (Tensor, Vec<usize>) {
    let noise = Tensor::randn(&[n, 2], DType::F32, rng)
        .mul_scalar(0.1)
        .to_vec::<f32>();
    let (mut pts, mut labels) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (t, upper) = (
            std::f32::consts::PI * (i / 2) as f32 / (n / 2) as f32,
            i % 2 == 0,
        );
        let (x, y) = if upper {
            (t.cos(), t.sin())
        } else {
            (1.0 - t.cos(), 0.5 - t.sin())
        };
        pts.extend([x + noise[2 * i], y + noise[2 * i + 1]]);
        labels.push(usize::from(!upper));
    }
    (Tensor::from_vec(pts, &[n, 2]), labels)
}

/// A small classifier on two moons, saved halfway and resumed: the resumed run ends where the
/// uninterrupted one does.
#[test]
fn two_moons_classifier_with_a_checkpoint_round_trip() {
    let _turn = turn();
    let mut rng = StdRng::seed_from_u64(0);
    let (x, labels) = moons(400, &mut rng);
    let data = TensorDataset::new(x.clone(), one_hot(&labels, 2));
    let build = || {
        manual_seed(5);
        let net = Net::new(vec![
            Box::new(Dense::new(2, 32)),
            Box::new(ReLU::new()),
            Box::new(Dense::new(32, 32)),
            Box::new(ReLU::new()),
            Box::new(Dense::new(32, 2)),
        ]);
        Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.01))
    };
    let batches = Batches::new(&data, 32).shuffle(1);
    let train = |model: &mut Model, epochs: std::ops::Range<u64>| {
        for e in epochs {
            for b in batches.epoch(e) {
                model.train_step(&b.inputs, &b.targets);
            }
        }
    };
    let path = scratch("tutorial_moons").join("moons.safetensors");
    let mut straight = build();
    train(&mut straight, 0..10);
    save_checkpoint(&path, &straight, 10).unwrap();
    train(&mut straight, 10..20);
    let mut resumed = build();
    let ck = load_checkpoint(&path).unwrap();
    ck.restore(&mut resumed).unwrap();
    train(&mut resumed, ck.epoch..20);
    let (a, b) = (straight.predict(&x), resumed.predict(&x));
    assert_eq!(a.to_vec::<f32>(), b.to_vec::<f32>());
    let acc = accuracy(&a, &labels);
    assert!(acc.accuracy > 0.97, "{acc}");
}

/// A physics-informed network: u(t) with u'' = −u, u(0) = 0, u'(0) = 1 (so u = sin t), fitted
/// by penalising the equation's residual at collocation points. The residual needs u'' of the
/// network's output with respect to its input: a gradient of a gradient, inside the loss.
#[test]
fn physics_informed_fit_needs_second_derivatives() {
    let _turn = turn();
    manual_seed(2);
    let net = Net::new(vec![
        Box::new(Dense::new(1, 24)),
        Box::new(Tanh::new()),
        Box::new(Dense::new(24, 24)),
        Box::new(Tanh::new()),
        Box::new(Dense::new(24, 1)),
    ]);
    for (_, p) in net.params() {
        p.set_dtype(DType::F64);
    }
    let t = Tensor::linspace(0.0, 3.0, 40, DType::F64).reshape(&[40, 1]);
    let zero = Tensor::zeros(&[1, 1], DType::F64);
    let mut opt = Adam::new(0.01);
    let mut loss = f64::INFINITY;
    for _ in 0..1500 {
        let t = t.requires_grad();
        let u = Layer::forward(&net, &t, Mode::Train);
        let du = grad_with_graph(&u.sum(), &[&t]).remove(0);
        let d2u = grad_with_graph(&du.sum(), &[&t]).remove(0);
        let residual = (&d2u + &u).square().mean();
        let z = zero.requires_grad();
        let u0 = Layer::forward(&net, &z, Mode::Train);
        let du0 = grad_with_graph(&u0.sum(), &[&z]).remove(0);
        let boundary = &u0.square().sum() + &(&du0 - 1.0).square().sum();
        let l = &residual + &boundary;
        loss = l.item();
        opt.step(&net.params(), &l.backward());
    }
    assert!(loss < 1e-2, "loss {loss}");
    let probe = Tensor::from_vec(vec![0.5f64, 1.5, 2.5], &[3, 1]);
    let u = no_grad(|| Layer::forward(&net, &probe, Mode::Eval)).to_vec::<f64>();
    for (got, t) in u.iter().zip([0.5f64, 1.5, 2.5]) {
        assert!(
            (got - t.sin()).abs() < 0.05,
            "u({t}) = {got}, sin = {}",
            t.sin()
        );
    }
}
