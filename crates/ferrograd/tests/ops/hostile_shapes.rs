//! Shapes whose element counts or offsets overflow `usize`: every one is a clean `Err` or a
//! panic with a message, never a wild read or write. A memory error here would kill this test
//! binary with a signal instead of failing one test.

use std::panic::{catch_unwind, AssertUnwindSafe};

use ferrograd::prelude::*;
use proptest::prelude::*;

const HUGE: usize = (1 << 63) + 1;

/// Runs `f`, expecting a panic whose message contains `needle`.
fn panics_with(needle: &str, f: impl FnOnce()) {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        msg.contains(needle),
        "panic message {msg:?} lacks {needle:?}"
    );
}

#[test]
fn creation_refuses_overflowing_shapes() {
    let err = Tensor::try_from_vec(vec![1.0f32, 2.0], &[HUGE, 2]).unwrap_err();
    assert!(err.to_string().contains("more elements than fit"), "{err}");
    panics_with("from_vec", || {
        drop(Tensor::from_vec(vec![1.0f32, 2.0], &[HUGE, 2]))
    });
    panics_with("full", || {
        drop(Tensor::zeros(&[1 << 62, 1 << 62], DType::F32))
    });
    panics_with("randn", || {
        drop(Tensor::randn(
            &[1 << 62, 8],
            DType::F32,
            &mut rand::thread_rng(),
        ))
    });
    panics_with("arange", || {
        drop(Tensor::arange(0.0, f64::INFINITY, 1.0, DType::F32))
    });
    panics_with("arange", || {
        drop(Tensor::arange(0.0, 1e300, 1.0, DType::F64))
    });
}

#[test]
fn views_refuse_overflowing_shapes() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1]);
    assert!(a.try_broadcast_to(&[HUGE, 1]).is_err());
    // Shapes that broadcast, but whose element count overflows.
    let one = Tensor::ones(&[1, 1], DType::F32);
    let err = one.try_broadcast_to(&[1 << 62, 1 << 62]).unwrap_err();
    assert!(err.to_string().contains("broadcast_to"), "{err}");
    assert!(a.try_broadcast_to(&[1 << 62, 2, 1 << 62]).is_err());
    assert!(a.try_reshape(&[HUGE, 2]).is_err());
    // 2^62 · 2^62 · 4 wraps to 0 in a wrapping product: an empty tensor must not take it.
    let empty = Tensor::zeros(&[0], DType::F32);
    assert!(empty.try_reshape(&[1 << 62, 1 << 62, 4]).is_err());
    panics_with("flatten_from", || {
        drop(Tensor::zeros(&[0, 1 << 32, 1 << 32], DType::F32).flatten_from(1))
    });
    panics_with("pad", || drop(a.pad(&[(1 << 63, 1 << 63), (0, 0)], 0.0)));
    let wide = one.broadcast_to(&[1, 1 << 62]);
    let err = Tensor::try_cat(&[&wide, &wide, &wide, &wide], 0).unwrap_err();
    assert!(err.to_string().contains("cat"), "{err}");
    // narrow with a start that wraps when the length is added.
    let view = Tensor::arange(0.0, 12.0, 1.0, DType::F32)
        .reshape(&[4, 3])
        .narrow(0, 2, 2);
    panics_with("narrow", || drop(view.narrow(0, usize::MAX, 2)));
    panics_with("narrow", || drop(view.narrow(1, 2, usize::MAX)));
}

