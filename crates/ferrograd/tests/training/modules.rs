//! Modules: nested and derived parameter names equal to PyTorch's `state_dict` keys for the
//! same structure, loading PyTorch-layout safetensors files, every mismatch reported with
//! nothing changed, freezing, copying, and the mode reaching every inner layer.

use std::borrow::Cow;
use std::path::Path;

use crate::common::{scratch, turn};
use ferrograd::prelude::*;
use safetensors::tensor::{Dtype, View};

/// A user's own module: named fields, a nested `Net`, and a field that is not a module.
#[derive(Module)]
struct Generator {
    fc: Dense,
    bn: BatchNorm1d,
    up: Net,
    #[module(skip)]
    #[allow(dead_code)]
    latent: usize,
}

impl Layer for Generator {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        let h = self.bn.forward(&self.fc.forward(x, mode), mode).relu();
        // `Net::forward(&x)` runs in the net's own mode; the Layer form takes ours.
        Layer::forward(&self.up, &h, mode)
    }
}

fn generator() -> Generator {
    manual_seed(7);
    Generator {
        fc: Dense::new(4, 6),
        bn: BatchNorm1d::new(6),
        up: Net::new(vec![
            Box::new(Dense::new(6, 5)),
            Box::new(Dropout::new(0.5)),
            Box::new(Net::new(vec![
                Box::new(ReLU::new()),
                Box::new(Dense::new(5, 2)),
            ])),
        ]),
        latent: 4,
    }
}

/// A tuple struct: fields are named by position, as in PyTorch's `Sequential`.
#[derive(Module)]
struct Pair(Dense, Dense);

/// A generic wrapper, and a field whose name is a keyword.
#[derive(Module)]
struct Residual<L> {
    inner: L,
    r#type: Dense,
}

fn keys(named: Vec<(String, Param)>) -> Vec<String> {
    named.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn derived_and_nested_modules_use_pytorch_state_dict_keys() {
    let _turn = turn();
    let g = generator();
    // What `named_parameters()` and `named_buffers()` give for the same PyTorch structure:
    // Generator(fc=Linear, bn=BatchNorm1d, up=Sequential(Linear, Dropout,
    // Sequential(ReLU, Linear))).
    assert_eq!(
        keys(g.params()),
        [
            "fc.weight",
            "fc.bias",
            "bn.weight",
            "bn.bias",
            "up.0.weight",
            "up.0.bias",
            "up.2.1.weight",
            "up.2.1.bias"
        ]
    );
    assert_eq!(
        keys(g.buffers()),
        [
            "bn.running_mean",
            "bn.running_var",
            "bn.num_batches_tracked"
        ]
    );
    let shapes: Vec<Vec<usize>> = g.params().iter().map(|(_, p)| p.shape()).collect();
    assert_eq!(shapes[0], [6, 4], "Linear's weight is [out, in]");
    assert_eq!(shapes[6], [2, 5]);
    assert_eq!(g.rng_streams()[0].0, "up.1.rng");
    assert_eq!(g.name(), "Generator");
    assert_eq!(
        keys(Pair(Dense::new(2, 3), Dense::new(3, 1)).params())[2],
        "1.weight"
    );
    assert!(g.summary().contains("up.2.1.weight"));
    // The state lists each module's parameters and buffers together, as `state_dict()`.
    let state: Vec<String> = g.state().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        state,
        [
            "fc.weight",
            "fc.bias",
            "bn.weight",
            "bn.bias",
            "bn.running_mean",
            "bn.running_var",
            "bn.num_batches_tracked",
            "up.0.weight",
            "up.0.bias",
            "up.2.1.weight",
            "up.2.1.bias"
        ]
    );
    let r = Residual {
        inner: Pair(Dense::new(2, 2), Dense::new(2, 2)),
        r#type: Dense::new(2, 2),
    };
    assert_eq!(keys(r.params())[4], "type.weight");
    assert_eq!(keys(r.params())[2], "inner.1.weight");
    assert_eq!(g.num_params(), 6 * 4 + 6 + 6 + 6 + 5 * 6 + 5 + 2 * 5 + 2);
}

