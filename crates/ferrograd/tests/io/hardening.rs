//! Careless and hostile inputs that once gave silent wrong answers or aborts: each is now a
//! right answer, an `Err`, or a panic whose message names the op or layer.

use crate::common::{panic_message, scratch, turn};
use ferrograd::data::{encode_idx_u8, one_hot, read_idx_u8, BatchIterator, TensorDataset};
use ferrograd::io::{load_checkpoint, load_tensors, save_checkpoint, save_tensors};
use ferrograd::metrics;
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn assert_panics(needle: &str, f: impl FnOnce()) {
    let msg = panic_message(f);
    assert!(
        msg.contains(needle),
        "panic message {msg:?} lacks {needle:?}"
    );
}

#[test]
fn regression_metrics_refuse_shapes_that_would_broadcast() {
    let pred = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1]);
    let target = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]);
    assert_panics("mse: prediction shape [3, 1]", || {
        metrics::mse(&pred, &target);
    });
    assert_panics("mae", || {
        metrics::mae(&pred, &target);
    });
    assert_panics("r2", || {
        metrics::r2(&pred, &target);
    });
    assert_eq!(metrics::mse(&pred.reshape(&[3]), &target), 0.0);
}

#[test]
fn optimizer_settings_are_validated() {
    assert_panics("clip_grad_norm", || {
        drop(Sgd::new(0.1).clip_grad_norm(-1.0))
    });
    assert_panics("clip_grad_value", || {
        drop(Sgd::new(0.1).clip_grad_value(f64::NAN))
    });
    assert_panics("learning rate NaN", || drop(Sgd::new(f64::NAN)));
    assert_panics("learning rate -0.1", || drop(Adam::new(-0.1)));
    assert_panics("learning rate inf", || Adam::new(0.1).set_lr(f64::INFINITY));
    assert_panics("weight decay", || {
        drop(AdamW::new(0.1).weight_decay(f64::NAN))
    });
    // The settings that would make an update write NaN or diverge by construction.
    for (b1, b2) in [
        (1.0, 1.0),
        (-1.0, 0.999),
        (0.9, 2.0),
        (f64::NAN, 0.9),
        (0.9, 1.0),
    ] {
        assert_panics("must be in [0, 1)", || drop(Adam::new(0.1).betas(b1, b2)));
        assert_panics("must be in [0, 1)", || drop(RAdam::new(0.1).betas(b1, b2)));
    }
    for eps in [-1e-8, f64::NAN, f64::INFINITY] {
        assert_panics("eps", || drop(AdamW::new(0.1).eps(eps)));
    }
    for mu in [-5.0, f64::NAN, f64::INFINITY] {
        assert_panics("momentum", || drop(Momentum::new(0.1).momentum(mu)));
    }
    for alpha in [-0.1, 1.5, f64::NAN] {
        assert_panics("alpha", || drop(RmsProp::new(0.1).alpha(alpha)));
    }
    for delta in [0.0, -1.0, f64::NAN] {
        assert_panics("delta", || {
            let _ = Huber::new(delta);
        });
    }
    // The edges that are fine stay fine.
    drop(Adam::new(0.1).betas(0.0, 0.0).eps(0.0));
    drop(Momentum::new(0.1).momentum(0.0));
    drop(RmsProp::new(0.1).alpha(1.0));
}

