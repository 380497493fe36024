//! The training library: layers and losses against finite differences and hand-computed
//! values, optimizers' first steps against hand-computed values, schedules, train/eval
//! behaviour, and small problems trained to completion.

use crate::common::{panic_message, turn};

use ferrograd::optim::{
    ConstantLr, CosineAnnealing, ExponentialLr, LinearWarmup, MultiStepLr, StepLr, WarmupThen,
};
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, &mut StdRng::seed_from_u64(seed))
}

/// Checks a layer's gradients (input and every parameter) against central differences in f64.
fn layer_gradcheck(layer: &dyn Layer, x: &Tensor, mode: Mode) {
    for (_, p) in layer.params().into_iter().chain(layer.buffers()) {
        p.set_dtype(DType::F64);
    }
    let opts = GradcheckOptions::default();
    gradcheck(
        |t| layer.forward(&t[0], mode),
        std::slice::from_ref(x),
        &opts,
    )
    .unwrap_or_else(|e| panic!("{} (input): {e}", layer.name()));
    let r = randn(layer.forward(x, mode).shape(), 99);
    let objective = || (&layer.forward(x, mode) * &r).sum();
    for (name, p) in layer.params() {
        let analytic = objective()
            .backward()
            .get_param(&p)
            .expect("parameter reaches the output")
            .to_vec::<f64>();
        let base = p.tensor().to_vec::<f64>();
        for i in 0..base.len() {
            let at = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                p.set(&Tensor::from_vec(v, &p.shape()));
                no_grad(|| objective().item())
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            p.set(&Tensor::from_vec(base.clone(), &p.shape()));
            assert!(
                (analytic[i] - numeric).abs() <= 1e-5 + 1e-3 * numeric.abs(),
                "{} {name}[{i}]: analytic {} numeric {numeric}",
                layer.name(),
                analytic[i]
            );
        }
    }
}

#[test]
fn layers_pass_gradcheck() {
    let x = randn(&[4, 5], 1);
    layer_gradcheck(&Dense::new(5, 3), &x, Mode::Train);
    layer_gradcheck(&LayerNorm::new(5), &x, Mode::Train);
    layer_gradcheck(&BatchNorm1d::new(5), &x, Mode::Train);
    layer_gradcheck(&BatchNorm1d::new(5), &x, Mode::Eval);
    layer_gradcheck(&Tanh::new(), &x, Mode::Train);
    layer_gradcheck(&Sigmoid::new(), &x, Mode::Train);
    layer_gradcheck(&Softplus::new(), &x, Mode::Train);
    layer_gradcheck(&Gelu::new(), &x, Mode::Train);
    layer_gradcheck(&Elu::new(1.0), &(&x + 0.01), Mode::Train);
    layer_gradcheck(&Softmax::new(1), &x, Mode::Train);
    layer_gradcheck(&Flatten::new(), &randn(&[2, 3, 2], 2), Mode::Train);
    layer_gradcheck(&Reshape::new(&[2, 3]), &randn(&[2, 6], 3), Mode::Train);
    // Each training forward of Dropout draws a new mask, so its gradient is checked in
    // evaluation mode here and its mask in `dropout_and_batchnorm_switch_with_the_mode`.
    layer_gradcheck(&Dropout::with_seed(0.5, 1), &x, Mode::Eval);
    let emb = Embedding::new(6, 3);
    for (_, p) in emb.params() {
        p.set_dtype(DType::F64);
    }
    let ids = Tensor::from_vec(vec![1.0f64, 4.0, 1.0], &[3]);
    let r = randn(&[3, 3], 4);
    let g = (&emb.forward(&ids, Mode::Train) * &r).sum().backward();
    let gw = g.get_param(&emb.params()[0].1).unwrap().to_vec::<f64>();
    let rv = r.to_vec::<f64>();
    for j in 0..3 {
        assert!(
            (gw[3 + j] - (rv[j] + rv[6 + j])).abs() < 1e-12,
            "row 1 collects both uses"
        );
        assert!((gw[12 + j] - rv[3 + j]).abs() < 1e-12);
        assert_eq!(gw[j], 0.0);
    }
}

#[test]
fn elu_and_leaky_relu_values() {
    let x = Tensor::from_vec(vec![-1.0f64, 0.5], &[2]);
    let e = Elu::new(2.0).forward(&x, Mode::Eval).to_vec::<f64>();
    assert!((e[0] - 2.0 * ((-1f64).exp() - 1.0)).abs() < 1e-15 && e[1] == 0.5);
    assert_eq!(
        LeakyReLU::new(0.1).forward(&x, Mode::Eval).to_vec::<f64>(),
        vec![-0.1, 0.5]
    );
}