#[test]
fn products_of_broadcast_views_refuse_overflowing_outputs() {
    // Stride-0 views of 2^40 elements are legitimate; their product has 2^80 elements.
    let col = Tensor::ones(&[1, 1], DType::F32).broadcast_to(&[1 << 40, 1]);
    let row = Tensor::ones(&[1, 1], DType::F32).broadcast_to(&[1, 1 << 40]);
    let err = col.try_matmul(&row).unwrap_err();
    assert!(err.to_string().contains("matmul"), "{err}");
    panics_with("matmul", || drop(col.matmul(&row)));
    panics_with("more elements than fit", || drop(&col + &row));
    panics_with("more elements than fit", || drop(&col * &row));
    let bias = Tensor::ones(&[1], DType::F32).broadcast_to(&[1 << 40]);
    for bias in [Some(&bias), None] {
        let err = col.try_linear(&col, bias).unwrap_err();
        assert!(err.to_string().contains("linear"), "{err}");
    }
    // A batch of 2^40 empty products is empty, not a loop over 2^40 batches.
    let a = Tensor::zeros(&[1, 0, 3], DType::F32).broadcast_to(&[1 << 40, 0, 3]);
    let b = Tensor::zeros(&[1, 3, 2], DType::F32).broadcast_to(&[1 << 40, 3, 2]);
    assert_eq!(a.matmul(&b).shape(), &[1 << 40, 0, 2]);
    // An empty inner dimension: 2^24 products of nothing are zeros at once (it took seconds,
    // one empty product per batch entry), and their gradients are empty.
    let a = Tensor::zeros(&[1 << 24, 1, 0], DType::F32).requires_grad();
    let b = Tensor::zeros(&[1, 0, 1], DType::F32).requires_grad();
    let y = a.matmul(&b);
    assert_eq!(y.shape(), &[1 << 24, 1, 1]);
    assert!(y.sum().item() == 0.0);
    let g = y.sum().backward();
    assert_eq!(g.get(&b).unwrap().shape(), &[1, 0, 1]);
}

#[test]
fn zero_size_axes_with_huge_neighbours_stay_empty() {
    let t = Tensor::zeros(&[1 << 40, 0], DType::F32);
    assert_eq!(t.numel(), 0);
    assert_eq!(t.transpose(0, 1).shape(), &[0, 1 << 40]);
    assert_eq!(t.reshape(&[0, 1 << 50]).numel(), 0);
    assert_eq!(
        format!("{t}"),
        "tensor([], shape=[1099511627776, 0], dtype=f32)"
    );
    // The zero may come last: the count is still 0, whatever the order of the axes.
    let z = Tensor::zeros(&[1 << 40, 1 << 40, 0], DType::F32);
    assert_eq!(z.numel(), 0);
    let b = Tensor::zeros(&[0, 1, 1], DType::F32)
        .broadcast_to(&[0, 1 << 40, 1 << 40])
        .permute(&[1, 2, 0]);
    assert_eq!(b.shape(), &[1 << 40, 1 << 40, 0]);
    assert_eq!(b.sum().item(), 0.0);
    // The shape rules count such a tensor as empty too.
    assert_eq!(z.flatten_from(0).shape(), &[0]);
    assert_eq!(z.pad(&[(0, 0), (0, 0), (0, 0)], 0.0).shape(), z.shape());
    assert_eq!(Tensor::cat(&[&z, &z], 2).shape(), &[1 << 40, 1 << 40, 0]);
    let m = Tensor::zeros(&[1 << 40, 1 << 40, 0, 3], DType::F32);
    let y = m.matmul(&Tensor::zeros(&[3, 2], DType::F32));
    assert_eq!(y.shape(), &[1 << 40, 1 << 40, 0, 2]);
    // An empty narrow may start past the end of its (empty) storage: read, reshaped and
    // summed, it is still nothing.
    let past = Tensor::zeros(&[0, 3], DType::F32).narrow(1, 3, 0);
    assert!(past.to_vec::<f32>().is_empty());
    assert_eq!(past.reshape(&[0]).sum().item(), 0.0);
    assert_eq!((&past + 1.0).shape(), &[0, 0]);
    // Reducing the empty axis away asks for 2^59 zeros: a panic naming the op, not an abort
    // (for floats and integers alike).
    for dtype in [DType::F32, DType::I64] {
        let e = Tensor::zeros(&[0, 1 << 30, 1 << 29], dtype);
        let msg = crate::common::panic_message(|| drop(e.sum_axes(&[0], false)));
        assert!(msg.contains("cannot allocate"), "{msg}");
    }
}

