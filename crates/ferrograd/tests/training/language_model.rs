//! What a language model needs beyond attention: cross-entropy over `[N, T, V]` logits with
//! class-index targets and an ignore index (PyTorch's numbers), an output layer tied to the
//! token embedding (one parameter: listed, stepped and saved once), and layers applied to
//! `[N, T, E]` inputs as one product, rotary position embeddings and gradient checkpointing.

use crate::common::{check, randn, turn};
use ferrograd::prelude::*;

/// `sin(0.37·i)` over `[2, 3, 5]`, in f64.
fn logits() -> Tensor {
    Tensor::from_vec(
        (0..30).map(|i| (0.37 * i as f64).sin()).collect(),
        &[2, 3, 5],
    )
}

fn targets() -> Tensor {
    Tensor::from_vec(vec![1i64, 4, -100, 0, 2, 3], &[2, 3])
}

/// From PyTorch 2.15: `F.cross_entropy(x.reshape(-1, 5), y.reshape(-1), ignore_index=-100,
/// label_smoothing=s)` for the inputs above, the loss and the first seven entries of its
/// gradient.
const TORCH: [(f64, f64, [f64; 7]); 2] = [
    (
        0.0,
        2.032124065903422,
        [
            0.020932685574892,
            -0.169948058363611,
            0.041083219443348,
            0.051265116269698,
            0.056667037075673,
            0.061178038348076,
            0.051887532713834,
        ],
    ),
    (
        0.1,
        1.997030167616507,
        [
            0.016932685574892,
            -0.153948058363611,
            0.037083219443348,
            0.047265116269698,
            0.052667037075673,
            0.057178038348076,
            0.047887532713834,
        ],
    ),
];

#[test]
fn cross_entropy_over_positions_is_pytorchs() {
    for (smoothing, loss, grad7) in TORCH {
        let x = logits().requires_grad();
        let ce = CrossEntropy::new()
            .ignore_index(-100)
            .label_smoothing(smoothing);
        let l = ce.loss(&x, &targets());
        assert!((l.item() - loss).abs() < 1e-13, "{} vs {loss}", l.item());
        let g = grad(&l, &[&x]).remove(0).to_vec::<f64>();
        for (a, b) in g.iter().zip(grad7) {
            assert!((a - b).abs() < 1e-13, "{a} vs {b}");
        }
        // The ignored position gets no gradient at all.
        assert!(g[10..15].iter().all(|&v| v == 0.0));
        check("cross-entropy", |t| ce.loss(&t[0], &targets()), &[logits()]);
    }
}

#[test]
fn class_indices_and_one_hot_rows_give_the_same_mean() {
    // Without ignored positions, indices and their one-hot rows are the same target, and both
    // average over every position of [N, T] (not over N alone).
    let y = Tensor::from_vec(vec![1i64, 4, 2, 0, 2, 3], &[2, 3]);
    let hot = one_hot(&y.to_vec::<i64>(), 5)
        .reshape(&[2, 3, 5])
        .to_dtype(DType::F64);
    let by_index = SoftmaxCrossEntropy::new().loss(&logits(), &y).item();
    let by_rows = SoftmaxCrossEntropy::new().loss(&logits(), &hot).item();
    assert!((by_index - by_rows).abs() < 1e-14);
    let rows = logits().reshape(&[6, 5]);
    let flat = CrossEntropy::new().loss(&rows, &y.reshape(&[6])).item();
    assert!((by_index - flat).abs() < 1e-14);
    // Every position ignored: 0/0, as PyTorch's mean.
    let none = Tensor::from_vec(vec![-1i64; 6], &[2, 3]);
    assert!(CrossEntropy::new()
        .ignore_index(-1)
        .loss(&logits(), &none)
        .item()
        .is_nan());
}

#[test]
fn class_losses_per_position_sum_to_the_mean_times_the_count() {
    for smoothing in [0.0, 0.1] {
        let ce = CrossEntropy::new()
            .ignore_index(-100)
            .label_smoothing(smoothing);
        let per = ce.per_element(&logits(), &targets());
        assert_eq!(per.shape(), &[2, 3]);
        let v = per.to_vec::<f64>();
        assert_eq!(v[2], 0.0, "the ignored position");
        let mean = ce.loss(&logits(), &targets()).item();
        let sum = ce.reduced(&logits(), &targets(), Reduction::Sum).item();
        assert!((sum - 5.0 * mean).abs() < 1e-13, "{sum} vs 5 × {mean}");
        check(
            "per-position cross-entropy",
            |t| ce.per_element(&t[0], &targets()),
            &[logits()],
        );
        // On log-probabilities, the same values through nll.
        let lp = logits().log_softmax(2);
        if smoothing == 0.0 {
            let nll = ce.nll_per_element(&lp, &targets()).to_vec::<f64>();
            v.iter()
                .zip(&nll)
                .for_each(|(a, b)| assert!((a - b).abs() < 1e-14));
            assert!((ce.nll(&lp, &targets()).item() - mean).abs() < 1e-14);
        }
    }
}

