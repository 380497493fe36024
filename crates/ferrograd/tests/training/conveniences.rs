//! Small conveniences PyTorch users reach for: linspace, allclose, the gradients' norm and
//! per-parameter iteration, `Debug` output, and what the prelude brings.

use ferrograd::prelude::*;

#[test]
fn linspace_includes_both_ends() {
    let t = Tensor::linspace(0.0, 1.0, 5, DType::F64);
    assert_eq!(t.to_vec::<f64>(), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    assert_eq!(
        Tensor::linspace(2.0, 3.0, 1, DType::F32).to_vec::<f32>(),
        vec![2.0]
    );
    assert_eq!(Tensor::linspace(0.0, 1.0, 0, DType::F32).shape(), &[0]);
    // The last value is exactly `end`, whatever the rounding of the steps.
    let t = Tensor::linspace(0.1, 0.7, 7, DType::F64).to_vec::<f64>();
    assert_eq!(t[6], 0.7);
}

#[test]
fn allclose_follows_numpy() {
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], &[3]);
    let b = Tensor::from_vec(vec![1.0f64, 2.0 + 1e-9, 3.0], &[3]);
    assert!(a.allclose(&b, 1e-5, 1e-8));
    assert!(!a.allclose(&b.add_scalar(1e-3), 1e-5, 1e-8));
    // Broadcasting, and NaN never close.
    assert!(Tensor::ones(&[2, 3], DType::F32).allclose(&Tensor::scalar(1.0f32), 0.0, 0.0));
    let nan = Tensor::from_vec(vec![f64::NAN], &[1]);
    assert!(!nan.allclose(&nan, 1.0, 1.0));
    let inf = Tensor::from_vec(vec![f64::INFINITY], &[1]);
    assert!(inf.allclose(&inf, 0.0, 0.0));
    // A finite value is never close to an infinity, whatever the tolerance.
    let one = Tensor::from_vec(vec![1.0f64], &[1]);
    assert!(!one.allclose(&inf, 1e-5, 1e-8) && !inf.allclose(&one, 1e-5, 1e-8));
    assert!(!inf.neg().allclose(&inf, 1e-5, 1e-8));
}

#[test]
fn gradients_have_a_norm_and_iterate_by_parameter() {
    let (a, b) = (
        Param::new(Tensor::from_vec(vec![1.0f64, 2.0], &[2])),
        Param::new(Tensor::from_vec(vec![3.0f64], &[1])),
    );
    let unused = Param::new(Tensor::zeros(&[4], DType::F64));
    let loss = &a.tensor().square().sum().mul_scalar(0.5) + &b.tensor().mul_scalar(2.0).sum();
    let grads = loss.backward();
    // ∂/∂a = a = [1, 2], ∂/∂b = 2: norm √(1 + 4 + 4) = 3.
    assert!((grads.norm() - 3.0).abs() < 1e-12);
    let params = vec![
        ("a".to_string(), a.clone()),
        ("unused".to_string(), unused),
        ("b".to_string(), b.clone()),
    ];
    let names: Vec<&str> = grads.of(&params).map(|(n, _)| n).collect();
    assert_eq!(names, ["a", "b"]);
    let text = format!("{grads:?} {a:?}");
    assert!(
        text.contains("leaves: 2") && text.contains("shape: [2]"),
        "{text}"
    );
    let net = Net::new(vec![Box::new(Dense::new(2, 3)), Box::new(ReLU::new())]);
    assert_eq!(format!("{net:?}"), "[\"Dense(2, 3)\", \"Relu\"]");
}

#[test]
fn the_prelude_has_what_a_training_script_imports() {
    // Data, metrics, schedules, checkpoints and the crate's own rand, from the prelude alone.
    let data = TensorDataset::new(
        Tensor::zeros(&[4, 2], DType::F32),
        one_hot(&[0, 1, 0, 1], 2),
    );
    assert_eq!(
        BatchIterator::epoch(&data, 3, false, 0, 0, false).count(),
        2
    );
    assert_eq!(StepLr::new(1.0, 2, 0.5).lr(2), 0.5);
    let acc = accuracy(&Tensor::from_vec(vec![0.9f32, 0.1], &[1, 2]), &[0]);
    assert_eq!(acc.hit_num, 1);
    let mut rng = <ferrograd::rand::rngs::StdRng as ferrograd::rand::SeedableRng>::seed_from_u64(1);
    assert_eq!(Tensor::randn(&[2], DType::F32, &mut rng).shape(), &[2]);
    let _: fn(&std::path::Path) -> Result<ferrograd::io::Checkpoint> = load_checkpoint;
}

#[test]
fn labels_of_any_integer_type_and_more_than_256_classes() {
    let labels: Vec<usize> = vec![0, 299, 7];
    let y = one_hot(&labels, 300);
    assert_eq!(y.shape(), &[3, 300]);
    assert_eq!(y.to_vec::<f32>()[300 + 299], 1.0);
    // Predictions 0, 299 and 8.
    let scores = one_hot(&[0usize, 299, 8], 300);
    assert_eq!(accuracy(&scores, &labels).hit_num, 2);
    let e = std::panic::catch_unwind(|| one_hot(&[-1i32], 3)).unwrap_err();
    assert!(e.downcast_ref::<String>().unwrap().contains("label -1"));
    let err = ferrograd::metrics::confusion_matrix(&scores, &[0i64, -2, 7], 300).unwrap_err();
    assert!(err.to_string().contains("label -2"), "{err}");
}