#[test]
fn an_idx_header_whose_count_is_the_largest_usize_is_an_error() {
    // 3·5·17·257·641·65537·6700417 = 2^64 − 1.
    let dims = [3u32, 5, 17, 257, 641, 65537, 6700417];
    let mut bytes = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        bytes.extend_from_slice(&d.to_be_bytes());
    }
    let err = ferrograd::data::parse_idx_u8(&bytes).unwrap_err();
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn a_huge_padding_costs_no_more_than_the_output() {
    // Stride 100 over a padding of 20,000: a 401×401 output that reads the one input pixel
    // once. Only the output (and no padded copy of the image) may be allocated.
    let x = Tensor::from_vec(vec![5.0f32], &[1, 1, 1, 1]);
    let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4, 1, 1, 1]);
    let y = x.conv2d(&w, &ConvOpts::new().padding(20_000).stride(100));
    assert_eq!(y.shape(), [1, 4, 401, 401]);
    let at = |o: usize| y.narrow(1, o, 1).narrow(2, 200, 1).narrow(3, 200, 1).item();
    assert_eq!([at(0), at(1), at(2), at(3)], [5.0, 10.0, 15.0, 20.0]);
    assert_eq!(y.sum().item(), 50.0);
}

#[test]
fn convolutions_of_empty_batches_with_huge_strides_return_at_once() {
    // An empty batch lets the image and the stride be astronomically large at no memory cost:
    // planning the products (one per output phase of a transposed convolution) must cost what
    // the kernel does, not what the stride or the image does. Enough channels for the
    // channels-last kernels, and rows short enough for them.
    let w = Tensor::zeros(&[16, 16, 1, 1], DType::F32);
    let x = Tensor::zeros(&[0, 16, 1 << 50, 4], DType::F32);
    let o = ConvOpts::new().stride_hw(1 << 45, 1);
    assert_eq!(x.conv2d(&w, &o).shape(), &[0, 16, 32, 4]);
    let u = Tensor::zeros(&[0, 16, 2, 2], DType::F32);
    let o = ConvOpts::new().stride_hw(1 << 50, 1);
    assert_eq!(
        u.conv_transpose2d(&w, &o).shape(),
        &[0, 16, (1 << 50) + 1, 2]
    );
    // One channel takes the column path, whose chunks are sized by an output plane of 2⁶³
    // positions here; forward and backward.
    let u = Tensor::zeros(&[0, 1, 2, 1], DType::F32).requires_grad();
    let w1 = Tensor::ones(&[1, 2, 1, 1], DType::F32).requires_grad();
    let o = ConvOpts::new()
        .stride(usize::MAX / 2)
        .padding(1)
        .output_padding(2);
    let y = u.conv_transpose2d(&w1, &o);
    assert_eq!(y.shape(), &[0, 2, 1 << 63, 1]);
    let grads = y.sum().backward();
    assert_eq!(
        grads.get(&w1).map(|g| g.to_vec::<f32>()),
        Some(vec![0.0, 0.0])
    );
    let x = Tensor::zeros(&[0, 16, 1 << 40, 1 << 40], DType::F32);
    let dy = Tensor::zeros(&[0, 16, 1 << 40, 16], DType::F32);
    let o = ConvOpts::new().stride_hw(1, 1 << 36);
    assert_eq!(x.conv2d_weight(&dy, (1, 1), &o).shape(), &[16, 16, 1, 1]);
}

#[test]
fn recurrent_layers_with_nothing_to_carry_do_no_steps() {
    // An empty batch over 2^40 steps: every output is empty, at once.
    let x = Tensor::zeros(&[0, 1 << 40, 3], DType::F32);
    let (out, (h, c)) = Lstm::new(3, 4).forward_seq(&x, None);
    assert_eq!(
        (out.shape(), h.shape(), c.shape()),
        (&[0, 1 << 40, 4][..], &[1, 0, 4][..], &[1, 0, 4][..])
    );
    let (out, h) = Gru::new(3, 4).forward_seq(&x, None);
    assert_eq!(
        (out.shape(), h.shape()),
        (&[0, 1 << 40, 4][..], &[1, 0, 4][..])
    );
    // An empty batch still trains: its backward gives zero gradients to every input and
    // parameter (a data-parallel rank can be handed an empty shard).
    let x = Tensor::zeros(&[0, 5, 3], DType::F32).requires_grad();
    let lstm = Lstm::new(3, 4);
    let (out, (h, c)) = lstm.forward_seq(&x, None);
    let loss = &(&out.sum() + &h.sum()) + &c.sum();
    let grads = loss.backward();
    assert_eq!(grads.get(&x).unwrap().shape(), [0, 5, 3]);
    for p in lstm.params() {
        let g = grads
            .get_param(&p.1)
            .expect("a gradient for every parameter");
        assert_eq!(g.shape(), p.1.tensor().shape());
        assert!(g.to_vec::<f32>().iter().all(|&v| v == 0.0));
    }
    let gru = Gru::new(3, 4);
    let (out, h) = gru.forward_seq(&x, None);
    let grads = (&out.sum() + &h.sum()).backward();
    assert_eq!(grads.get(&x).unwrap().shape(), [0, 5, 3]);
    // No hidden units: cells of width zero.
    let (gates, state) = (
        Tensor::zeros(&[2, 0], DType::F32),
        Tensor::zeros(&[2, 0], DType::F32),
    );
    let (h, c) = Tensor::lstm_cell(&gates, &gates, &state);
    assert_eq!((h.shape(), c.shape()), (&[2, 0][..], &[2, 0][..]));
    assert_eq!(Tensor::gru_cell(&gates, &gates, &state).shape(), [2, 0]);
}