#[test]
fn layer_and_loss_settings_are_validated_at_construction() {
    // Each would otherwise write NaN into every output, or loop or divide by zero later.
    assert_panics("LeakyRelu: slope NaN must be finite", || {
        let _ = LeakyRelu::new(f64::NAN);
    });
    assert_panics("Elu: alpha inf must be finite", || {
        let _ = Elu::new(f64::INFINITY);
    });
    assert_panics("momentum 2 must be in [0, 1]", || {
        let _ = BatchNorm2d::with_options(3, 2.0, 1e-5);
    });
    assert_panics("momentum NaN", || {
        let _ = BatchNorm1d::with_options(3, f64::NAN, 1e-5);
    });
    assert_panics("eps 0 must be finite and positive", || {
        let _ = BatchNorm2d::with_options(3, 0.1, 0.0);
    });
    assert_panics("eps NaN", || {
        let _ = BatchNorm2d::with_options(3, 0.1, f64::NAN);
    });
    assert_panics("Conv2d: stride must be positive", || {
        let _ = Conv2d::new(1, 1, 3).stride(0);
    });
    assert_panics("ConvTranspose2d: dilation must be", || {
        let _ = ConvTranspose2d::new(1, 1, 3).dilation(0);
    });
    assert_panics("MaxPool2d: kernel 0 and stride 1", || {
        let _ = MaxPool2d::new(0, 1);
    });
    assert_panics("AvgPool2d: kernel 2 and stride 0", || {
        let _ = AvgPool2d::new(2, 0);
    });
    assert_panics("Huber: delta NaN", || {
        let _ = Huber::new(f64::NAN);
    });
    assert_panics("Huber: delta -1", || {
        let _ = Huber::new(-1.0);
    });
    assert_panics("Dropout", || {
        let _ = Dropout::new(1.5);
    });
    assert_panics("Dropout", || {
        let _ = Dropout::new(f64::NAN);
    });
    // The edges that are valid stay valid.
    drop(BatchNorm2d::with_options(3, 0.0, 1e-12));
    drop(BatchNorm2d::with_options(3, 1.0, 1e-5));
    assert_eq!(LeakyRelu::new(-0.5).slope(), -0.5);
}

#[test]
fn optimizer_state_of_the_wrong_shape_is_refused_and_changes_nothing() {
    let p = Param::new(Tensor::from_vec(vec![1.0f64, -2.0, 0.5, 3.0], &[2, 2]));
    let params = vec![("p".to_string(), p.clone())];
    let mut opt = Adam::new(0.1);
    opt.step(&params, &p.tensor().square().sum().backward());
    let (steps, good) = opt.state(&params).unwrap();
    // Same element count, another shape: it used to train on silently.
    let bad: Vec<(String, Tensor)> = good
        .iter()
        .map(|(n, t)| (n.clone(), t.reshape(&[4])))
        .collect();
    let err = opt.load_state(&params, 7, bad).unwrap_err().to_string();
    assert!(
        err.contains("p.exp_avg: expected [2, 2] f64, found [4] f64"),
        "{err}"
    );
    assert!(
        err.contains("p.exp_avg_sq"),
        "every mismatch is listed: {err}"
    );
    assert_eq!(opt.steps(), steps);
    assert_eq!(
        opt.state(&params).unwrap().1[0].1.to_vec::<f64>(),
        good[0].1.to_vec::<f64>()
    );
    // A dtype mismatch and a parameter that does not exist.
    let err = opt
        .load_state(
            &params,
            1,
            vec![
                ("p.exp_avg".into(), good[0].1.to_dtype(DType::F32)),
                ("q.exp_avg".into(), good[0].1.clone()),
            ],
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("found [2, 2] f32") && err.contains("no parameter \"q\""),
        "{err}"
    );
    // Duplicate names make saved state ambiguous.
    let twice = vec![("p".to_string(), p.clone()), ("p".to_string(), p.clone())];
    assert!(opt.state(&twice).is_err());
}

#[test]
fn one_optimizer_steps_two_networks_whose_names_repeat() {
    let make = |v: f64| Param::new(Tensor::from_vec(vec![v, v], &[2]));
    let (a, b) = (make(1.0), make(3.0));
    let both = vec![
        ("0.w".to_string(), a.clone()),
        ("0.w".to_string(), b.clone()),
    ];
    let mut shared = Adam::new(0.1);
    let (a2, b2) = (make(1.0), make(3.0));
    let (mut solo_a, mut solo_b) = (Adam::new(0.1), Adam::new(0.1));
    for _ in 0..5 {
        let loss = &a.tensor().powf(3.0).sum() + &b.tensor().square().sum();
        shared.step(&both, &loss.backward());
        let pa = vec![("0.w".to_string(), a2.clone())];
        solo_a.step(&pa, &a2.tensor().powf(3.0).sum().backward());
        let pb = vec![("0.w".to_string(), b2.clone())];
        solo_b.step(&pb, &b2.tensor().square().sum().backward());
    }
    assert_eq!(a.tensor().to_vec::<f64>(), a2.tensor().to_vec::<f64>());
    assert_eq!(b.tensor().to_vec::<f64>(), b2.tensor().to_vec::<f64>());
}