#[test]
fn an_ignored_position_is_never_read() {
    // −∞ and NaN in the ignored row (padding often holds either): the loss and the gradient
    // of every other position are as if the row were not there.
    let mut v = logits().to_vec::<f64>();
    v[10] = f64::NEG_INFINITY; // position 2 (ignored), class 0
    v[11] = f64::NAN;
    let dirty = Tensor::from_vec(v, &[2, 3, 5]);
    for smoothing in [0.0, 0.1] {
        let ce = CrossEntropy::new()
            .ignore_index(-100)
            .label_smoothing(smoothing);
        let clean = ce.loss(&logits(), &targets()).item();
        let x = dirty.requires_grad();
        let l = ce.loss(&x, &targets());
        assert!((l.item() - clean).abs() < 1e-14, "{} vs {clean}", l.item());
        let g = grad(&l, &[&x]).remove(0).to_vec::<f64>();
        // (The ignored row's own entries are NaN: log_softmax's derivative of a NaN row, as
        // in PyTorch; every other row's are finite.)
        let others = g[..10].iter().chain(&g[15..]);
        assert!(others.into_iter().all(|v| v.is_finite()), "{g:?}");
        let per = ce.per_element(&dirty, &targets()).to_vec::<f64>();
        assert_eq!(per[2], 0.0);
        assert!(per.iter().all(|v| v.is_finite()));
        let sum = ce.reduced(&dirty, &targets(), Reduction::Sum).item();
        assert!((sum - 5.0 * clean).abs() < 1e-13);
    }
}

#[derive(Module)]
struct Tied {
    tok: Embedding,
    head: Dense,
}

#[test]
fn a_tied_output_layer_shares_one_parameter() {
    manual_seed(3);
    let tok = Embedding::new(6, 4);
    let head = Dense::tied(tok.weight());
    let m = Tied { tok, head };
    let names: Vec<String> = m.params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["tok.weight"]);
    assert_eq!(m.num_params(), 24);
    assert_eq!(m.state().len(), 1);
    assert_eq!(m.head.name(), "Dense(4, 6, bias=False)");
    // The gradient is the sum of both uses', and one step moves the table once.
    let ids = Tensor::from_vec(vec![0i64, 5, 2], &[3]);
    let before = m.tok.weight().tensor().detach();
    let loss = CrossEntropy::new().loss(
        &m.head
            .forward(&m.tok.forward(&ids, Mode::Train), Mode::Train),
        &Tensor::from_vec(vec![1i64, 1, 3], &[3]),
    );
    let grads = loss.backward();
    let g = grads.get_param(m.tok.weight()).unwrap();
    let mut opt = Sgd::new(0.5);
    opt.step(&m.params(), &grads);
    let moved = &before - &m.tok.weight().tensor().detach();
    assert!(moved.allclose(&(&g * 0.5), 1e-6, 1e-7));
    // A list that names the shared parameter twice still holds it once after `distinct`.
    let twice = [m.params(), m.head.params()].concat();
    assert_eq!(twice.len(), 2);
    assert_eq!(ferrograd::nn::distinct(twice).len(), 1);
    // Saved once, loaded back.
    let dir = std::env::temp_dir().join(format!("ferrograd-tied-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tied.safetensors");
    m.save_safetensors(&path).unwrap();
    m.tok.weight().set(&Tensor::zeros(&[6, 4], DType::F32));
    m.load_safetensors(&path).unwrap();
    assert!(m
        .head
        .weight()
        .tensor()
        .allclose(&(&before - &moved), 0.0, 0.0));
}

#[test]
fn a_layer_over_a_sequence_is_one_product_with_the_same_gradients() {
    // [N, T, E] @ [E, F] folds to one [N·T, E] product; values and derivatives to second
    // order are those of the batched definition.
    let x = randn(&[2, 3, 4], 1);
    let w = randn(&[4, 5], 2);
    let per_item = Tensor::cat(
        &[
            &x.narrow(0, 0, 1).reshape(&[3, 4]).matmul(&w).unsqueeze(0),
            &x.narrow(0, 1, 1).reshape(&[3, 4]).matmul(&w).unsqueeze(0),
        ],
        0,
    );
    assert!(x.matmul(&w).allclose(&per_item, 1e-14, 1e-14));
    check(
        "[N, T, E] @ [E, F]",
        |t| t[0].matmul(&t[1]),
        &[x.clone(), w.clone()],
    );
    check(
        "a transposed view @ a transposed weight",
        |t| t[0].transpose(0, 1).matmul(&t[1].t()),
        &[x, randn(&[5, 4], 3)],
    );
}