/// As PyTorch's: `manual_seed(s)` before a forward pass fixes its dropout masks (streams
/// drawn from the default generator start again), while a stream given its own seed, the
/// state a checkpoint restores, and the streams of other threads keep going.
#[test]
fn manual_seed_makes_dropout_reproducible_as_pytorchs() {
    let _g = turn();
    manual_seed(1);
    let net = Net::new(vec![
        Box::new(Dropout::new(0.5)),
        Box::new(Dense::new(8, 8)),
        Box::new(Dropout::new(0.5)),
    ]);
    let own = Dropout::with_seed(0.5, 9);
    let x = Tensor::ones(&[16, 8], DType::F32);
    let run = |seed: u64| {
        manual_seed(seed);
        let a = Layer::forward(&net, &x, Mode::Train).to_vec::<f32>();
        (a, own.forward(&x, Mode::Train).to_vec::<f32>())
    };
    let (first, own_first) = run(5);
    let (again, own_again) = run(5);
    assert_eq!(first, again, "the same seed, the same masks");
    assert_ne!(own_first, own_again, "a stream of its own keeps going");
    assert_ne!(run(6).0, first, "another seed, other masks");
    // Two layers never share a stream after a reseed.
    manual_seed(5);
    let streams: Vec<ferrograd::nn::StreamState> =
        net.rng_streams().iter().map(|(_, s)| s.state()).collect();
    assert_ne!(streams[0].seed, streams[1].seed);
    // Another thread's seed leaves the streams this thread draws from alone.
    let before = net.rng_streams()[0].1.state();
    std::thread::spawn(|| manual_seed(123)).join().unwrap();
    assert_eq!(net.rng_streams()[0].1.state(), before);
    // A stream made after another thread's seed follows it: drawing from it there restarts
    // nothing.
    let (seeded, wait_seeded) = std::sync::mpsc::channel();
    let (handed, wait_stream) =
        std::sync::mpsc::channel::<(ferrograd::nn::RngStream, ferrograd::nn::StreamState)>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            manual_seed(11);
            seeded.send(()).unwrap();
            let (stream, made) = wait_stream.recv().unwrap();
            let _ = stream.next_rng();
            assert_eq!(
                stream.state().seed,
                made.seed,
                "restarted by an earlier seed"
            );
        });
        wait_seeded.recv().unwrap();
        let late = Dropout::new(0.5);
        let stream = late.rng_streams()[0].1.clone();
        let made = stream.state();
        handed.send((stream, made)).unwrap();
    });
    // A restored state wins over a reseed that came before it.
    let saved = net.rng_streams()[0].1.state();
    let _ = Layer::forward(&net, &x, Mode::Train);
    manual_seed(7);
    net.rng_streams()[0].1.set_state(saved);
    assert_eq!(net.rng_streams()[0].1.state(), saved);
}

#[test]
fn dropout_and_batchnorm_switch_with_the_mode() {
    let x = Tensor::ones(&[1000, 10], DType::F32);
    let d = Dropout::with_seed(0.3, 7);
    assert_eq!(d.forward(&x, Mode::Eval).to_vec::<f32>(), x.to_vec::<f32>());
    let y = d.forward(&x, Mode::Train).to_vec::<f32>();
    let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / y.len() as f64;
    assert!((kept - 0.7).abs() < 0.02, "kept fraction {kept}");
    assert!(
        y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-6),
        "inverted scaling"
    );

    let bn = BatchNorm1d::new(2);
    let batch = Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 20.0], &[2, 2]);
    let out = bn.forward(&batch, Mode::Train).to_vec::<f32>();
    // Batch statistics: each column becomes (−1, 1) up to eps.
    for (o, w) in out.iter().zip([-1.0f32, -1.0, 1.0, 1.0]) {
        assert!((o - w).abs() < 1e-3, "{out:?}");
    }
    let b = bn.buffers();
    // Running mean after one step with momentum 0.1: 0.1 · batch mean.
    assert_eq!(b[0].1.tensor().to_vec::<f32>(), vec![0.2, 1.5]);
    // Running variance: 0.9 · 1 + 0.1 · unbiased variance (2 and 50).
    let rv = b[1].1.tensor().to_vec::<f32>();
    assert!(
        (rv[0] - 1.1).abs() < 1e-6 && (rv[1] - 5.9).abs() < 1e-5,
        "{rv:?}"
    );
    // Evaluation uses the running statistics.
    let e = bn.forward(&batch, Mode::Eval).to_vec::<f32>();
    assert!((e[0] - (1.0 - 0.2) / (1.1f32 + 1e-5).sqrt()).abs() < 1e-5);
}