#[test]
fn a_failed_update_leaves_the_parameter_intact() {
    let p = Param::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]));
    assert_panics("refused", || p.update::<f32>(|_| panic!("refused")));
    assert_eq!(p.shape(), vec![3]);
    assert_eq!(p.tensor().to_vec::<f32>(), vec![1.0, 2.0, 3.0]);
    // Still a tracked leaf with the same identity.
    let g = p.tensor().sum().backward();
    assert!(g.get_param(&p).is_some());
}

fn dropout_model() -> Model {
    dropout_model_seeded(3)
}

/// Dense, BatchNorm, Dropout: every kind of state a checkpoint holds.
fn dropout_model_seeded(seed: u64) -> Model {
    let _turn = turn();
    manual_seed(seed);
    let net = Net::new(vec![
        Box::new(Dense::new(6, 16)),
        Box::new(BatchNorm1d::new(16)),
        Box::new(ReLU::new()),
        Box::new(Dropout::new(0.5)),
        Box::new(Dense::new(16, 3)),
    ]);
    Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.01))
}

/// Named values, stream positions, optimizer steps, learning rate.
type Everything = (Vec<(String, Vec<f64>)>, Vec<String>, u64, f64);

/// Every value a model holds: parameters and buffers, optimizer state, stream positions.
fn everything(model: &Model) -> Everything {
    let net = model.net();
    let mut values: Vec<(String, Vec<f64>)> = net
        .state()
        .into_iter()
        .map(|(n, t)| (n, t.to_vec::<f64>()))
        .collect();
    let named: Vec<(String, Param)> = net.params();
    let (steps, state) = model.optimizer().state(&named).unwrap();
    values.extend(state.into_iter().map(|(n, t)| (n, t.to_vec::<f64>())));
    let streams = net
        .rng_streams()
        .into_iter()
        .map(|(n, s)| format!("{n}={}", s.state()))
        .collect();
    (values, streams, steps, model.optimizer().lr())
}

fn toy_data() -> TensorDataset {
    let x = Tensor::randn(&[40, 6], DType::F32, &mut StdRng::seed_from_u64(1));
    let labels: Vec<u8> = (0..40).map(|i| (i % 3) as u8).collect();
    TensorDataset::new(x, one_hot(&labels, 3))
}

fn train_epoch(model: &mut Model, data: &TensorDataset, epoch: u64) -> Vec<f32> {
    BatchIterator::epoch(data, 8, true, 5, epoch, false)
        .map(|b| model.train_step(&b.inputs, &b.targets))
        .collect()
}

#[test]
fn resuming_a_run_with_dropout_is_bit_identical() {
    let dir = scratch("dropout_resume");
    let path = dir.join("ck.safetensors");
    let data = toy_data();
    let mut straight = dropout_model();
    train_epoch(&mut straight, &data, 0);
    save_checkpoint(&path, &straight, 1).unwrap();
    let losses = train_epoch(&mut straight, &data, 1);

    // Another seed (so another dropout stream) and other draws before the restore must not
    // matter.
    let mut resumed = dropout_model_seeded(4);
    train_epoch(&mut resumed, &data, 7);
    load_checkpoint(&path)
        .unwrap()
        .restore(&mut resumed)
        .unwrap();
    assert_eq!(train_epoch(&mut resumed, &data, 1), losses);

    // A checkpoint without the stream's position is refused, naming it.
    let (tensors, mut meta) = load_tensors(&path).unwrap();
    assert!(meta.remove("rng.3.rng").is_some(), "{meta:?}");
    let named: Vec<(String, Tensor)> = tensors.into_iter().collect();
    save_tensors(&path, &named, meta).unwrap();
    let err = load_checkpoint(&path)
        .unwrap()
        .restore(&mut dropout_model())
        .unwrap_err()
        .to_string();
    assert!(err.contains("rng.3.rng: missing"), "{err}");
}

