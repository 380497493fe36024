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
    assert_eq!(format!("{net:?}"), "[\"Dense(2, 3)\", \"ReLU\"]");
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
    assert_eq!(
        StepLr {
            base: 1.0,
            step: 2,
            gamma: 0.5
        }
        .lr(2),
        0.5
    );
    let acc = accuracy(&Tensor::from_vec(vec![0.9f32, 0.1], &[1, 2]), &[0]);
    assert_eq!(acc.hit_num, 1);
    let mut rng = <ferrograd::rand::rngs::StdRng as ferrograd::rand::SeedableRng>::seed_from_u64(1);
    assert_eq!(Tensor::randn(&[2], DType::F32, &mut rng).shape(), &[2]);
    let _: fn(&std::path::Path) -> Result<ferrograd::io::Checkpoint> = load_checkpoint;
}