#[test]
fn loss_values_and_gradients() {
    let logits = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 1.0, 1.0, 1.0], &[2, 3]).requires_grad();
    let y = Tensor::from_vec(vec![0.0f64, 0.0, 1.0, 1.0, 0.0, 0.0], &[2, 3]);
    let ce = SoftmaxCrossEntropy::new().loss(&logits, &y);
    let z: f64 = [1f64, 2.0, 3.0].iter().map(|v| v.exp()).sum();
    let want = (-(3f64.exp() / z).ln() - (1.0f64 / 3.0).ln()) / 2.0;
    assert!((ce.item() - want).abs() < 1e-12);
    // Gradient (softmax − y) / N.
    let g = ce.backward().get(&logits).unwrap().to_vec::<f64>();
    let p = logits.detach().softmax(1).to_vec::<f64>();
    for i in 0..6 {
        assert!((g[i] - (p[i] - y.to_vec::<f64>()[i]) / 2.0).abs() < 1e-12);
    }
    // Huge logits stay finite.
    let big = Tensor::from_vec(vec![1000.0f32, -1000.0], &[1, 2]);
    let t = Tensor::from_vec(vec![0.0f32, 1.0], &[1, 2]);
    assert_eq!(SoftmaxCrossEntropy::new().loss(&big, &t).item(), 2000.0);
    assert_eq!(SigmoidCrossEntropy::new().loss(&big, &t).item(), 2000.0);

    let pred = Tensor::from_vec(vec![1.0f64, 2.0, 5.0, -1.0], &[2, 2]);
    let target = Tensor::from_vec(vec![0.0f64, 2.0, 2.0, 1.0], &[2, 2]);
    assert_eq!(
        Mse::new().loss(&pred, &target).item(),
        (1.0 + 0.0 + 9.0 + 4.0) / 4.0
    );
    assert_eq!(
        Mae::new().loss(&pred, &target).item(),
        (1.0 + 0.0 + 3.0 + 2.0) / 4.0
    );
    // Huber(1): d = 1 → 0.5, 0 → 0, 3 → 2.5, 2 → 1.5.
    assert_eq!(
        Huber::new(1.0).loss(&pred, &target).item(),
        (0.5 + 0.0 + 2.5 + 1.5) / 4.0
    );
    let lp = Tensor::from_vec(vec![-0.5f64, -1.5], &[1, 2]);
    assert_eq!(
        Nll::new()
            .loss(&lp, &Tensor::from_vec(vec![0.0f64, 1.0], &[1, 2]))
            .item(),
        1.5
    );
    // σ-CE against the naive formula at a moderate point.
    let x = Tensor::from_vec(vec![0.3f64], &[1, 1]);
    let s = 1.0 / (1.0 + (-0.3f64).exp());
    let want = -(0.25 * s.ln() + 0.75 * (1.0 - s).ln());
    assert!(
        (SigmoidCrossEntropy::new()
            .loss(&x, &Tensor::from_vec(vec![0.25f64], &[1, 1]))
            .item()
            - want)
            .abs()
            < 1e-12
    );
}