#[test]
fn a_restore_lists_every_problem_and_changes_nothing() {
    let dir = scratch("restore_all_problems");
    let path = dir.join("ck.safetensors");
    let mut trained = dropout_model();
    train_epoch(&mut trained, &toy_data(), 0);
    trained.optimizer_mut().set_lr(0.004);
    save_checkpoint(&path, &trained, 1).unwrap();
    // What was saved, read before the next model's `manual_seed` starts every stream drawn
    // from the default generator again (as PyTorch's reseeds every dropout).
    let saved = everything(&trained);
    // The learning rate comes back with the rest.
    let mut resumed = dropout_model_seeded(9);
    load_checkpoint(&path)
        .unwrap()
        .restore(&mut resumed)
        .unwrap();
    assert_eq!(everything(&resumed), saved);
    // A bad parameter, a bad optimizer slot and a bad stream: all three are named.
    let (mut tensors, mut meta) = load_tensors(&path).unwrap();
    tensors.insert("model.0.bias".into(), Tensor::zeros(&[2], DType::F32));
    tensors.insert(
        "optim.4.weight.exp_avg".into(),
        Tensor::zeros(&[2], DType::F32),
    );
    meta.insert("rng.3.rng".into(), "not a stream".into());
    let named: Vec<(String, Tensor)> = tensors.into_iter().collect();
    save_tensors(&path, &named, meta).unwrap();
    let mut model = dropout_model_seeded(9);
    let before = everything(&model);
    let err = load_checkpoint(&path)
        .unwrap()
        .restore(&mut model)
        .unwrap_err()
        .to_string();
    for needle in [
        "0.bias: expected [16] f32, found [2] f32",
        "optim.4.weight.exp_avg",
        "rng.3.rng",
    ] {
        assert!(err.contains(needle), "{needle} missing from {err}");
    }
    assert_eq!(everything(&model), before);
}

#[test]
fn anomaly_detection_stops_the_update_before_nan_reaches_the_weights() {
    // The model has BatchNorm: its running statistics must stay clean too.
    let mut model = dropout_model();
    let before = everything(&model);
    let mut x = vec![0.5f32; 4 * 6];
    x[3] = f32::NAN;
    let x = Tensor::from_vec(x, &[4, 6]);
    let y = one_hot(&[0, 1, 2, 0], 3);
    let err = detect_anomaly(|| model.train_step(&x, &y)).unwrap_err();
    assert!(err.to_string().contains("anomaly"), "{err}");
    // Values, optimizer steps and learning rate as before (the step's dropout draw was taken).
    let (after, before) = (everything(&model), before);
    assert_eq!(
        (&after.0, after.2, after.3),
        (&before.0, before.2, before.3)
    );
    assert_eq!(model.optimizer().steps(), 0);
}

#[test]
fn plain_descent_moves_a_weight_by_a_tiny_gradient() {
    // Only the rules that square the gradient treat tiny gradients as zero.
    let p = Param::new(Tensor::zeros(&[1], DType::F32));
    let params = vec![("p".to_string(), p.clone())];
    let loss = (&p.tensor() * 1e-18).sum();
    Sgd::new(0.1).step(&params, &loss.backward());
    let w = p.tensor().item();
    assert!((w + 1e-19).abs() < 1e-25, "{w}");
}

#[test]
fn power_zero_has_gradient_zero_at_zero() {
    let x = Tensor::from_vec(vec![0.0f64, 2.0, -1.5], &[3]).requires_grad();
    let g = grad_with_graph(&x.powf(0.0).sum(), &[&x]).remove(0);
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 0.0, 0.0]);
    assert_eq!(
        grad(&g.sum(), &[&x])[0].to_vec::<f64>(),
        vec![0.0, 0.0, 0.0]
    );
    // Other powers keep their derivative at 0.
    let g2 = grad(&x.powf(2.0).sum(), &[&x]).remove(0);
    assert_eq!(g2.to_vec::<f64>(), vec![0.0, 4.0, -3.0]);
}