/// RoPE written out pair by pair: feature `i` and `i + D/2` turned by `p·base^(−2i/D)`.
fn rope_by_pairs(x: &Tensor, start: usize, base: f64) -> Vec<f64> {
    let (t, d) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    let v = x.to_vec::<f64>();
    let mut out = v.clone();
    for row in 0..v.len() / d {
        let p = (start + row % t) as f64;
        for i in 0..d / 2 {
            let a = p * base.powf(-2.0 * i as f64 / d as f64);
            let (x1, x2) = (v[row * d + i], v[row * d + i + d / 2]);
            out[row * d + i] = x1 * a.cos() - x2 * a.sin();
            out[row * d + i + d / 2] = x2 * a.cos() + x1 * a.sin();
        }
    }
    out
}

#[test]
fn rotary_embeddings_turn_pairs_by_position() {
    let x = randn(&[2, 3, 5, 6], 4);
    for (start, base) in [(0, 10000.0), (7, 100.0)] {
        let got = x.rope(start, base).to_vec::<f64>();
        for (a, b) in got.iter().zip(rope_by_pairs(&x, start, base)) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }
    // A cache continues where it left off: position 4 alone is the fifth row of the whole.
    let whole = x.rope(0, 10000.0).narrow(2, 4, 1);
    assert!(x
        .narrow(2, 4, 1)
        .rope(4, 10000.0)
        .allclose(&whole, 1e-14, 1e-14));
    // q·k after RoPE depends on the distance between the positions only.
    let (q, k) = (randn(&[1, 6], 5), randn(&[1, 6], 6));
    let dot = |pq: usize, pk: usize| (&q.rope(pq, 10000.0) * &k.rope(pk, 10000.0)).sum().item();
    assert!((dot(3, 1) - dot(9, 7)).abs() < 1e-12);
    check("rope", |t| t[0].rope(2, 500.0), &[randn(&[2, 4, 4], 7)]);
    assert_eq!(x.to_dtype(DType::F32).rope(0, 10.0).dtype(), DType::F32);
    // Positions past the largest one are refused by name, not as a shape error elsewhere.
    let msg = crate::common::panic_message(|| drop(x.rope(usize::MAX - 2, 10000.0)));
    assert!(msg.starts_with("rope: positions"), "{msg}");
}

#[test]
fn checkpointed_blocks_give_the_same_values_and_gradients() {
    manual_seed(11);
    let block = std::sync::Arc::new(
        TransformerEncoderLayer::new(8, 2)
            .dim_feedforward(16)
            .dropout(0.0),
    );
    let x = randn(&[2, 3, 8], 8).to_dtype(DType::F32).requires_grad();
    let inner = block.clone();
    let y = checkpoint(
        move |xs: &[Tensor]| Layer::forward(&*inner, &xs[0], Mode::Train).tanh(),
        &[&x],
    );
    let plain = Layer::forward(&*block, &x, Mode::Train).tanh();
    assert_eq!(y.to_vec::<f32>(), plain.to_vec::<f32>());
    let w = randn(&[2, 3, 8], 9).to_dtype(DType::F32);
    let (a, b) = ((&y * &w).sum().backward(), (&plain * &w).sum().backward());
    assert_eq!(a.len(), b.len());
    for (name, p) in block.params() {
        let (ga, gb) = (a.get_param(&p).unwrap(), b.get_param(&p).unwrap());
        assert!(ga.allclose(&gb, 1e-5, 1e-6), "{name}");
    }
    assert!(a.get(&x).unwrap().allclose(&b.get(&x).unwrap(), 1e-5, 1e-6));
    // To second order, in f64, through the recomputation.
    let v = randn(&[3], 10);
    check(
        "checkpoint",
        move |t| {
            let v = v.clone();
            checkpoint(
                move |xs: &[Tensor]| &(&xs[0] * &v).sin() * &xs[1],
                &[&t[0], &t[1]],
            )
        },
        &[randn(&[2, 3], 11), randn(&[2, 3], 12)],
    );
    // Integer inputs (token ids) pass through untracked and get no gradient.
    let emb = std::sync::Arc::new(Embedding::new(5, 3));
    let table = emb.clone();
    let ids = Tensor::from_vec(vec![4i64, 0, 2], &[3]);
    let looked = checkpoint(
        move |xs: &[Tensor]| table.forward(&xs[0], Mode::Train).square(),
        &[&ids],
    );
    let g = looked.sum().backward();
    let direct = emb.forward(&ids, Mode::Train).square().sum().backward();
    assert_eq!(
        g.get_param(emb.weight()).unwrap().to_vec::<f32>(),
        direct.get_param(emb.weight()).unwrap().to_vec::<f32>()
    );
    // Under no_grad it is the function itself.
    let z = no_grad(|| checkpoint(|xs: &[Tensor]| xs[0].exp(), &[&x]));
    assert!(z.allclose(&x.exp(), 0.0, 0.0));
}