#[test]
fn losses_pass_gradcheck() {
    let opts = GradcheckOptions::default();
    let pred = randn(&[3, 4], 10);
    let soft = randn(&[3, 4], 11).softmax(1);
    let t = randn(&[3, 4], 12);
    let checks: Vec<(&str, Box<dyn Loss>, Tensor)> = vec![
        (
            "softmax CE",
            Box::new(SoftmaxCrossEntropy::new()),
            soft.clone(),
        ),
        (
            "sigmoid CE",
            Box::new(SigmoidCrossEntropy::new()),
            randn(&[3, 4], 13).sigmoid(),
        ),
        ("mse", Box::new(Mse::new()), t.clone()),
        ("mae", Box::new(Mae::new()), &t + 0.5),
        ("huber", Box::new(Huber::new(0.5)), &t * 2.0),
        ("nll", Box::new(Nll::new()), soft),
    ];
    for (name, loss, target) in checks {
        gradcheck(
            |x| loss.loss(&x[0], &target),
            std::slice::from_ref(&pred),
            &opts,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn element_wise_losses_give_pytorchs_other_reductions() {
    let pred = Tensor::from_vec(vec![1.0f64, 2.0, 5.0, -1.0], &[2, 2]);
    let target = Tensor::from_vec(vec![0.0f64, 2.0, 2.0, 1.0], &[2, 2]);
    let cases: [(&dyn PerElement, [f64; 4]); 3] = [
        (&Mse::new(), [1.0, 0.0, 9.0, 4.0]),
        (&Mae::new(), [1.0, 0.0, 3.0, 2.0]),
        (&Huber::new(1.0), [0.5, 0.0, 2.5, 1.5]),
    ];
    for (loss, want) in cases {
        let none = loss.reduced(&pred, &target, Reduction::None);
        assert_eq!(none.shape(), &[2, 2]);
        assert_eq!(none.to_vec::<f64>(), want);
        let sum: f64 = want.iter().sum();
        assert_eq!(loss.reduced(&pred, &target, Reduction::Sum).item(), sum);
        assert_eq!(
            loss.reduced(&pred, &target, Reduction::Mean).item(),
            sum / 4.0
        );
    }
}

#[test]
fn a_schedule_can_set_the_momentum_of_the_optimizers_that_have_one() {
    let mut sgd = Momentum::new(0.1);
    assert_eq!(sgd.momentum_setting(), Some(MomentumSetting::Momentum(0.9)));
    sgd.set_momentum(MomentumSetting::Momentum(0.85));
    assert_eq!(
        sgd.momentum_setting(),
        Some(MomentumSetting::Momentum(0.85))
    );
    let mut adam = AdamW::new(0.1).betas(0.9, 0.99);
    adam.set_momentum(MomentumSetting::Betas(0.95, 0.99));
    assert_eq!(
        adam.momentum_setting(),
        Some(MomentumSetting::Betas(0.95, 0.99))
    );
    assert_eq!(
        Sgd::new(0.1).momentum_setting(),
        Some(MomentumSetting::Momentum(0.0))
    );
    assert_eq!(Adagrad::new(0.1).momentum_setting(), None);
    // One step at the new β₁ is what a fresh optimizer built with it takes.
    let run = |mut opt: AdamW| {
        let w = Param::new(Tensor::from_vec(vec![1.0f64, -2.0], &[2]));
        let params = [("w".to_string(), w.clone())];
        for _ in 0..2 {
            opt.step(&params, &(&w.tensor() * &w.tensor()).sum().backward());
        }
        w.tensor().to_vec::<f64>()
    };
    assert_eq!(run(adam), run(AdamW::new(0.1).betas(0.95, 0.99)));
    for (mut opt, m, msg) in [
        (
            Box::new(Sgd::new(0.1)) as Box<dyn Optimizer>,
            MomentumSetting::Momentum(0.9),
            "no momentum buffer",
        ),
        (
            Box::new(Adam::new(0.1)),
            MomentumSetting::Momentum(0.9),
            "takes Betas",
        ),
        (
            Box::new(Adam::new(0.1)),
            MomentumSetting::Betas(1.0, 0.9),
            "must be in [0, 1)",
        ),
        (
            Box::new(Adagrad::new(0.1)),
            MomentumSetting::Momentum(0.9),
            "no momentum to set",
        ),
    ] {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| opt.set_momentum(m)))
            .expect_err(msg);
        let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains(msg), "{text}");
    }
}

/// Positions after three steps on f(x) = ½x² (gradient x) from x = 1.
fn three_steps(mut opt: impl Optimizer) -> Vec<f64> {
    let p = Param::new(Tensor::from_vec(vec![1.0f64], &[1]));
    let params = vec![("x".to_string(), p.clone())];
    (0..3)
        .map(|_| {
            let loss = p.tensor().square().sum().mul_scalar(0.5);
            opt.step(&params, &loss.backward());
            p.tensor().item()
        })
        .collect()
}

fn close(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
}