#[test]
fn batches_by_builder_and_a_schedule_on_the_model() {
    let data = TensorDataset::new(
        Tensor::arange(0.0, 10.0, 1.0, DType::F32).reshape(&[10, 1]),
        Tensor::zeros(&[10, 1], DType::F32),
    );
    let batches = Batches::new(&data, 4).shuffle(3).drop_last(true);
    let e0: Vec<Vec<usize>> = batches.epoch(0).map(|b| b.indices).collect();
    assert_eq!(e0.len(), 2);
    // The same as the positional form, and another order next epoch.
    let old: Vec<Vec<usize>> = BatchIterator::epoch(&data, 4, true, 3, 0, true)
        .map(|b| b.indices)
        .collect();
    assert_eq!(e0, old);
    assert_ne!(batches.epoch(1).next().unwrap().indices, e0[0]);
    let in_order: Vec<usize> = Batches::new(&data, 4)
        .epoch(5)
        .flat_map(|b| b.indices)
        .collect();
    assert_eq!(in_order, (0..10).collect::<Vec<_>>());

    let net = Net::new(vec![Box::new(Dense::new(1, 1))]);
    let mut model =
        Model::new(net, Mse::new(), Sgd::new(1.0)).with_schedule(StepLr::new(0.1, 2, 0.5));
    let (x, y) = (
        Tensor::ones(&[2, 1], DType::F32),
        Tensor::zeros(&[2, 1], DType::F32),
    );
    let mut rates = Vec::new();
    for _ in 0..5 {
        model.train_step(&x, &y);
        rates.push(model.optimizer().lr());
    }
    assert_eq!(rates, [0.1, 0.1, 0.05, 0.05, 0.025]);
}

#[test]
fn updating_a_parameter_with_the_wrong_element_type_says_so() {
    let p = Param::new(Tensor::zeros(&[2], DType::F32));
    let e = std::panic::catch_unwind(|| p.update::<f64>(|_| ())).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("takes f64 elements") && msg.contains("holds f32"),
        "{msg}"
    );
    assert_eq!(p.tensor().to_vec::<f32>(), vec![0.0, 0.0]);
}

#[test]
fn negative_axes_count_from_the_back() {
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F64).reshape(&[2, 3, 4]);
    assert_eq!(x.softmax(-1).to_vec::<f64>(), x.softmax(2).to_vec::<f64>());
    assert_eq!(
        x.sum_axes(&[-1, 0], false).to_vec::<f64>(),
        x.sum_axes(&[2, 0], false).to_vec::<f64>()
    );
    assert_eq!(x.argmax(-2).shape(), &[2, 4]);
    assert_eq!(x.transpose(-1, 0).shape(), &[4, 3, 2]);
    assert_eq!(x.narrow(-1, 1, 2).shape(), &[2, 3, 2]);
    assert_eq!(x.unsqueeze(-1).shape(), &[2, 3, 4, 1]);
    assert_eq!(x.unsqueeze(0).squeeze(-4).shape(), &[2, 3, 4]);
    assert_eq!(Tensor::cat(&[&x, &x], -1).shape(), &[2, 3, 8]);
    assert_eq!(Tensor::stack(&[&x, &x], -1).shape(), &[2, 3, 4, 2]);
    assert_eq!(x.index_select(-3, &[1]).shape(), &[1, 3, 4]);
    // Out of range either way: the op and the shape in the message.
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| x.softmax(-4))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("softmax: axis -4 out of range for shape [2, 3, 4]"),
        "{msg}"
    );
    assert!(Tensor::try_cat(&[&x], 3).is_err() && Tensor::try_cat(&[&x], -4).is_err());
    assert!(x.try_index_select(-9, &[0]).is_err());
    // Two names for one axis are refused, as numpy refuses them.
    let twice = || x.sum_axes(&[1, -2], false);
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(twice)).unwrap_err();
    assert!(e
        .downcast_ref::<String>()
        .unwrap()
        .contains("axis 1 given twice"));
    // Other signed widths, and extremes that are no axis at all.
    assert_eq!(x.sum_axes(&[-1i64], false).shape(), &[2, 3]);
    assert_eq!(x.argmax(-1isize).shape(), &[2, 3]);
    assert_eq!(ferrograd::Axis::position(isize::MIN, 3), None);
    assert_eq!(ferrograd::Axis::position(i64::MAX, 3), None);
}

#[test]
fn random_tensors_from_the_default_generator_and_the_norm_before_clipping() {
    // Other tests of this binary draw from the same generator meanwhile, so only the draws'
    // shapes and ranges are checked here.
    let a = Tensor::randn_default(&[3], DType::F64);
    let u = Tensor::rand_uniform_default(&[4], 2.0, 3.0, DType::F32);
    assert_eq!(a.shape(), &[3]);
    assert!(a.to_vec::<f64>().iter().all(|v| v.is_finite()));
    assert!(u.to_vec::<f32>().iter().all(|&v| (2.0..3.0).contains(&v)));

    let p = Param::new(Tensor::from_vec(vec![3.0f64, 4.0], &[2]));
    let params = vec![("p".to_string(), p.clone())];
    let mut opt = Sgd::new(0.1).clip_grad_norm(1.0);
    assert_eq!(opt.last_grad_norm(), None);
    // ∂(½|p|²)/∂p = p = [3, 4]: norm 5, clipped to 1.
    opt.step(
        &params,
        &p.tensor().square().sum().mul_scalar(0.5).backward(),
    );
    assert_eq!(opt.last_grad_norm(), Some(5.0));
    let w = p.tensor().to_vec::<f64>();
    assert!((w[0] - (3.0 - 0.1 * 0.6)).abs() < 1e-6 && (w[1] - (4.0 - 0.1 * 0.8)).abs() < 1e-6);
}