#[test]
fn batch_norm_refuses_a_single_value_per_channel() {
    let w = Tensor::ones(&[3], DType::F32);
    panics_with("batch_norm", || {
        drop(Tensor::zeros(&[1, 3], DType::F32).batch_norm(&w, &w, 1e-5));
    });
    panics_with("[0, 3, 2]", || {
        drop(Tensor::zeros(&[0, 3, 2], DType::F32).batch_norm(&w, &w, 1e-5));
    });
}

#[test]
fn a_huge_dilation_with_its_padding_allocates_only_what_the_output_needs() {
    // Dilation 2^40 with padding 2^40: every output sees only the centre tap, on a 5×5 image
    // padded to 2^41 + 5 a side. No padded copy of that size may be made, in any kernel.
    let big = 1usize << 40;
    for (c, o, dtype) in [(1, 4, DType::F32), (16, 16, DType::F32), (2, 8, DType::F64)] {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(3);
        let x = Tensor::randn(&[2, c, 5, 5], dtype, &mut rng).requires_grad();
        let w = Tensor::randn(&[o, c, 3, 3], dtype, &mut rng).requires_grad();
        let opts = ConvOpts::new().dilation(big).padding(big);
        let y = x.conv2d(&w, &opts);
        assert_eq!(y.shape(), [2, o, 5, 5]);
        let centre = w.narrow(2, 1, 1).narrow(3, 1, 1);
        let want = x.conv2d(&centre, &ConvOpts::new());
        let diff = (&y - &want).abs().max().item();
        assert!(diff < 1e-5, "{c}→{o} {dtype:?}: off by {diff}");
        // Both gradients run through the same kernels with the same geometry.
        let grads = y.sum().backward();
        assert_eq!(grads.get(&x).unwrap().shape(), x.shape());
        assert_eq!(grads.get(&w).unwrap().shape(), w.shape());
    }
}

#[test]
fn pooling_windows_far_larger_than_the_input_cost_what_the_input_does() {
    // A 2^35 kernel on a 1×1 image, padded to fit: every window holds the one pixel.
    let k = 1usize << 35;
    let x = Tensor::from_vec(vec![7.0f32], &[1, 1, 1, 1]).requires_grad();
    let y = x.max_pool2d(k, 1, k / 2);
    assert_eq!(y.shape(), [1, 1, 2, 2]);
    assert_eq!(y.to_vec::<f32>(), [7.0; 4]);
    assert_eq!(y.sum().backward().get(&x).unwrap().item(), 4.0);
    // An adaptive output of 2^40 rows: a clean panic naming the op, not an abort.
    let x = Tensor::ones(&[1, 1, 4, 4], DType::F32);
    panics_with("adaptive_avg_pool2d", || {
        x.adaptive_avg_pool2d(1 << 40, 1);
    });
    panics_with("adaptive_avg_pool2d", || {
        x.adaptive_avg_pool2d(1 << 62, 1 << 62);
    });
}