#[test]
fn the_mode_reaches_layers_inside_a_users_struct() {
    let _turn = turn();
    let g = generator();
    let x = Tensor::randn(&[8, 4], DType::F32, &mut rand::thread_rng());
    // Evaluation: Dropout off and running statistics used, so two calls agree.
    let a = no_grad(|| g.forward(&x, Mode::Eval)).to_vec::<f32>();
    let b = no_grad(|| g.forward(&x, Mode::Eval)).to_vec::<f32>();
    assert_eq!(a, b);
    // Training: Dropout draws differ from call to call.
    let c = g.forward(&x, Mode::Train).to_vec::<f32>();
    let d = g.forward(&x, Mode::Train).to_vec::<f32>();
    assert_ne!(c, d);
    // Through a Model, predict is evaluation however the net's own mode is set.
    let net = Net::new(vec![Box::new(generator())]);
    let model = Model::new(net, Mse::new(), Sgd::new(0.1));
    assert_eq!(
        model.predict(&x).to_vec::<f32>(),
        model.predict(&x).to_vec::<f32>()
    );
    // And from several threads at once.
    let expected = model.predict(&x).to_vec::<f32>();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(model.predict(&x).to_vec::<f32>(), expected));
        }
    });
}

/// Raw bytes of one tensor in a safetensors file, in any dtype.
struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn f32s(shape: &[usize], values: &[f32]) -> Raw {
    Raw {
        dtype: Dtype::F32,
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Writes what `safetensors.torch.save_file(model.state_dict(), path)` writes.
fn write_torch_file(path: &Path, tensors: &[(&str, Raw)]) {
    let views = tensors.iter().map(|(n, r)| (*n, r));
    let bytes = safetensors::serialize(views, &None).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn values(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
        .collect()
}

/// `nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))`.
fn torch_mlp() -> Net {
    Net::new(vec![
        Box::new(Dense::new(3, 4)),
        Box::new(BatchNorm1d::new(4)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(4, 2)),
    ])
}

/// Its state_dict as PyTorch saves it: f32 parameters, int64 `num_batches_tracked`, and (as
/// a model saved in half precision would) one f16 tensor.
fn torch_state() -> Vec<(&'static str, Raw)> {
    let half: Vec<u8> = values(4, 0.25)
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    vec![
        ("0.weight", f32s(&[4, 3], &values(12, 0.1))),
        ("0.bias", f32s(&[4], &values(4, 0.05))),
        ("1.weight", f32s(&[4], &[1.0, 0.5, 2.0, 1.5])),
        (
            "1.bias",
            Raw {
                dtype: Dtype::F16,
                shape: vec![4],
                data: half,
            },
        ),
        ("1.running_mean", f32s(&[4], &values(4, 0.1))),
        ("1.running_var", f32s(&[4], &[1.0, 2.0, 0.5, 1.0])),
        (
            "1.num_batches_tracked",
            Raw {
                dtype: Dtype::I64,
                shape: vec![],
                data: 938i64.to_le_bytes().to_vec(),
            },
        ),
        ("3.weight", f32s(&[2, 4], &values(8, 0.2))),
        ("3.bias", f32s(&[2], &[0.1, -0.1])),
    ]
}

#[test]
fn a_pytorch_state_dict_loads_and_computes_as_the_same_weights_set_by_hand() {
    let _turn = turn();
    let dir = scratch("torch_load");
    let path = dir.join("mlp.safetensors");
    write_torch_file(&path, &torch_state());
    let net = torch_mlp();
    net.load_safetensors(&path).unwrap();
    let x = Tensor::from_vec(values(15, 0.3), &[5, 3]);
    let got = no_grad(|| Layer::forward(&net, &x, Mode::Eval)).to_vec::<f32>();
    // The same computation written out with the file's values.
    let w1 = Tensor::from_vec(values(12, 0.1), &[4, 3]);
    let b1 = Tensor::from_vec(values(4, 0.05), &[4]);
    let h = &x.matmul(&w1.t()) + &b1;
    let mean = Tensor::from_vec(values(4, 0.1), &[4]);
    let var = Tensor::from_vec(vec![1.0f32, 2.0, 0.5, 1.0], &[4]);
    let gamma = Tensor::from_vec(vec![1.0f32, 0.5, 2.0, 1.5], &[4]);
    let beta = Tensor::from_vec(values(4, 0.25), &[4]);
    let h = &(&(&(&h - &mean) / &var.add_scalar(1e-5).sqrt()) * &gamma) + &beta;
    let w2 = Tensor::from_vec(values(8, 0.2), &[2, 4]);
    let b2 = Tensor::from_vec(vec![0.1f32, -0.1], &[2]);
    let want = (&h.relu().matmul(&w2.t()) + &b2).to_vec::<f32>();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    let state: std::collections::HashMap<String, Tensor> = net.state().into_iter().collect();
    assert_eq!(state["1.num_batches_tracked"].item(), 938.0);
    // And back: saved by ferrograd, loaded by a fresh network, the same outputs.
    net.save_safetensors(dir.join("again.safetensors")).unwrap();
    let again = torch_mlp();
    again
        .load_safetensors(dir.join("again.safetensors"))
        .unwrap();
    let out = no_grad(|| Layer::forward(&again, &x, Mode::Eval)).to_vec::<f32>();
    assert_eq!(out, got);
}

#[test]
fn every_mismatch_is_listed_and_nothing_changes() {
    let _turn = turn();
    let dir = scratch("torch_mismatch");
    let path = dir.join("bad.safetensors");
    let mut tensors = torch_state();
    tensors.retain(|(n, _)| *n != "0.bias"); // missing
    tensors.push(("4.weight", f32s(&[1], &[0.0]))); // unexpected
    tensors[0].1 = f32s(&[3, 4], &values(12, 0.1)); // [in, out]: the wrong layout
    let (_, bias3) = tensors.iter_mut().find(|(n, _)| *n == "3.bias").unwrap();
    *bias3 = Raw {
        dtype: Dtype::F64,
        shape: vec![2],
        data: [0.1f64, 1.0 / 3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    }; // f64 values f32 cannot hold
    write_torch_file(&path, &tensors);
    let net = torch_mlp();
    let before = net.state();
    let err = net.load_safetensors(&path).unwrap_err().to_string();
    for needle in [
        "bad.safetensors",
        "0.weight: expected [4, 3] f32, found [3, 4] f32",
        "0.bias: missing",
        "4.weight: unexpected",
        "3.bias: expected [2] f32, found [2] f64 (not every value converts to f32 exactly)",
    ] {
        assert!(err.contains(needle), "{needle} not in {err}");
    }
    let same = |a: &[(String, Tensor)], b: &[(String, Tensor)]| {
        a.iter()
            .zip(b)
            .all(|((n, x), (m, y))| n == m && x.to_vec::<f64>() == y.to_vec::<f64>())
    };
    assert!(
        same(&net.state(), &before),
        "a failed load changed the network"
    );
    // Non-strict: missing and unexpected keys are skipped and returned; a wrong shape is
    // still refused.
    let mut fine = torch_state();
    fine.retain(|(n, _)| *n != "0.bias");
    fine.push(("4.weight", f32s(&[1], &[0.0])));
    write_torch_file(&path, &fine);
    let report = net.load_safetensors_partial(&path).unwrap();
    assert_eq!(report.missing, ["0.bias"]);
    assert_eq!(report.unexpected, ["4.weight"]);
    assert_eq!(net.state()[0].1.to_vec::<f32>(), values(12, 0.1));
    write_torch_file(&path, &tensors);
    assert!(torch_mlp().load_safetensors_partial(&path).is_err());
}

#[test]
fn a_net_set_to_evaluation_stays_there_inside_a_training_forward() {
    let _turn = turn();
    let mut g = generator();
    g.up.eval();
    g.up.freeze();
    let stats = |g: &Generator| g.bn.buffers()[0].1.tensor().to_vec::<f32>();
    let x = Tensor::from_vec(values(16, 0.3), &[4, 4]);
    // The outer BatchNorm trains (its statistics move); the frozen, evaluating tail is
    // deterministic (its Dropout is off).
    let before = stats(&g);
    let a = g.forward(&x, Mode::Train);
    assert_ne!(stats(&g), before);
    let h = no_grad(|| {
        g.bn.forward(&g.fc.forward(&x, Mode::Eval), Mode::Eval)
            .relu()
    });
    let tail = |h: &Tensor| no_grad(|| Layer::forward(&g.up, h, Mode::Train)).to_vec::<f32>();
    assert_eq!(tail(&h), tail(&h));
    assert!(a.sum().backward().get_param(&g.up.params()[0].1).is_none());
}

#[test]
fn a_frozen_module_gets_no_gradient_and_no_update() {
    let _turn = turn();
    let g = generator();
    g.fc.freeze();
    let x = Tensor::from_vec(values(16, 0.3), &[4, 4]);
    let loss = g.forward(&x, Mode::Train).square().mean();
    let grads = loss.backward();
    assert!(g
        .fc
        .params()
        .iter()
        .all(|(_, p)| grads.get_param(p).is_none()));
    assert!(grads.get_param(&g.up.params()[0].1).is_some());
    let fc_before = g.fc.weight().tensor().to_vec::<f32>();
    let up_before = g.up.params()[0].1.tensor().to_vec::<f32>();
    Adam::new(0.1).step(&g.params(), &grads);
    assert_eq!(g.fc.weight().tensor().to_vec::<f32>(), fc_before);
    assert_ne!(g.up.params()[0].1.tensor().to_vec::<f32>(), up_before);
    g.fc.unfreeze();
    let grads = g.forward(&x, Mode::Train).square().mean().backward();
    assert!(grads.get_param(g.fc.weight()).is_some());
}

#[test]
fn copying_and_soft_updates_between_networks_of_one_structure() {
    let _turn = turn();
    manual_seed(1);
    let online = torch_mlp();
    manual_seed(2);
    let target = torch_mlp();
    let theta = |n: &Net| n.state()[0].1.to_vec::<f64>();
    let (o, t) = (theta(&online), theta(&target));
    assert_ne!(o, t);
    target.soft_update_from(&online, 0.25).unwrap();
    for ((new, old), on) in theta(&target).iter().zip(&t).zip(&o) {
        assert!((new - (0.75 * old + 0.25 * on)).abs() < 1e-6);
    }
    assert!(target.soft_update_from(&online, 1.5).is_err());
    target.copy_from(&online).unwrap();
    assert_eq!(theta(&target), o);
    // Copies are values, not shared parameters.
    let opt_params = online.params();
    opt_params[0].1.set(&Tensor::zeros(&[4, 3], DType::F32));
    assert_eq!(theta(&target), o);
    // Another structure is refused, listing why.
    let other = Net::new(vec![Box::new(Dense::new(3, 2))]);
    let err = other.copy_from(&online).unwrap_err().to_string();
    assert!(
        err.contains("0.weight: expected [2, 3] f32, found [4, 3] f32"),
        "{err}"
    );
}

/// `Module::tie` makes a layer's own parameter another layer's (PyTorch's
/// `head.weight = tok.weight`): one identity from then on, listed once by a container, and
/// refused with a reason for a different shape or a name the layer does not own.
#[test]
fn layers_tie_their_parameters_to_another_layers() {
    #[derive(Module)]
    struct Tied {
        tok: Embedding,
        head: Dense,
    }
    let tok = Embedding::new(10, 4);
    let mut head = Dense::new(4, 10);
    head.tie("weight", tok.weight()).unwrap();
    assert_eq!(head.weight().id(), tok.weight().id());
    let m = Tied { tok, head };
    let names: Vec<String> = m.params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["tok.weight", "head.bias"]);
    // Another size is taken only where the layer's parameters still fit together.
    let mut other = Dense::new(4, 11);
    let err = other.tie("weight", m.tok.weight()).unwrap_err().to_string();
    assert!(err.contains("gives 10 outputs, the bias has 11"), "{err}");
    let err = other.tie("bias", m.tok.weight()).unwrap_err().to_string();
    assert!(
        err.contains("a bias [10, 4] does not fit the weight [11, 4]"),
        "{err}"
    );
    // A shorter embedding table (cropping a model's context) replaces the longer one.
    let mut pos = Embedding::new(8, 4);
    let cropped = Param::new(pos.weight().tensor().narrow(0, 0, 5).detach());
    pos.tie("weight", &cropped).unwrap();
    let flat = Param::new(Tensor::zeros(&[4], DType::F32));
    let err = pos.tie("weight", &flat).unwrap_err().to_string();
    assert!(err.contains("cannot take a [4] f32"), "{err}");
    let ids = Tensor::from_vec(vec![0i64, 4], &[2]);
    assert_eq!(Layer::forward(&pos, &ids, Mode::Eval).shape(), &[2, 4]);
    let err = other.tie("scale", m.tok.weight()).unwrap_err().to_string();
    assert!(err.contains("no parameter \"scale\""), "{err}");
    let mut emb = Embedding::new(10, 4);
    emb.tie("weight", m.head.weight()).unwrap();
    assert_eq!(emb.weight().id(), m.tok.weight().id());
    let err = ReLU::new()
        .tie("weight", m.tok.weight())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot tie \"weight\""), "{err}");
}

#[test]
fn functional_call_computes_with_given_values_and_leaves_the_module_alone() {
    use ferrograd::nn::functional_call;

    let _turn = crate::common::turn();
    let net = Net::new(vec![
        Box::new(Dense::new(3, 4)),
        Box::new(Relu::new()),
        Box::new(Dense::new(4, 2)),
    ]);
    let before: Vec<Vec<f32>> = net
        .params()
        .iter()
        .map(|(_, p)| p.tensor().to_vec::<f32>())
        .collect();
    let x = Tensor::ones(&[5, 3], DType::F32);
    // A step of gradient descent taken inside the call (as MAML's inner loop does): the
    // outer gradient reaches the original weight through the updated one.
    let w0 = net.params()[0].1.tensor();
    let delta = Tensor::full(&[4, 3], 0.5, DType::F32).requires_grad();
    let shifted = &w0 + &delta;
    let y = functional_call(&net, &[("0.weight", shifted.clone())], || {
        Layer::forward(&net, &x, Mode::Eval)
    })
    .unwrap();
    let by_hand = {
        let (b0, w2, b2) = (
            net.params()[1].1.tensor(),
            net.params()[2].1.tensor(),
            net.params()[3].1.tensor(),
        );
        x.linear(&shifted, Some(&b0)).relu().linear(&w2, Some(&b2))
    };
    assert_eq!(y.to_vec::<f32>(), by_hand.to_vec::<f32>());
    let g = grad(&y.sum(), &[&delta]).remove(0);
    let g_hand = grad(&by_hand.sum(), &[&delta]).remove(0);
    assert_eq!(g.to_vec::<f32>(), g_hand.to_vec::<f32>());
    let after: Vec<Vec<f32>> = net
        .params()
        .iter()
        .map(|(_, p)| p.tensor().to_vec::<f32>())
        .collect();
    assert_eq!(before, after);
    // Unknown names and misfits are errors before anything runs.
    let err = functional_call(&net, &[("9.weight", w0.clone())], || unreachable!())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no parameter or buffer named [\"9.weight\"]"),
        "{err}"
    );
    let wrong = Tensor::zeros(&[2, 2], DType::F32);
    assert!(functional_call(&net, &[("0.weight", wrong)], || unreachable!()).is_err());
}
