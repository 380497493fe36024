//! The integer dtype: indices and labels as PyTorch's int64 — exact storage and conversion,
//! what argmax returns, what index_select, Embedding and the class-index losses take, integer
//! buffers in modules and files, and clear refusals where arithmetic or gradients would need a
//! float.

use std::collections::HashMap;

use crate::common::{panic_message, scratch};
use ferrograd::io::{load_tensors, save_tensors};
use ferrograd::prelude::*;

#[test]
fn i64_values_are_stored_and_read_back_exactly() {
    let big = (1i64 << 60) + 1;
    let t = Tensor::from_vec(vec![big, -3, 0], &[3]);
    assert_eq!(t.dtype(), DType::I64);
    assert_eq!(t.to_vec::<i64>(), vec![big, -3, 0]);
    assert_eq!(t.to_vec::<f64>()[1], -3.0);
    assert_eq!(Tensor::scalar(7i64).item(), 7.0);
    assert_eq!(
        format!("{}", Tensor::from_vec(vec![1i64, -20], &[2])),
        "tensor([  1, -20], shape=[2], dtype=i64)"
    );
    assert_eq!(
        Tensor::arange(0.0, 4.0, 1.0, DType::I64).to_vec::<i64>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        Tensor::full(&[2], 3.0, DType::I64).to_vec::<i64>(),
        vec![3, 3]
    );
}

#[test]
fn casts_truncate_toward_zero_and_have_no_derivative() {
    let x = Tensor::from_vec(vec![-1.7f32, 2.9, 0.5], &[3]);
    assert_eq!(x.to_dtype(DType::I64).to_vec::<i64>(), vec![-1, 2, 0]);
    let back = Tensor::from_vec(vec![-1i64, 2], &[2]).to_dtype(DType::F32);
    assert_eq!(back.to_vec::<f32>(), vec![-1.0, 2.0]);

    let w = x.requires_grad();
    let msg = panic_message(|| {
        let cut = w.to_dtype(DType::I64).to_dtype(DType::F32);
        drop((&cut * &w).sum().backward());
    });
    assert!(msg.contains("to_dtype has no derivative"), "{msg}");
}

#[test]
fn argmax_and_argmin_return_indices() {
    let x = Tensor::from_vec(vec![0.1f32, 0.7, 0.2, 0.9, 0.05, 0.05], &[2, 3]);
    let am = x.argmax(1);
    assert_eq!(am.dtype(), DType::I64);
    assert_eq!(am.to_vec::<i64>(), vec![1, 0]);
    assert_eq!(x.argmin(1).to_vec::<i64>(), vec![0, 1]);
    // Comparing predictions with labels gives an integer mask.
    let labels = Tensor::from_vec(vec![1i64, 2], &[2]);
    let hits = am.eq(&labels);
    assert_eq!(hits.dtype(), DType::I64);
    assert_eq!(hits.to_vec::<i64>(), vec![1, 0]);
    // Anomaly detection looks at float results only.
    let found = detect_anomaly(|| x.argmax(0).to_vec::<i64>()).unwrap();
    assert_eq!(found, vec![1, 0, 0]);
}

#[test]
fn comparisons_with_fractional_scalars_are_exact_on_integers() {
    let t = Tensor::from_vec(vec![1i64, 2, 3], &[3]);
    assert_eq!(t.lt_scalar(2.5).to_vec::<i64>(), vec![1, 1, 0]);
    assert_eq!(t.ge_scalar(2.0).to_vec::<i64>(), vec![0, 1, 1]);
    assert_eq!(t.lt_scalar(2.5).dtype(), DType::I64);
}

#[test]
fn an_integer_meeting_a_float_promotes_to_the_float() {
    let i = Tensor::from_vec(vec![1i64, 2], &[2]);
    let f = Tensor::from_vec(vec![0.5f32, 0.25], &[2]);
    let s = &i + &f;
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(s.to_vec::<f32>(), vec![1.5, 2.25]);
    assert_eq!((&f * &i).dtype(), DType::F32);
    let joined = Tensor::cat(&[&i, &f], 0);
    assert_eq!(joined.dtype(), DType::F32);
    assert_eq!(joined.to_vec::<f32>(), vec![1.0, 2.0, 0.5, 0.25]);
    let ints = Tensor::cat(&[&i, &i], 0);
    assert_eq!(ints.dtype(), DType::I64);
    assert_eq!(ints.to_vec::<i64>(), vec![1, 2, 1, 2]);
}

#[test]
fn float_ops_and_gradients_refuse_integers_with_advice() {
    let i = Tensor::from_vec(vec![1i64, 2], &[2]);
    for msg in [
        panic_message(|| drop(i.exp())),
        panic_message(|| drop(i.mean())),
        panic_message(|| drop(&i * &i)),
    ] {
        assert!(
            msg.contains("i64") && msg.contains(".to_dtype(DType::F32)"),
            "{msg}"
        );
    }
    let msg = panic_message(|| drop(i.requires_grad()));
    assert!(
        msg.contains("requires_grad: only float tensors can require gradients"),
        "{msg}"
    );
}