#[test]
fn a_checkpointed_block_draws_the_same_dropout_when_run_again() {
    manual_seed(12);
    let block = std::sync::Arc::new(
        TransformerEncoderLayer::new(8, 2)
            .dim_feedforward(16)
            .dropout(0.3),
    );
    let x = randn(&[2, 5, 8], 13).to_dtype(DType::F32).requires_grad();
    let w = randn(&[2, 5, 8], 14).to_dtype(DType::F32);
    let streams = |b: &TransformerEncoderLayer| -> Vec<_> {
        b.rng_streams().iter().map(|(_, s)| s.state()).collect()
    };
    // The layer's dropout streams and the default generator (a scale drawn from it).
    let run = |b: &TransformerEncoderLayer, x: &Tensor| {
        let scale = with_default_rng(|r| Tensor::rand_uniform(x.shape(), 0.5, 1.5, DType::F32, r));
        &Layer::forward(b, x, Mode::Train) * &scale
    };
    let start = streams(&block);
    manual_seed(99);
    let inner = block.clone();
    let y = checkpoint(move |xs: &[Tensor]| run(&inner, &xs[0]), &[&x]);
    let a = (&y * &w).sum().backward();
    let after = streams(&block);
    // The same draws without checkpointing: the streams and the generator set back.
    for ((_, s), state) in block.rng_streams().iter().zip(&start) {
        s.set_state(*state);
    }
    manual_seed(99);
    let plain = run(&block, &x);
    assert_eq!(y.to_vec::<f32>(), plain.to_vec::<f32>());
    assert_eq!(streams(&block), after, "the recomputation moved no stream");
    let b = (&plain * &w).sum().backward();
    for (name, p) in block.params() {
        let (ga, gb) = (a.get_param(&p).unwrap(), b.get_param(&p).unwrap());
        assert!(ga.allclose(&gb, 1e-5, 1e-6), "{name}");
    }
    assert!(a.get(&x).unwrap().allclose(&b.get(&x).unwrap(), 1e-5, 1e-6));
}

/// A `manual_seed` between a checkpointed forward and its backward (an evaluation seeded in
/// between, micro-batches seeded one by one) changes nothing of the recomputation, and one
/// inside the checkpointed function restarts no stream when it runs again.
#[test]
fn seeds_around_and_inside_a_checkpointed_function_change_nothing() {
    let _turn = turn();
    manual_seed(12);
    let drop = std::sync::Arc::new(Dropout::new(0.5));
    let stream = drop.rng_streams()[0].1.clone();
    let x = randn(&[4, 6], 3).to_dtype(DType::F32).requires_grad();
    let start = stream.state();
    let plain = Layer::forward(&*drop, &x, Mode::Train);
    let g_plain = grad(&plain.sum(), &[&x]).remove(0);
    stream.set_state(start);
    let inner = drop.clone();
    let forward = move |xs: &[Tensor]| Layer::forward(&*inner, &xs[0], Mode::Train);
    let y = checkpoint(forward.clone(), &[&x]);
    assert_eq!(y.to_vec::<f32>(), plain.to_vec::<f32>());
    manual_seed(5);
    assert_eq!(
        grad(&y.sum(), &[&x])[0].to_vec::<f32>(),
        g_plain.to_vec::<f32>()
    );
    // Two micro-batches, each after its own seed, then one backward of both.
    manual_seed(1);
    let y1 = checkpoint(forward.clone(), &[&x]);
    manual_seed(2);
    let y2 = checkpoint(forward, &[&x]);
    let g = grad(&(&y1.sum() + &y2.sum()), &[&x]).remove(0);
    let want = &(&y1 + &y2) / &x;
    assert!(g.allclose(&want, 1e-5, 1e-6));
    // A seed inside the function: where the stream stands after the run is where it stays.
    let inner = drop.clone();
    let y = checkpoint(
        move |xs: &[Tensor]| {
            manual_seed(9);
            Layer::forward(&*inner, &xs[0], Mode::Train)
        },
        &[&x],
    );
    let after = stream.state();
    let _ = grad(&y.sum(), &[&x]);
    assert_eq!(stream.state(), after);
}