/// Each trajectory is what `torch.optim` (PyTorch 2.15, float64) gives for the same function,
/// start and settings: `SGD(lr=0.1)`, `SGD(lr=0.1, momentum=0.9)` (with `nesterov=True`),
/// `Adam(lr=0.1)` (with `weight_decay=0.1`), `AdamW(lr=0.1, weight_decay=0.1)`,
/// `RMSprop(lr=0.01)`, `Adagrad(lr=0.1)`, `RAdam(lr=0.1)`: three `zero_grad`, `backward` of
/// `0.5 * x * x`, `step` rounds from `x = 1`.
#[test]
fn optimizers_first_three_steps() {
    close(&three_steps(Sgd::new(0.1)), &[0.9, 0.81, 0.729]);
    close(
        &three_steps(Momentum::new(0.1).momentum(0.9)),
        &[0.9, 0.72, 0.486],
    );
    close(
        &three_steps(Momentum::new(0.1).nesterov(true)),
        &[0.81, 0.5751, 0.327321],
    );
    close(
        &three_steps(Adam::new(0.1)),
        &[0.900000001, 0.8004122297123382, 0.701586274504415],
    );
    close(
        &three_steps(Adam::new(0.1).weight_decay(0.1)),
        &[0.9000000009090909, 0.8004122295267845, 0.7015862742210723],
    );
    close(
        &three_steps(AdamW::new(0.1).weight_decay(0.1)),
        &[0.890000001, 0.7815718569541611, 0.6751012231892007],
    );
    close(
        &three_steps(RmsProp::new(0.01)),
        &[0.9000000099999991, 0.8329179752650593, 0.7799822819823541],
    );
    close(
        &three_steps(Adagrad::new(0.1)),
        &[0.90000000001, 0.8331035268523168, 0.7804561813655163],
    );
    close(
        &three_steps(RAdam::new(0.1)),
        &[0.9, 0.8052631578947369, 0.7157700524373665],
    );
}

/// Five steps, as [`three_steps`], of `torch.optim.Adam(lr=0.5, betas=(0.9, 0.5),
/// amsgrad=True)` and `AdamW` with `weight_decay=0.1` besides (PyTorch 2.15, float64): the
/// iterate overshoots, the gradient's square falls, and the largest second moment takes over
/// (without AMSGrad the second position is −0.0210, not 0.0488).
#[test]
fn amsgrad_divides_by_the_largest_second_moment_as_pytorchs() {
    let five = |mut opt: Box<dyn Optimizer>| -> Vec<f64> {
        let p = Param::new(Tensor::from_vec(vec![1.0f64], &[1]));
        let params = vec![("x".to_string(), p.clone())];
        (0..5)
            .map(|_| {
                let loss = p.tensor().square().sum().mul_scalar(0.5);
                opt.step(&params, &loss.backward());
                p.tensor().item()
            })
            .collect()
    };
    close(
        &five(Box::new(Adam::new(0.5).betas(0.9, 0.5).amsgrad())),
        &[
            0.500000005,
            0.048778214191592284,
            -0.27065920667453525,
            -0.45127728538111,
            -0.5133505264097651,
        ],
    );
    let adamw = AdamW::new(0.5).betas(0.9, 0.5).weight_decay(0.1).amsgrad();
    close(
        &five(Box::new(adamw)),
        &[
            0.45000000499999987,
            -0.007606722158518486,
            -0.301918481757861,
            -0.4430515900902796,
            -0.4656321399012202,
        ],
    );
    // Its state has PyTorch's three slots; AdamW's default decay stays 0.01.
    let p = Param::new(Tensor::from_vec(vec![1.0f32], &[1]));
    let mut opt = AdamW::new(0.1).amsgrad();
    opt.step(&[("w".into(), p.clone())], &p.tensor().sum().backward());
    let (_, state) = opt.state(&[("w".into(), p.clone())]).unwrap();
    let names: Vec<&str> = state.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.iter().any(|n| n.ends_with("max_exp_avg_sq")),
        "{names:?}"
    );
}

#[test]
fn radam_switches_to_the_adaptive_step_at_step_six() {
    let p = Param::new(Tensor::from_vec(vec![1.0f64], &[1]));
    let params = vec![("x".to_string(), p.clone())];
    let mut opt = RAdam::new(0.1);
    let mut xs = Vec::new();
    for _ in 0..7 {
        let loss = p.tensor().square().sum().mul_scalar(0.5);
        opt.step(&params, &loss.backward());
        xs.push(p.tensor().item());
    }
    close(
        &xs[3..7],
        &[
            0.6314866300895146,
            0.552364195101898,
            0.5499209792193199,
            0.5468629532148175,
        ],
    );
}