#[test]
fn integer_sums_and_running_sums_and_products_are_exact_and_wrap() {
    // Past 2⁵³, where a sum through f64 rounds; wrapping past 2⁶³, as PyTorch's int64.
    let big = (1i64 << 53) + 1;
    let t = Tensor::from_vec(vec![big, 2, -5, i64::MAX, 1, 3], &[2, 3]);
    assert_eq!(
        t.sum_axes(&[1], false).to_vec::<i64>(),
        [big - 3, i64::MIN + 3]
    );
    assert_eq!(
        t.sum_axes(&[0], true).to_vec::<i64>(),
        [big.wrapping_add(i64::MAX), 3, -2]
    );
    assert_eq!(t.sum_axes(&[0], true).shape(), &[1, 3]);
    assert_eq!(t.sum().dtype(), DType::I64);
    // Non-contiguous axes and a transposed view.
    let cube = Tensor::arange(0.0, 24.0, 1.0, DType::I64).reshape(&[2, 3, 4]);
    assert_eq!(cube.sum_axes(&[0, 2], false).to_vec::<i64>(), [60, 92, 124]);
    assert_eq!(cube.transpose(0, 2).sum_axes(&[2], false).shape(), &[4, 3]);
    assert_eq!(
        Tensor::zeros(&[0, 2], DType::I64)
            .sum_axes(&[0], false)
            .to_vec::<i64>(),
        [0, 0]
    );
    assert_eq!(
        t.cumsum(1).to_vec::<i64>(),
        [big, big + 2, big - 3, i64::MAX, i64::MIN, i64::MIN + 3]
    );
    assert_eq!(
        t.cumsum(0).to_vec::<i64>(),
        [big, 2, -5, big.wrapping_add(i64::MAX), 3, -2]
    );
    let p = Tensor::from_vec(vec![3i64, 1 << 31, 1 << 31, 5], &[4]);
    assert_eq!(
        p.cumprod(0).to_vec::<i64>(),
        [3, 3 << 31, -(1 << 62), (-(1i64 << 62)).wrapping_mul(5)]
    );
    assert_eq!(t.cumsum(1).dtype(), DType::I64);
}

#[test]
fn views_and_selection_keep_integers() {
    let t = Tensor::from_vec((0..6i64).collect(), &[2, 3]);
    assert_eq!(
        t.transpose(0, 1).contiguous().to_vec::<i64>(),
        vec![0, 3, 1, 4, 2, 5]
    );
    assert_eq!(t.t().reshape(&[6]).to_vec::<i64>(), vec![0, 3, 1, 4, 2, 5]);
    assert_eq!(t.narrow(1, 1, 2).to_vec::<i64>(), vec![1, 2, 4, 5]);
    let picked = t.index_select(1, &[2, 0]);
    assert_eq!(picked.dtype(), DType::I64);
    assert_eq!(picked.to_vec::<i64>(), vec![2, 0, 5, 3]);
}

#[test]
fn index_select_takes_an_i64_index_tensor() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).requires_grad();
    let idx = Tensor::from_vec(vec![2i64, 0, 2], &[3]);
    let y = x.index_select(0, &idx);
    assert_eq!(y.to_vec::<f32>(), vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    let g = y.sum().backward().get(&x).unwrap();
    assert_eq!(g.to_vec::<f32>(), vec![1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
    // The same with usize positions, as slices, arrays and vectors.
    assert_eq!(
        x.index_select(0, &vec![2usize, 0, 2]).to_vec::<f32>(),
        y.to_vec::<f32>()
    );

    let negative = Tensor::from_vec(vec![-1i64], &[1]);
    let err = x.try_index_select(0, &negative).unwrap_err().to_string();
    assert!(err.contains("negative index -1"), "{err}");
    let float = Tensor::from_vec(vec![0.0f32], &[1]);
    let err = x.try_index_select(0, &float).unwrap_err().to_string();
    assert!(err.contains("must be a 1-d i64 tensor"), "{err}");
    let past = Tensor::from_vec(vec![3i64], &[1]);
    assert!(x.try_index_select(0, &past).is_err());
}

#[test]
fn class_index_targets_match_one_hot_targets() {
    let logits = Tensor::from_vec(
        vec![
            2.0f64, -1.0, 0.5, 0.1, 0.2, 3.0, -2.0, 1.0, 0.0, 0.3, 0.3, 0.3,
        ],
        &[4, 3],
    )
    .requires_grad();
    let labels = Tensor::from_vec(vec![0i64, 2, 1, 2], &[4]);
    let hot = one_hot(&[0usize, 2, 1, 2], 3).to_dtype(DType::F64);
    for loss in [
        Box::new(SoftmaxCrossEntropy::new()) as Box<dyn Loss>,
        Box::new(Nll::new()),
    ] {
        let by_index = loss.loss(&logits, &labels);
        let by_rows = loss.loss(&logits, &hot);
        assert!((by_index.item() - by_rows.item()).abs() < 1e-12);
        let gi = by_index.backward().get(&logits).unwrap();
        let gr = by_rows.backward().get(&logits).unwrap();
        assert!(gi.allclose(&gr, 0.0, 1e-12), "{}", loss.name());
    }
    let msg = panic_message(|| {
        drop(SoftmaxCrossEntropy::new().loss(&logits, &Tensor::from_vec(vec![0i64, 3, 1, 2], &[4])))
    });
    assert!(
        msg.contains("SoftmaxCrossEntropy: class index 3 is not a class of 0..3"),
        "{msg}"
    );
    let msg =
        panic_message(|| drop(Nll::new().loss(&logits, &Tensor::from_vec(vec![0i64, 1], &[2]))));
    assert!(msg.contains("do not fit scores of shape [4, 3]"), "{msg}");
}

#[test]
fn a_model_trains_on_class_indices() {
    let x = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 0.1, 0.1, 1.0], &[4, 2]);
    let y = Tensor::from_vec(vec![0i64, 1, 0, 1], &[4]);
    let net = Net::new(vec![Box::new(Dense::new(2, 2))]);
    let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.1));
    let mut last = f32::INFINITY;
    for _ in 0..50 {
        let pred = model.forward(&x);
        let (loss, grads) = model.backward(&pred, &y);
        model.apply_grads(&grads);
        last = loss;
    }
    assert!(last < 0.1, "loss after 50 steps: {last}");
    assert_eq!(
        model.forward(&x).argmax(1).to_vec::<i64>(),
        vec![0, 1, 0, 1]
    );
}