#[test]
fn products_of_huge_batches_are_errors_before_any_table_is_built() {
    // 2^40 products of 3×0 by 0×4: a 48 TB output of zeros. try_matmul returns the error;
    // nothing is allocated per product first.
    let a = Tensor::zeros(&[1 << 40, 3, 0], DType::F32);
    let b = Tensor::zeros(&[1 << 40, 0, 4], DType::F32);
    let err = a.try_matmul(&b).expect_err("too large to hold").to_string();
    assert!(err.contains("cannot allocate"), "{err}");
    // Empty products with a huge batch cost nothing.
    let a = Tensor::zeros(&[1 << 40, 0, 3], DType::F32);
    let b = Tensor::zeros(&[1, 3, 4], DType::F32);
    assert_eq!(a.matmul(&b).shape(), [1 << 40, 0, 4]);
}

#[test]
fn loaders_refuse_what_is_not_a_regular_file() {
    use ferrograd::data::read_idx_u8;
    use ferrograd::io::load_tensors;
    let dir = std::env::temp_dir().join(format!("ferrograd-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", fifo.display());
    for path in [std::path::Path::new("/dev/zero"), &fifo, &dir] {
        let err = load_tensors(path).expect_err("refused").to_string();
        assert!(
            err.contains("regular file") || err.contains("directory"),
            "{err}"
        );
        let err = read_idx_u8(path).expect_err("refused").to_string();
        assert!(
            err.contains("regular file") || err.contains("directory"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_graph_takes_many_variables_at_constant_cost_each() {
    // Name uniqueness is a set lookup: 50,000 variables, then a repeated name refused.
    let g = Graph::new();
    for i in 0..50_000 {
        g.variable(&format!("v{i}"), Tensor::scalar(i as f32));
    }
    panics_with("already has a variable named \"v7\"", || {
        g.variable("v7", Tensor::scalar(0.0f32));
    });
}

/// A geometry value: small, or far beyond any real image.
fn geometry() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..4,
        1 => Just(1usize << 20),
        1 => Just(1usize << 40),
        1 => Just(usize::MAX / 2),
        1 => Just(usize::MAX),
    ]
}

/// Runs `op` on hostile geometry: a result of the size the geometry implies, or a panic whose
/// message names the op, never an internal message (slice ranges, overflow, unwraps).
fn clean(name: &str, op: impl FnOnce() -> Tensor) -> Result<(), TestCaseError> {
    // Small results are differentiated too: the backward kernels walk the same geometry.
    let forward_and_back = || {
        let y = op();
        if y.numel() <= 1 << 16 && y.is_tracked() {
            drop(y.sum().backward());
        }
        y
    };
    match catch_unwind(AssertUnwindSafe(forward_and_back)) {
        Ok(y) => prop_assert!(y.numel() <= 1 << 28, "{name}: output {:?}", y.shape()),
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let internal = [
                "out of range for slice",
                "index out of bounds",
                "capacity overflow",
                "attempt to",
                "unwrap()",
            ];
            prop_assert!(msg.starts_with(name), "{name}: {msg}");
            prop_assert!(!internal.iter().any(|i| msg.contains(i)), "{name}: {msg}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::common::proptest_config(256))]

    #[test]
    fn hostile_geometry_gives_a_result_or_a_message_naming_the_op(
        (n, c, h, w) in (0usize..3, 1usize..3, 0usize..6, 0usize..6),
        (k, stride, padding, dilation, extra) in (geometry(), geometry(), geometry(), geometry(), geometry()),
        small_k in 1usize..4,
    ) {
        let x = Tensor::ones(&[n, c, h, w], DType::F32).requires_grad();
        let weight = Tensor::ones(&[2, c, small_k, small_k], DType::F32).requires_grad();
        let opts = ConvOpts::new().stride(stride).padding(padding).dilation(dilation);
        clean("conv2d", || x.conv2d(&weight, &opts))?;
        let weight_t = Tensor::ones(&[c, 2, small_k, small_k], DType::F32).requires_grad();
        let opts_t = opts.output_padding(extra);
        clean("conv_transpose2d", || x.conv_transpose2d(&weight_t, &opts_t))?;
        clean("max_pool2d", || x.max_pool2d(k, stride, padding))?;
        clean("avg_pool2d", || x.avg_pool2d(k, stride, padding))?;
        clean("adaptive_avg_pool2d", || x.adaptive_avg_pool2d(k, extra))?;
        clean("pad", || x.pad(&[(0, 0), (0, 0), (padding, extra), (k, 0)], 0.0))?;
    }
}