#[test]
fn optimizers_on_a_two_dimensional_quadratic() {
    // f = ½(x² + 10y²) from (1, 1); the positions are `torch.optim.Adam(lr=0.1)`'s and
    // `SGD(lr=0.05, momentum=0.9)`'s on the same function.
    let run = |mut opt: Box<dyn Optimizer>| {
        let p = Param::new(Tensor::from_vec(vec![1.0f64, 1.0], &[2]));
        let params = vec![("p".to_string(), p.clone())];
        let scale = Tensor::from_vec(vec![1.0f64, 10.0], &[2]);
        (0..3)
            .map(|_| {
                let loss = (&p.tensor().square() * &scale).sum().mul_scalar(0.5);
                opt.step(&params, &loss.backward());
                p.tensor().to_vec::<f64>()
            })
            .collect::<Vec<_>>()
    };
    let adam = run(Box::new(Adam::new(0.1)));
    close(&adam[2], &[0.701586274504415, 0.7015862716993226]);
    let mom = run(Box::new(Momentum::new(0.05)));
    close(&mom[0], &[0.95, 0.5]);
    close(&mom[1], &[0.8575, -0.2]);
    close(&mom[2], &[0.731375, -0.73]);
}

#[test]
fn gradient_clipping() {
    let p = Param::new(Tensor::from_vec(vec![3.0f64, 4.0], &[2]));
    let params = vec![("p".to_string(), p.clone())];
    // Gradient (3, 4) has norm 5; clipped to norm 1 it is (0.6, 0.8).
    let loss = p.tensor().square().sum().mul_scalar(0.5);
    Sgd::new(1.0)
        .clip_grad_norm(1.0)
        .step(&params, &loss.backward());
    close(
        &p.tensor().to_vec::<f64>(),
        &[
            3.0 - 0.6 / (1.0 + 1e-6 / 5.0),
            4.0 - 0.8 / (1.0 + 1e-6 / 5.0),
        ],
    );
    let q = Param::new(Tensor::from_vec(vec![3.0f64, -0.5], &[2]));
    let params = vec![("q".to_string(), q.clone())];
    let loss = q.tensor().square().sum().mul_scalar(0.5);
    Sgd::new(1.0)
        .clip_grad_value(1.0)
        .step(&params, &loss.backward());
    close(&q.tensor().to_vec::<f64>(), &[2.0, 0.0]);
}

/// Small parameters that are many together (more elements than one thread updates alone)
/// are updated on several threads, whole parameters each, and a large one by its own split
/// kernel: the same bits as stepping them one at a time, in f32 and f64.
#[test]
fn parameters_updated_together_are_updated_as_one_at_a_time() {
    for dtype in [DType::F32, DType::F64] {
        let shapes: [&[usize]; 5] = [&[300, 300], &[300], &[7, 11], &[600, 300], &[300, 300]];
        let make = || -> Vec<(String, Param)> {
            shapes
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        format!("p{i}"),
                        Param::new(randn(s, i as u64).to_dtype(dtype)),
                    )
                })
                .collect()
        };
        let (together, alone) = (make(), make());
        let mut opt = AdamW::new(0.01).weight_decay(0.1);
        let mut each: Vec<AdamW> = (0..shapes.len())
            .map(|_| AdamW::new(0.01).weight_decay(0.1))
            .collect();
        for step in 0..3 {
            let loss = |ps: &[(String, Param)]| {
                ps.iter()
                    .map(|(_, p)| (p.tensor().sin() * (step + 1) as f64).square().sum())
                    .fold(Tensor::scalar(0.0).to_dtype(dtype), |a, b| &a + &b)
            };
            opt.step(&together, &loss(&together).backward());
            let grads = loss(&alone).backward();
            for (o, p) in each.iter_mut().zip(&alone) {
                o.step(std::slice::from_ref(p), &grads);
            }
        }
        for ((name, a), (_, b)) in together.iter().zip(&alone) {
            let (a, b) = (a.tensor().to_vec::<f64>(), b.tensor().to_vec::<f64>());
            assert!(a == b, "{dtype} {name}: updated together and alone differ");
        }
    }
}