#[test]
fn shuffles_of_different_seeds_and_epochs_never_share_a_stream() {
    let data = TensorDataset::new(
        Tensor::arange(0.0, 64.0, 1.0, DType::F32).reshape(&[64, 1]),
        Tensor::zeros(&[64, 1], DType::F32),
    );
    let order = |seed: u64, epoch: u64| -> Vec<usize> {
        BatchIterator::epoch(&data, 64, true, seed, epoch, false)
            .next()
            .unwrap()
            .indices
    };
    assert_ne!(order(0, 1), order(0x9e37_79b9_7f4a_7c15, 0));
    assert_ne!(order(1, 0), order(0, 1));
    assert_eq!(order(4, 2), order(4, 2));
}

#[test]
fn empty_tensors_reduce_as_numpy_does() {
    for shape in [[0usize, 3], [3, 0]] {
        let t = Tensor::zeros(&shape, DType::F32);
        assert_eq!(t.sum().item(), 0.0);
        assert!(t.mean().item().is_nan());
        let s0 = t.sum_axes(&[0], false);
        assert_eq!(s0.shape(), &[shape[1]]);
        assert!(s0.to_vec::<f32>().iter().all(|&v| v == 0.0));
        assert_eq!(t.sum_axes(&[1], true).shape(), &[shape[0], 1]);
        assert_eq!(t.softmax(1).shape(), &shape);
        assert_eq!(t.log_softmax(0).shape(), &shape);
        // Over the non-empty axis the result is empty; over the empty one there is no answer.
        let (empty_axis, full_axis) = if shape[0] == 0 { (0, 1) } else { (1, 0) };
        assert_eq!(t.max_axes(&[full_axis], false).numel(), 0);
        assert_eq!(t.argmax(full_axis).numel(), 0);
        assert_panics("max_axes: reduction over an empty axis", || {
            drop(t.max_axes(&[empty_axis], false))
        });
        assert_panics("argmax", || drop(t.argmax(empty_axis)));
    }
    // Gradients through empty tensors are empty too.
    let x = Tensor::zeros(&[0, 3], DType::F64).requires_grad();
    assert_eq!(grad(&x.sum(), &[&x])[0].shape(), &[0, 3]);
}

#[test]
fn a_training_step_on_an_empty_batch_is_refused() {
    let net = Net::new(vec![Box::new(Dense::new(6, 3))]);
    let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.01));
    let x = Tensor::zeros(&[0, 6], DType::F32);
    let y = Tensor::zeros(&[0, 3], DType::F32);
    assert_panics("empty batch", || {
        model.train_step(&x, &y);
    });
}

#[test]
fn bytes_after_a_gzip_stream_are_reported() {
    use std::io::Write;
    let dir = scratch("gzip_trailing");
    let path = dir.join("labels.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&encode_idx_u8(&[3], &[1, 2, 3])).unwrap();
    let mut bytes = e.finish().unwrap();
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(read_idx_u8(&path).unwrap().data, vec![1, 2, 3]);
    bytes.extend_from_slice(b"junk");
    std::fs::write(&path, &bytes).unwrap();
    let err = read_idx_u8(&path).unwrap_err().to_string();
    assert!(
        err.contains("4 bytes after the end of the gzip stream"),
        "{err}"
    );
}

#[test]
fn concurrent_saves_to_one_path_all_succeed_and_stale_temps_are_cleaned() {
    let dir = scratch("concurrent_saves");
    let path = dir.join("ck.safetensors");
    // A temporary file left by a writer that was killed (no such process).
    let stale = dir.join(".ck.safetensors.tmp-4294967294-0");
    // A temporary file of another target whose name shares the prefix is that target's to
    // clean, even when its writer is gone.
    let other = dir.join(".ck.safetensors.10.tmp-4294967294-0");
    std::fs::write(&other, b"another save in progress").unwrap();
    std::fs::write(&stale, b"half a checkpoint").unwrap();
    std::thread::scope(|s| {
        let models: Vec<Model> = (0..4).map(|_| dropout_model()).collect();
        for (epoch, model) in models.into_iter().enumerate() {
            let path = &path;
            s.spawn(move || save_checkpoint(path, &model, epoch as u64).unwrap());
        }
    });
    assert!(load_checkpoint(&path).unwrap().epoch < 4);
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![".ck.safetensors.10.tmp-4294967294-0", "ck.safetensors"]
    );
    assert!(!stale.exists());
}