#[test]
fn embedding_looks_up_i64_ids() {
    let e = Embedding::new(5, 3);
    let ids = Tensor::from_vec(vec![4i64, 0, 4, 1], &[2, 2]);
    let out = Layer::forward(&e, &ids, Mode::Eval);
    assert_eq!(out.shape(), &[2, 2, 3]);
    let table = e.params()[0].1.tensor();
    assert_eq!(
        out.reshape(&[4, 3]).narrow(0, 0, 1).to_vec::<f32>(),
        table.narrow(0, 4, 1).to_vec::<f32>()
    );
}

#[test]
fn batch_norm_counts_batches_in_an_i64_buffer() {
    let bn = BatchNorm1d::new(2);
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 5.0], &[2, 2]);
    for _ in 0..3 {
        drop(Layer::forward(&bn, &x, Mode::Train));
    }
    let state: HashMap<String, Tensor> = bn.state().into_iter().collect();
    let count = &state["num_batches_tracked"];
    assert_eq!(count.dtype(), DType::I64);
    assert_eq!(count.to_vec::<i64>(), vec![3]);
    // The count stays an integer when the layer runs in f64, and gets no gradient.
    for (_, p) in bn.buffers() {
        p.set_dtype(DType::F64);
    }
    assert_eq!(state_of(&bn)["num_batches_tracked"].dtype(), DType::I64);
    let xw = x.to_dtype(DType::F64).requires_grad();
    drop(Layer::forward(&bn, &xw, Mode::Train).sum().backward());

    // A count saved as a float by an earlier version loads when it is whole.
    let mut old = state_of(&bn);
    old.insert("num_batches_tracked".into(), Tensor::scalar(7.0f64));
    bn.load_state(&old).unwrap();
    assert_eq!(
        state_of(&bn)["num_batches_tracked"].to_vec::<i64>(),
        vec![7]
    );
    old.insert("num_batches_tracked".into(), Tensor::scalar(7.5f64));
    assert!(bn.load_state(&old).is_err());
}

fn state_of(m: &dyn Module) -> HashMap<String, Tensor> {
    m.state().into_iter().collect()
}

#[test]
fn i64_tensors_round_trip_through_safetensors() {
    let path = scratch("i64_round_trip").join("t.safetensors");
    let big = i64::MAX - 1;
    let t = Tensor::from_vec(vec![big, -5], &[2]);
    save_tensors(&path, &[("t".into(), t)], HashMap::new()).unwrap();
    let (loaded, _) = load_tensors(&path).unwrap();
    assert_eq!(loaded["t"].dtype(), DType::I64);
    assert_eq!(loaded["t"].to_vec::<i64>(), vec![big, -5]);
}

#[test]
fn convolutions_refuse_integer_operands_naming_them() {
    // As PyTorch, and as the Python package: an integer image is converted by the caller, not
    // promoted silently.
    let ints = Tensor::from_vec(vec![1i64; 16], &[1, 1, 4, 4]);
    let floats = Tensor::ones(&[1, 1, 3, 3], DType::F32);
    let opts = ConvOpts::new();
    let msg = panic_message(|| drop(ints.conv2d(&floats, &opts)));
    assert!(msg.starts_with("conv2d: the input is i64"), "{msg}");
    let w = Tensor::from_vec(vec![1i64; 9], &[1, 1, 3, 3]);
    let x = Tensor::ones(&[1, 1, 4, 4], DType::F64);
    let msg = panic_message(|| drop(x.conv2d(&w, &opts)));
    assert!(msg.starts_with("conv2d: the weight is i64"), "{msg}");
    let msg = panic_message(|| drop(ints.conv_transpose2d(&floats, &opts)));
    assert!(
        msg.starts_with("conv_transpose2d: the input is i64"),
        "{msg}"
    );
}