#[test]
fn optimizer_state_round_trips() {
    let p = Param::new(Tensor::from_vec(vec![1.0f64, -2.0], &[2]));
    let params = vec![("p".to_string(), p.clone())];
    let mut a = Adam::new(0.1);
    for _ in 0..2 {
        a.step(&params, &p.tensor().square().sum().backward());
    }
    let (steps, state) = a.state(&params).unwrap();
    assert_eq!(steps, 2);
    assert_eq!(
        state.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        vec!["p.exp_avg", "p.exp_avg_sq"]
    );
    let mut b = Adam::new(0.1);
    let q = Param::new(p.tensor().detach());
    let qparams = vec![("p".to_string(), q.clone())];
    b.load_state(&qparams, steps, state).unwrap();
    a.step(&params, &p.tensor().square().sum().backward());
    b.step(&qparams, &q.tensor().square().sum().backward());
    assert_eq!(p.tensor().to_vec::<f64>(), q.tensor().to_vec::<f64>());
    assert!(Adam::new(0.1)
        .load_state(
            &qparams,
            1,
            vec![("p.bogus".into(), Tensor::zeros(&[2], DType::F64))]
        )
        .is_err());
}

#[test]
fn schedules() {
    let seq = |s: &dyn Schedule, n: u64| (0..n).map(|t| s.lr(t)).collect::<Vec<_>>();
    assert_eq!(seq(&ConstantLr::new(0.1), 3), vec![0.1, 0.1, 0.1]);
    assert_eq!(
        seq(&StepLr::new(1.0, 2, 0.5), 5),
        vec![1.0, 1.0, 0.5, 0.5, 0.25]
    );
    assert_eq!(
        seq(&MultiStepLr::new(1.0, vec![1, 3], 0.1), 4),
        vec![1.0, 0.1, 0.1, 0.1 * 0.1]
    );
    assert_eq!(seq(&ExponentialLr::new(1.0, 0.5), 3), vec![1.0, 0.5, 0.25]);
    let cos = seq(&CosineAnnealing::new(1.0, 0.0, 4), 6);
    close(
        &cos,
        &[1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0, 0.0],
    );
    assert_eq!(
        seq(&LinearWarmup::new(1.0, 4), 5),
        vec![0.25, 0.5, 0.75, 1.0, 1.0]
    );
    let wc = WarmupThen::new(LinearWarmup::new(1.0, 2), CosineAnnealing::new(1.0, 0.0, 2));
    close(&seq(&wc, 5), &[0.5, 1.0, 1.0, 0.5, 0.0]);
    // Far steps: the power saturates instead of wrapping its exponent.
    assert_eq!(ExponentialLr::new(1.0, 0.5).lr(1 << 40), 0.0);
    assert_eq!(StepLr::new(1.0, 1, 0.5).lr(u64::MAX), 0.0);
}

#[test]
fn schedule_settings_that_would_give_no_rate_are_refused_naming_them() {
    let refuses = |needle: &str, f: fn()| {
        let msg = panic_message(f);
        assert!(msg.starts_with(needle), "{needle}: {msg}");
    };
    refuses("ConstantLr: rate NaN", || {
        let _ = ConstantLr::new(f64::NAN);
    });
    refuses("StepLr: step must be at least 1, got 0", || {
        let _ = StepLr::new(0.1, 0, 0.5);
    });
    refuses("StepLr: gamma -0.5", || {
        let _ = StepLr::new(0.1, 1, -0.5);
    });
    refuses("MultiStepLr: base rate inf", || {
        let _ = MultiStepLr::new(f64::INFINITY, vec![], 0.1);
    });
    refuses("ExponentialLr: gamma NaN", || {
        let _ = ExponentialLr::new(0.1, f64::NAN);
    });
    refuses("CosineAnnealing: period must be at least 1", || {
        let _ = CosineAnnealing::new(0.1, 0.0, 0);
    });
    refuses("LinearWarmup: base rate -1", || {
        let _ = LinearWarmup::new(-1.0, 3);
    });
}