fn one_tensor(v: f32) -> Vec<(String, Tensor)> {
    vec![("w".to_string(), Tensor::from_vec(vec![v], &[1]))]
}

fn saved_value(path: &std::path::Path) -> f32 {
    load_tensors(path).unwrap().0["w"].item() as f32
}

#[cfg(unix)]
#[test]
fn a_save_keeps_the_mode_of_the_file_it_replaces() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("save_keeps_mode");
    let path = dir.join("private.safetensors");
    save_tensors(&path, &one_tensor(1.0), Default::default()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    save_tensors(&path, &one_tensor(2.0), Default::default()).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode {mode:o}");
    assert_eq!(saved_value(&path), 2.0);
}

#[cfg(unix)]
#[test]
fn a_save_through_a_symlink_replaces_its_target_and_keeps_the_link() {
    let dir = scratch("save_through_link");
    std::fs::create_dir_all(dir.join("runs")).unwrap();
    let target = dir.join("runs/best.safetensors");
    save_tensors(&target, &one_tensor(1.0), Default::default()).unwrap();
    // A relative link, as `ln -s runs/best.safetensors latest.safetensors` makes, and a link
    // to that link.
    let link = dir.join("latest.safetensors");
    std::os::unix::fs::symlink("runs/best.safetensors", &link).unwrap();
    let link2 = dir.join("current.safetensors");
    std::os::unix::fs::symlink(&link, &link2).unwrap();
    save_tensors(&link2, &one_tensor(3.0), Default::default()).unwrap();
    for p in [&link, &link2] {
        assert!(std::fs::symlink_metadata(p)
            .unwrap()
            .file_type()
            .is_symlink());
    }
    assert_eq!(saved_value(&target), 3.0);
    assert_eq!(saved_value(&link2), 3.0);
    // A link that points at nothing yet creates its target.
    let dangling = dir.join("next.safetensors");
    std::os::unix::fs::symlink("runs/next.safetensors", &dangling).unwrap();
    save_tensors(&dangling, &one_tensor(4.0), Default::default()).unwrap();
    assert_eq!(saved_value(&dir.join("runs/next.safetensors")), 4.0);
    // A loop of links is an error that names the path, not a hang.
    let a = dir.join("a.safetensors");
    std::os::unix::fs::symlink("b.safetensors", &a).unwrap();
    std::os::unix::fs::symlink("a.safetensors", dir.join("b.safetensors")).unwrap();
    let err = save_tensors(&a, &one_tensor(5.0), Default::default()).unwrap_err();
    assert!(err.to_string().contains("a.safetensors"), "{err}");
}

