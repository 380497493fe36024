//! `ferrograd::compile`: traced plans give eager's values (fused element-wise regions to the
//! bit), follow parameter updates, trace again for new shapes, and run eagerly where a graph
//! could not reproduce the function.

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn random(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    Tensor::rand_uniform(shape, -1.0, 1.0, DType::F32, &mut rng)
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter()
        .map(|t| t.to_vec::<f32>().iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Loss and gradients of every parameter: a whole training step's computation.
fn loss_and_grads(loss: Tensor, params: &[(String, Param)]) -> Vec<Tensor> {
    let ps: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor()).collect();
    let refs: Vec<&Tensor> = ps.iter().collect();
    let mut out = vec![loss.clone()];
    out.extend(ferrograd::autograd::grad(&loss, &refs));
    out
}

#[test]
fn a_compiled_training_step_gives_eagers_loss_and_gradients_to_the_bit() {
    let net = Net::new(vec![
        Box::new(Dense::new(20, 32)),
        Box::new(Relu::new()),
        Box::new(Dense::new(32, 10)),
    ]);
    let params = net.params();
    let step = |xs: &[Tensor]| {
        let loss = SoftmaxCrossEntropy::new().loss(&net.forward(&xs[0]), &xs[1]);
        loss_and_grads(loss, &params)
    };
    let mut compiled = ferrograd::compile(&step).params(params.clone());
    let x = random(&[16, 20], 1);
    let y = ferrograd::data::one_hot(&[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3], 10);
    let inputs = [x.clone(), y.clone()];
    assert_eq!(bits(&compiled.call(&inputs).unwrap()), bits(&step(&inputs)));
    assert!(compiled.is_compiled(&inputs));
    // An update between calls is read by the next one, as eager code reads it.
    let (_, w) = &params[0];
    w.set(&w.tensor().mul_scalar(0.5).detach());
    assert_eq!(bits(&compiled.call(&inputs).unwrap()), bits(&step(&inputs)));
    // A new batch size traces again, and the first plan stays.
    let small = [random(&[4, 20], 2), y.narrow(0, 0, 4)];
    assert_eq!(bits(&compiled.call(&small).unwrap()), bits(&step(&small)));
    assert!(compiled.is_compiled(&small) && compiled.is_compiled(&inputs));
}

#[test]
fn a_compiled_transformer_step_gives_eagers_loss_and_gradients_to_the_bit() {
    let enc = TransformerEncoderLayer::new(32, 4)
        .dim_feedforward(64)
        .dropout(0.0)
        .gelu()
        .norm_first(true);
    let params = enc.params();
    let step = |xs: &[Tensor]| {
        let y = enc.forward_masked(&xs[0], Mode::Train, &Attention::new().causal(true));
        loss_and_grads(y.square().mean(), &params)
    };
    let mut compiled = ferrograd::compile(&step).params(params.clone());
    let x = [random(&[2, 16, 32], 3)];
    let (got, want) = (compiled.call(&x).unwrap(), step(&x));
    assert!(compiled.is_compiled(&x));
    assert_eq!(got.len(), want.len());
    // The traced backward runs the same fused kernels as eager's.
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn a_compiled_model_trains_with_eagers_losses_and_weights() {
    let _turn = crate::common::turn();
    let make = || {
        manual_seed(3);
        let net = Net::new(vec![
            Box::new(Dense::new(20, 32)),
            Box::new(Relu::new()),
            Box::new(Dense::new(32, 10)),
        ]);
        Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(1e-2))
    };
    let (mut eager, mut compiled) = (make(), make().compile());
    let y = ferrograd::data::one_hot(&[3, 1, 4, 1, 5, 9, 2, 6], 10);
    for step in 0..5 {
        let x = random(&[8, 20], 10 + step);
        let (a, b) = (eager.train_step(&x, &y), compiled.train_step(&x, &y));
        assert_eq!(a.to_bits(), b.to_bits(), "step {step}: {a} and {b}");
    }
    let weights =
        |m: &Model| -> Vec<Tensor> { m.net().params().iter().map(|(_, p)| p.tensor()).collect() };
    assert_eq!(bits(&weights(&eager)), bits(&weights(&compiled)));
}

#[test]
fn a_compiled_cnn_step_gives_eagers_loss_and_gradients_to_the_bit() {
    // A stride of 2 leaves a row over: the input gradient's transposed convolution takes an
    // output padding, and is traced as one.
    let net = Net::new(vec![
        Box::new(Conv2d::new(1, 4, 3).stride(2).padding(1)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(4 * 2 * 2, 10)),
    ]);
    let params = net.params();
    let step = |xs: &[Tensor]| {
        let loss = SoftmaxCrossEntropy::new().loss(&net.forward(&xs[0]), &xs[1]);
        loss_and_grads(loss, &params)
    };
    let mut compiled = ferrograd::compile(&step).params(params.clone());
    let inputs = [
        random(&[3, 1, 9, 9], 5),
        ferrograd::data::one_hot(&[1, 7, 3], 10),
    ];
    assert_eq!(bits(&compiled.call(&inputs).unwrap()), bits(&step(&inputs)));
    assert!(compiled.is_compiled(&inputs));
}

#[test]
fn element_wise_chains_run_fused_over_blocks_to_the_bit() {
    // Large enough to be fused, in blocks with a ragged tail; a one-element input broadcast
    // into the chain; a value read by an op outside the chain (the sum) and then by the chain
    // again, which must start a second region rather than wait on itself; and a member with
    // no element function of its own (gelu_tanh), whose region runs the ops' kernels block
    // by block.
    let f = |xs: &[Tensor]| {
        let (x, s) = (&xs[0], &xs[1]);
        let a = (&x.mul_scalar(2.0).add_scalar(1.0).tanh() * x).sigmoid();
        let b = &(&a * s) - &a.exp();
        let total = a.sum();
        let c = (&b + &total).relu().maximum(&x.square());
        let d = &b.gelu_tanh() + x;
        vec![c, b, total, d]
    };
    let mut compiled = ferrograd::compile(f);
    let inputs = [random(&[2, (1 << 21) + 5], 4), Tensor::scalar(0.75f32)];
    assert_eq!(bits(&compiled.call(&inputs).unwrap()), bits(&f(&inputs)));
    let (regions, ops) = compiled.fused(&inputs).unwrap();
    assert!(regions >= 2 && ops >= 9, "{regions} regions of {ops} ops");
}

#[test]
fn what_a_graph_cannot_reproduce_runs_eagerly() {
    // Control flow on a value.
    let branching = |xs: &[Tensor]| match xs[0].sum().item() > 0.0 {
        true => vec![xs[0].exp()],
        false => vec![xs[0].neg()],
    };
    let mut compiled = ferrograd::compile(branching);
    for sign in [1.0, -1.0] {
        let x = [Tensor::full(&[3], sign, DType::F32)];
        assert_eq!(bits(&compiled.call(&x).unwrap()), bits(&branching(&x)));
        assert!(!compiled.is_compiled(&x));
    }
    // A training step that reads its loss runs eagerly, gradients and all.
    let w = Param::new(Tensor::from_vec(vec![0.5f32, -2.0, 1.0], &[3]));
    let params = vec![("w".to_string(), w.clone())];
    let reading = |xs: &[Tensor]| {
        let loss = (&xs[0] * &w.tensor()).tanh().sum();
        assert!(loss.item().is_finite());
        loss_and_grads(loss, &params)
    };
    let mut compiled = ferrograd::compile(reading).params(params.clone());
    let x = [Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])];
    for _ in 0..2 {
        assert_eq!(bits(&compiled.call(&x).unwrap()), bits(&reading(&x)));
    }
    assert!(!compiled.is_compiled(&x));
    // Random draws: each call must draw anew.
    let noisy = |xs: &[Tensor]| vec![&xs[0] + &Tensor::randn_default(&[3], DType::F32)];
    let mut compiled = ferrograd::compile(noisy);
    let x = [Tensor::zeros(&[3], DType::F32)];
    let (a, b) = (compiled.call(&x).unwrap(), compiled.call(&x).unwrap());
    assert!(!compiled.is_compiled(&x));
    assert_ne!(bits(&a), bits(&b));
    // A parameter it was not given would be frozen at its traced value.
    let w = Param::new(Tensor::ones(&[3], DType::F32));
    let hidden = |xs: &[Tensor]| vec![&xs[0] * &w.tensor()];
    let mut compiled = ferrograd::compile(hidden);
    let x = [Tensor::ones(&[3], DType::F32)];
    compiled.call(&x).unwrap();
    assert!(!compiled.is_compiled(&x));
    w.set(&Tensor::full(&[3], 2.0, DType::F32));
    assert_eq!(compiled.call(&x).unwrap()[0].to_vec::<f32>(), vec![2.0; 3]);
}