#[test]
fn initializers() {
    let mut rng = StdRng::seed_from_u64(5);
    use ferrograd::init;
    assert_eq!(init::fans(&[400, 784]), (784, 400));
    assert_eq!(init::fans(&[16, 8, 3, 3]), (72, 144));
    let w = init::xavier_uniform(&[784, 400], DType::F32, &mut rng).to_vec::<f64>();
    let a = (6.0f64 / 1184.0).sqrt();
    assert!(w.iter().all(|v| v.abs() <= a));
    let var = w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
    assert!(
        (var - a * a / 3.0).abs() < 0.05 * a * a / 3.0,
        "variance {var}"
    );
    // [out, in]: the fan-in is 500.
    let h = init::he_normal(&[400, 500], DType::F64, &mut rng).to_vec::<f64>();
    let var = h.iter().map(|v| v * v).sum::<f64>() / h.len() as f64;
    assert!((var - 2.0 / 500.0).abs() < 0.05 * 2.0 / 500.0);
    let t = init::truncated_normal(&[10000], 1.0, 0.5, DType::F64, &mut rng).to_vec::<f64>();
    assert!(t.iter().all(|v| (v - 1.0).abs() <= 1.0));
    let q = init::orthogonal(&[3, 5], 1.0, DType::F64, &mut rng);
    let qqt = q.matmul(&q.t()).to_vec::<f64>();
    for i in 0..3 {
        for j in 0..3 {
            assert!((qqt[i * 3 + j] - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
        }
    }
    let tall = init::orthogonal(&[5, 3], 2.0, DType::F64, &mut rng);
    let qtq = tall.t().matmul(&tall).to_vec::<f64>();
    assert!((qtq[0] - 4.0).abs() < 1e-12 && qtq[1].abs() < 1e-12);
}

#[test]
fn an_mlp_separates_xor_clusters() {
    let _turn = turn();
    manual_seed(3);
    let mut rng = StdRng::seed_from_u64(3);
    let centers = [
        (-1.0, -1.0, 0u8),
        (1.0, 1.0, 0),
        (-1.0, 1.0, 1),
        (1.0, -1.0, 1),
    ];
    let (mut xs, mut labels) = (Vec::new(), Vec::new());
    for i in 0..200 {
        let (cx, cy, l) = centers[i % 4];
        let noise = Tensor::randn(&[2], DType::F32, &mut rng).to_vec::<f32>();
        xs.extend([cx + 0.2 * noise[0], cy + 0.2 * noise[1]]);
        labels.push(l);
    }
    let x = Tensor::from_vec(xs, &[200, 2]);
    let y = ferrograd::data::one_hot(&labels, 2);
    let net = Net::new(vec![
        Box::new(Dense::new(2, 16)),
        Box::new(Tanh::new()),
        Box::new(Dense::new(16, 2)),
    ]);
    let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.05));
    for _ in 0..200 {
        model.train_step(&x, &y);
    }
    let acc = ferrograd::metrics::accuracy(&model.predict(&x), &labels);
    assert_eq!(acc.hit_num, 200, "{acc}");
}

#[test]
fn seed_004_linear_layer_with_mse_converges() {
    let _turn = turn();
    manual_seed(4);
    let x = Tensor::rand_uniform(
        &[64, 3],
        -1.0,
        1.0,
        DType::F32,
        &mut StdRng::seed_from_u64(4),
    );
    let w_true = Tensor::from_vec(vec![1.5f32, -2.0, 0.5], &[3, 1]);
    let y = &x.matmul(&w_true) + 0.3;
    let mut model = Model::new(
        Net::new(vec![Box::new(Dense::new(3, 1))]),
        Mse::new(),
        Sgd::new(0.3),
    );
    let mut loss = f32::INFINITY;
    for _ in 0..300 {
        loss = model.train_step(&x, &y);
    }
    assert!(loss < 1e-8, "loss {loss}");
    let params = model.net().params();
    let w = params[0].1.tensor().to_vec::<f32>();
    assert!((w[0] - 1.5).abs() < 1e-3 && (w[1] + 2.0).abs() < 1e-3 && (w[2] - 0.5).abs() < 1e-3);
    assert!((params[1].1.tensor().item() - 0.3).abs() < 1e-3);
}

#[test]
fn net_names_and_loads_state() {
    let net = Net::new(vec![
        Box::new(Dense::new(4, 3)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(3, 2)),
    ]);
    let names: Vec<String> = net.params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["0.weight", "0.bias", "2.weight", "2.bias"]);
    let mut state: std::collections::HashMap<String, Tensor> = net.state().into_iter().collect();
    state.insert("0.weight".into(), Tensor::zeros(&[4, 4], DType::F32));
    state.remove("2.bias");
    state.insert("9.x".into(), Tensor::zeros(&[1], DType::F32));
    let err = net.load_state(&state).unwrap_err().to_string();
    assert!(
        err.contains("0.weight: expected [3, 4] f32, found [4, 4] f32"),
        "{err}"
    );
    assert!(err.contains("2.bias: missing"), "{err}");
    assert!(
        err.contains("9.x: unexpected, not a parameter or buffer of this module"),
        "{err}"
    );
    assert!(net.summary().contains("total parameters"));
}