#[test]
fn a_checkpoint_damaged_after_saving_is_refused_by_its_checksum() {
    let dir = scratch("checksum");
    let path = dir.join("ck.safetensors");
    let named = vec![
        (
            "a".to_string(),
            Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]),
        ),
        ("b".to_string(), Tensor::from_vec(vec![7i64], &[1])),
    ];
    let meta = std::collections::HashMap::from([("step".to_string(), "12".to_string())]);
    save_tensors(&path, &named, meta.clone()).unwrap();
    // The checksum is checked and kept out of the metadata a caller reads.
    assert_eq!(load_tensors(&path).unwrap().1, meta);
    let mut raw = std::fs::read(&path).unwrap();
    let last = raw.len() - 9; // inside the data: the f32 3.0
    raw[last] ^= 0x10;
    std::fs::write(&path, &raw).unwrap();
    let err = load_tensors(&path).unwrap_err().to_string();
    assert!(
        err.contains("checksum") && err.contains("ck.safetensors"),
        "{err}"
    );
    // A header edited to another shape of the same size: the bytes agree, the checksum not.
    save_tensors(&path, &named, meta.clone()).unwrap();
    let raw = std::fs::read(&path).unwrap();
    let len = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&raw[8..8 + len]).unwrap();
    let edited = header.replace("\"shape\":[3]", "\"shape\":[1,3]");
    assert_ne!(edited, header);
    let mut reshaped = (edited.len() as u64).to_le_bytes().to_vec();
    reshaped.extend_from_slice(edited.as_bytes());
    reshaped.extend_from_slice(&raw[8 + len..]);
    std::fs::write(&path, &reshaped).unwrap();
    let err = load_tensors(&path).unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
    // A read-only checkpoint is not replaced.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let err = save_tensors(&path, &named, meta.clone()).unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    // A whole model's checkpoint, its last byte flipped.
    save_checkpoint(&path, &dropout_model(), 3).unwrap();
    let mut raw = std::fs::read(&path).unwrap();
    let n = raw.len();
    raw[n - 1] ^= 1;
    std::fs::write(&path, &raw).unwrap();
    let Err(err) = load_checkpoint(&path) else {
        panic!("a damaged checkpoint loaded");
    };
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn a_tensor_named_like_the_metadata_key_is_refused_and_the_old_file_kept() {
    let dir = scratch("metadata_name");
    let path = dir.join("ck.safetensors");
    save_tensors(&path, &one_tensor(1.0), Default::default()).unwrap();
    let mut named = one_tensor(2.0);
    named.push(("__metadata__".to_string(), Tensor::zeros(&[1], DType::F32)));
    let err = save_tensors(&path, &named, Default::default()).unwrap_err();
    assert!(err.to_string().contains("__metadata__"), "{err}");
    assert_eq!(saved_value(&path), 1.0);
}

#[test]
fn confusion_matrix_names_a_label_outside_the_classes() {
    let scores = Tensor::from_vec(vec![0.9f32, 0.1, 0.2, 0.8], &[2, 2]);
    assert_eq!(
        metrics::confusion_matrix(&scores, &[0, 1], 2).unwrap(),
        vec![vec![1, 0], vec![0, 1]]
    );
    let err = metrics::confusion_matrix(&scores, &[0, 7], 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("label 7"), "{err}");
}

#[test]
fn layers_name_themselves_when_the_input_does_not_fit() {
    let bn = BatchNorm1d::new(4);
    let x = Tensor::zeros(&[2, 3], DType::F32);
    assert_panics(
        "BatchNorm1d(4): expected input [N, 4] or [N, 4, L], got [2, 3]",
        || drop(bn.forward(&x, Mode::Train)),
    );
    assert_panics(
        "BatchNorm1d(4): training needs more than one value per channel",
        || drop(bn.forward(&Tensor::ones(&[1, 4], DType::F32), Mode::Train)),
    );
    // Evaluation uses the running statistics: one sample is fine.
    assert_eq!(
        bn.forward(&Tensor::ones(&[1, 4], DType::F32), Mode::Eval)
            .shape(),
        &[1, 4]
    );
    assert_panics("Dense(6, 5): expected input [..., 6], got [2, 3]", || {
        drop(Dense::new(6, 5).forward(&x, Mode::Train))
    });
    assert_panics("LayerNorm(4): expected input [..., 4]", || {
        drop(LayerNorm::new(4).forward(&x, Mode::Train))
    });
    let ids = Tensor::from_vec(vec![1.0f32, 12.0], &[2]);
    assert_panics("Embedding(10, 3): id 12", || {
        drop(Embedding::new(10, 3).forward(&ids, Mode::Train))
    });
}
