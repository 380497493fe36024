//! Convolution, pooling, 2-d normalization and recurrent layers: PyTorch's names, shapes and
//! equations (the recurrent cells against a step written out here from PyTorch's
//! documentation), derivatives in f64 to second order, and a small CNN that learns.

use crate::common::{randn, turn};
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn names(m: &dyn Module) -> Vec<String> {
    m.state_params().into_iter().map(|(n, _)| n).collect()
}

fn shapes(m: &dyn Module) -> Vec<Vec<usize>> {
    m.params().iter().map(|(_, p)| p.shape()).collect()
}

fn to_f64(m: &dyn Module) {
    for (_, p) in m.state_params() {
        p.set_dtype(DType::F64);
    }
}

fn assert_close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    for (x, y) in a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn conv_layers_have_pytorchs_parameters() {
    let c = Conv2D::new(1, 8, 3).stride(1).padding(1);
    assert_eq!(names(&c), ["weight", "bias"]);
    assert_eq!(shapes(&c), [vec![8, 1, 3, 3], vec![8]]);
    let g = Conv2D::new(4, 6, 3).groups(2).without_bias();
    assert_eq!(shapes(&g), [vec![6, 2, 3, 3]]);
    let t = ConvTranspose2D::new(16, 8, 4).stride(2).padding(1);
    assert_eq!(shapes(&t), [vec![16, 8, 4, 4], vec![8]]);
    // PyTorch's default bound: 1/√fan_in = 1/3 for 1 input channel and a 3×3 kernel.
    let w = c.weight().tensor().to_vec::<f32>();
    assert!(w.iter().all(|v| v.abs() <= 1.0 / 3.0) && w.iter().any(|v| v.abs() > 0.2));
    // Forward: the convolution plus the bias per channel.
    let x = Tensor::randn(&[2, 1, 5, 5], DType::F32, &mut StdRng::seed_from_u64(1));
    let y = c.forward(&x, Mode::Train);
    let (w, b) = (c.params()[0].1.tensor(), c.params()[1].1.tensor());
    let want = &x.conv2d(&w, &ConvOpts::new().padding(1)) + &b.reshape(&[1, 8, 1, 1]);
    assert_close(&y, &want, 0.0);
    assert_eq!(
        t.forward(&randn(&[1, 16, 7, 7], 2).to_dtype(DType::F32), Mode::Train)
            .shape(),
        &[1, 8, 14, 14]
    );
    let m = MaxPool2D::new(2, 2).forward(&y, Mode::Train);
    assert_eq!(m.shape(), &[2, 8, 2, 2]);
    assert_close(
        &AvgPool2D::new(2, 2).forward(&y, Mode::Eval),
        &y.avg_pool2d(2, 2, 0),
        0.0,
    );
}

#[test]
fn batchnorm2d_normalises_each_channel_over_batch_and_space() {
    let bn = BatchNorm2d::new(3);
    assert_eq!(
        names(&bn),
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked"
        ]
    );
    to_f64(&bn);
    let x = &randn(&[4, 3, 5, 6], 3) * 2.0 + 1.0;
    let y = bn.forward(&x, Mode::Train);
    let mean = y.mean_axes(&[0, 2, 3], false).to_vec::<f64>();
    let var = y.square().mean_axes(&[0, 2, 3], false).to_vec::<f64>();
    for c in 0..3 {
        assert!(
            mean[c].abs() < 1e-12 && (var[c] - 1.0).abs() < 1e-4,
            "{mean:?} {var:?}"
        );
    }
    // Running statistics: momentum 0.1 towards the batch mean and the unbiased variance.
    let n = (4 * 5 * 6) as f64;
    let bm = x.mean_axes(&[0, 2, 3], false);
    let bv = (&x - &bm.reshape(&[1, 3, 1, 1]))
        .square()
        .mean_axes(&[0, 2, 3], false);
    let state: std::collections::HashMap<String, Tensor> = bn.state().into_iter().collect();
    assert_close(&state["running_mean"], &bm.mul_scalar(0.1), 1e-12);
    assert_close(
        &state["running_var"],
        &bv.mul_scalar(0.1 * n / (n - 1.0)).add_scalar(0.9),
        1e-12,
    );
    assert_eq!(state["num_batches_tracked"].item(), 1.0);
    // Evaluation uses them.
    let e = bn.forward(&x, Mode::Eval);
    let keep = [1, 3, 1, 1];
    let want = &(&x - &state["running_mean"].reshape(&keep))
        / &state["running_var"].reshape(&keep).add_scalar(1e-5).sqrt();
    assert_close(&e, &want, 1e-12);
}

#[test]
fn dropout2d_drops_whole_channels() {
    let _turn = turn();
    manual_seed(5);
    let d = Dropout2d::new(0.5);
    let x = Tensor::ones(&[4, 8, 3, 3], DType::F32);
    let y = d.forward(&x, Mode::Train).to_vec::<f32>();
    let mut dropped = 0;
    for ch in y.chunks(9) {
        assert!(ch.iter().all(|&v| v == ch[0]) && (ch[0] == 0.0 || ch[0] == 2.0));
        dropped += (ch[0] == 0.0) as usize;
    }
    assert!(
        dropped > 4 && dropped < 28,
        "{dropped} of 32 channels dropped"
    );
    assert_eq!(d.forward(&x, Mode::Eval).to_vec::<f32>(), x.to_vec::<f32>());
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// `W v + b` for a row-major `[rows, cols]` matrix.
fn affine(w: &[f64], b: &[f64], v: &[f64]) -> Vec<f64> {
    b.iter()
        .enumerate()
        .map(|(r, &bias)| {
            bias + v
                .iter()
                .enumerate()
                .map(|(c, x)| w[r * v.len() + c] * x)
                .sum::<f64>()
        })
        .collect()
}

/// The layer's four tensors for layer 0, as plain vectors.
fn weights(m: &dyn Module) -> [Vec<f64>; 4] {
    let p = m.params();
    std::array::from_fn(|k| p[k].1.tensor().to_vec::<f64>())
}

#[test]
fn recurrent_cells_follow_pytorchs_equations() {
    let (input, hid) = (3, 2);
    let x = randn(&[1, 1, input], 10);
    let h0 = randn(&[1, 1, hid], 11);
    let c0 = randn(&[1, 1, hid], 12);
    let (xv, hv, cv) = (x.to_vec::<f64>(), h0.to_vec::<f64>(), c0.to_vec::<f64>());

    let lstm = LSTM::new(input, hid);
    to_f64(&lstm);
    assert_eq!(
        names(&lstm),
        ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    );
    assert_eq!(shapes(&lstm)[0], [4 * hid, input]);
    let [wi, wh, bi, bh] = weights(&lstm);
    let (gi, gh) = (affine(&wi, &bi, &xv), affine(&wh, &bh, &hv));
    let g: Vec<f64> = gi.iter().zip(&gh).map(|(a, b)| a + b).collect();
    let (mut h1, mut c1) = (vec![], vec![]);
    for k in 0..hid {
        let (i, f) = (sigmoid(g[k]), sigmoid(g[hid + k]));
        let (cand, o) = (g[2 * hid + k].tanh(), sigmoid(g[3 * hid + k]));
        c1.push(f * cv[k] + i * cand);
        h1.push(o * c1[k].tanh());
    }
    let (out, (h, c)) = lstm.forward_seq(&x, Some((h0.clone(), c0.clone())));
    assert_close(&h, &Tensor::from_vec(h1.clone(), &[1, 1, hid]), 1e-12);
    assert_close(&c, &Tensor::from_vec(c1, &[1, 1, hid]), 1e-12);
    assert_close(&out, &Tensor::from_vec(h1, &[1, 1, hid]), 1e-12);

    let gru = GRU::new(input, hid);
    to_f64(&gru);
    assert_eq!(shapes(&gru)[1], [3 * hid, hid]);
    let [wi, wh, bi, bh] = weights(&gru);
    let (gi, gh) = (affine(&wi, &bi, &xv), affine(&wh, &bh, &hv));
    let h1: Vec<f64> = (0..hid)
        .map(|k| {
            let r = sigmoid(gi[k] + gh[k]);
            let z = sigmoid(gi[hid + k] + gh[hid + k]);
            let n = (gi[2 * hid + k] + r * gh[2 * hid + k]).tanh();
            (1.0 - z) * n + z * hv[k]
        })
        .collect();
    let (_, h) = gru.forward_seq(&x, Some(h0.clone()));
    assert_close(&h, &Tensor::from_vec(h1, &[1, 1, hid]), 1e-12);

    let rnn = RNN::new(input, hid);
    to_f64(&rnn);
    let [wi, wh, bi, bh] = weights(&rnn);
    let (gi, gh) = (affine(&wi, &bi, &xv), affine(&wh, &bh, &hv));
    let h1: Vec<f64> = gi.iter().zip(&gh).map(|(a, b)| (a + b).tanh()).collect();
    let (_, h) = rnn.forward_seq(&x, Some(h0));
    assert_close(&h, &Tensor::from_vec(h1, &[1, 1, hid]), 1e-12);
}

#[test]
fn stacked_recurrent_layers_shapes_and_state() {
    let lstm = LSTM::new(10, 32).num_layers(2);
    assert_eq!(names(&lstm)[4], "weight_ih_l1");
    assert_eq!(shapes(&lstm)[4], [128, 32]);
    let x = Tensor::randn(&[3, 5, 10], DType::F32, &mut StdRng::seed_from_u64(4));
    let (out, (h, c)) = lstm.forward_seq(&x, None);
    assert_eq!(
        (out.shape(), h.shape(), c.shape()),
        (&[3, 5, 32][..], &[2, 3, 32][..], &[2, 3, 32][..])
    );
    // The last output is the top layer's final state; feeding the state back continues the
    // sequence exactly.
    assert_close(
        &out.narrow(1, 4, 1).squeeze(1),
        &h.narrow(0, 1, 1).squeeze(0),
        0.0,
    );
    let (whole, _) = lstm.forward_seq(&x, None);
    let (first, state) = lstm.forward_seq(&x.narrow(1, 0, 2), None);
    let (rest, _) = lstm.forward_seq(&x.narrow(1, 2, 3), Some(state));
    assert_close(&Tensor::cat(&[&first, &rest], 1), &whole, 1e-6);
    let (out, h) = GRU::new(10, 32).num_layers(3).forward_seq(&x, None);
    assert_eq!((out.shape(), h.shape()), (&[3, 5, 32][..], &[3, 3, 32][..]));
    // Inside a Net, a recurrent layer returns its outputs.
    let net = Net::new(vec![Box::new(RNN::new(10, 4)), Box::new(Dense::new(4, 1))]);
    assert_eq!(net.forward(&x).shape(), &[3, 5, 1]);
}

#[test]
fn time_first_recurrent_layers_read_and_write_pytorchs_default_layout() {
    let x = Tensor::randn(&[3, 5, 4], DType::F64, &mut StdRng::seed_from_u64(8));
    let gru = Gru::new(4, 6).num_layers(2);
    to_f64(&gru);
    let (out, h) = gru.forward_seq(&x, None);
    // The same weights reading [T, N, F]: the outputs transposed, the state unchanged.
    let gru = gru.batch_first(false);
    let (out_t, h_t) = gru.forward_seq(&x.transpose(0, 1), None);
    assert_eq!(out_t.shape(), &[5, 3, 6]);
    assert_close(&out_t.transpose(0, 1), &out, 0.0);
    assert_close(&h_t, &h, 0.0);
    let lstm = Lstm::new(4, 6).batch_first(false);
    to_f64(&lstm);
    let (seq, (h, _)) = lstm.forward_seq(&x, None);
    assert_eq!((seq.shape(), h.shape()), (&[3, 5, 6][..], &[1, 5, 6][..]));
    assert_close(&Layer::forward(&lstm, &x, Mode::Eval), &seq, 0.0);
    // Stacking keeps the layout; a wrong input names it.
    let rnn = Rnn::new(4, 2).batch_first(false).num_layers(2);
    let msg =
        std::panic::catch_unwind(|| rnn.forward_seq(&Tensor::zeros(&[3, 5], DType::F32), None))
            .expect_err("a 2-d input is refused");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("[T, N, 4] (time first)"), "{msg}");
}

#[test]
fn recurrent_layers_have_first_and_second_derivatives() {
    let opts = GradcheckOptions::default();
    let x = randn(&[2, 3, 3], 20);
    let h0 = randn(&[1, 2, 2], 21);
    let c0 = randn(&[1, 2, 2], 22);
    let lstm = LSTM::new(3, 2);
    to_f64(&lstm);
    let f = |t: &[Tensor]| {
        let (out, (h, c)) = lstm.forward_seq(&t[0], Some((t[1].clone(), t[2].clone())));
        &(&out.sum() + &h.square().sum()) + &c.sum()
    };
    let inputs = [x.clone(), h0.clone(), c0];
    gradcheck(f, &inputs, &opts).unwrap();
    gradgradcheck(f, &inputs, &opts).unwrap();
    let gru = GRU::new(3, 2).num_layers(2);
    to_f64(&gru);
    let h02 = randn(&[2, 2, 2], 23);
    let f = |t: &[Tensor]| {
        let (out, h) = gru.forward_seq(&t[0], Some(t[1].clone()));
        &out.square().sum() + &h.sum()
    };
    gradcheck(f, &[x.clone(), h02.clone()], &opts).unwrap();
    gradgradcheck(f, &[x.clone(), h02], &opts).unwrap();
    let rnn = RNN::new(3, 2);
    to_f64(&rnn);
    let f = |t: &[Tensor]| rnn.forward_seq(&t[0], Some(t[1].clone())).0.square().sum();
    gradcheck(f, &[x.clone(), h0.clone()], &opts).unwrap();
    gradgradcheck(f, &[x, h0], &opts).unwrap();
}

#[test]
fn bidirectional_bias_free_and_relu_stacks_have_first_and_second_derivatives() {
    let opts = GradcheckOptions::default();
    let x = randn(&[2, 3, 3], 30);
    let lstm = LSTM::new(3, 2)
        .num_layers(2)
        .bidirectional(true)
        .bias(false);
    to_f64(&lstm);
    let names: Vec<String> = lstm.params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names[..4],
        [
            "weight_ih_l0",
            "weight_hh_l0",
            "weight_ih_l0_reverse",
            "weight_hh_l0_reverse"
        ]
    );
    assert_eq!(lstm.params()[4].1.shape(), &[8, 4]); // layer 1 reads both directions
    let (h0, c0) = (randn(&[4, 2, 2], 31), randn(&[4, 2, 2], 32));
    let f = |t: &[Tensor]| {
        let (out, (h, c)) = lstm.forward_seq(&t[0], Some((t[1].clone(), t[2].clone())));
        &(&out.square().sum() + &h.sum()) + &c.sum()
    };
    let inputs = [x.clone(), h0, c0];
    gradcheck(f, &inputs, &opts).unwrap();
    gradgradcheck(f, &inputs, &opts).unwrap();
    // Away from ReLU's kink: positive inputs and weights keep every unit active.
    let rnn = RNN::new(3, 2).relu(true).bidirectional(true);
    to_f64(&rnn);
    for (_, p) in rnn.params() {
        p.set(&(&p.tensor().abs() + 0.1));
    }
    let xp = &x.abs() + 0.1;
    let f = |t: &[Tensor]| rnn.forward_seq(&t[0], None).0.square().sum();
    gradcheck(f, std::slice::from_ref(&xp), &opts).unwrap();
    gradgradcheck(f, &[xp], &opts).unwrap();
}

#[test]
fn the_backward_direction_is_the_forward_one_on_the_reversed_sequence() {
    // PyTorch's definition: the reverse direction reads x from its end; its outputs are put
    // back in time order after the forward direction's features.
    let both = GRU::new(3, 4).bidirectional(true);
    let (fwd, bwd) = (GRU::new(3, 4), GRU::new(3, 4));
    let params = both.params();
    for (i, layer) in [&fwd, &bwd].into_iter().enumerate() {
        for (k, (_, p)) in layer.params().into_iter().enumerate() {
            p.set(&params[4 * i + k].1.tensor());
        }
    }
    let x = randn(&[2, 5, 3], 33).to_dtype(DType::F32);
    let (out, h) = both.forward_seq(&x, None);
    let (out_f, h_f) = fwd.forward_seq(&x, None);
    let (out_b, h_b) = bwd.forward_seq(&x.flip(&[1]), None);
    assert_close(&out.narrow(2, 0, 4), &out_f, 1e-6);
    assert_close(&out.narrow(2, 4, 4), &out_b.flip(&[1]), 1e-6);
    assert_close(&h, &Tensor::cat(&[&h_f, &h_b], 0), 1e-6);
    // Dropout between layers: only in training, and never after the last layer.
    let stack = LSTM::new(3, 4).num_layers(2).dropout(0.5);
    let eval = stack.forward_seq_in(&x, None, Mode::Eval).0;
    let again = stack.forward_seq_in(&x, None, Mode::Eval).0;
    assert_close(&eval, &again, 0.0);
    let train = stack.forward_seq_in(&x, None, Mode::Train).0;
    assert!(!train.allclose(&eval, 1e-4, 1e-4));
    assert!(stack.name().contains("dropout=0.5"));
}

#[test]
fn layers_check_their_input() {
    let msg = |f: &dyn Fn()| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let x = Tensor::zeros(&[2, 3, 5, 5], DType::F32);
    let m = msg(&|| drop(Conv2D::new(1, 8, 3).forward(&x, Mode::Train)));
    assert!(
        m.contains("Conv2d(1, 8, 3): expected input [N, 1, H, W]"),
        "{m}"
    );
    let m = msg(&|| drop(BatchNorm2d::new(4).forward(&x, Mode::Train)));
    assert!(m.contains("BatchNorm2d(4)"), "{m}");
    let m =
        msg(&|| drop(LSTM::new(4, 2).forward(&Tensor::zeros(&[2, 3, 5], DType::F32), Mode::Train)));
    assert!(
        m.contains("Lstm(4, 2, num_layers=1): expected input [N, T, 4]"),
        "{m}"
    );
}

#[test]
fn a_small_cnn_learns() {
    let _turn = turn();
    manual_seed(0);
    let net = Net::new(vec![
        Box::new(Conv2D::new(1, 4, 3).padding(1)),
        Box::new(BatchNorm2d::new(4)),
        Box::new(ReLU::new()),
        Box::new(MaxPool2D::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(4 * 4 * 4, 2)),
    ]);
    let mut model = Model::new(net, SoftmaxCrossEntropy::new(), Adam::new(0.01));
    // Two classes: a bright top half or a bright bottom half, with noise.
    let mut rng = StdRng::seed_from_u64(9);
    let noise = Tensor::randn(&[32, 1, 8, 8], DType::F32, &mut rng).mul_scalar(0.3);
    let mut img = noise.to_vec::<f32>();
    let mut labels = Vec::new();
    for i in 0..32 {
        let top = i % 2 == 0;
        labels.push(u8::from(!top));
        for y in 0..8 {
            if (y < 4) == top {
                for x in 0..8 {
                    img[i * 64 + y * 8 + x] += 1.0;
                }
            }
        }
    }
    let x = Tensor::from_vec(img, &[32, 1, 8, 8]);
    let y = ferrograd::data::one_hot(&labels, 2);
    let first = model.train_step(&x, &y);
    let mut last = first;
    for _ in 0..30 {
        last = model.train_step(&x, &y);
    }
    assert!(last < first * 0.2, "loss {first} → {last}");
    let acc = ferrograd::metrics::accuracy(&model.predict(&x), &labels);
    assert_eq!(acc.hit_num, 32);
}

#[test]
fn empty_batches_and_sequences_give_empty_results() {
    let x = Tensor::zeros(&[0, 3, 8, 8], DType::F32);
    let c = Conv2D::new(3, 4, 3).padding(1);
    assert_eq!(c.forward(&x, Mode::Eval).shape(), &[0, 4, 8, 8]);
    assert_eq!(x.max_pool2d(2, 2, 0).shape(), &[0, 3, 4, 4]);
    let t = ConvTranspose2D::new(3, 2, 4).stride(2).padding(1);
    assert_eq!(t.forward(&x, Mode::Eval).shape(), &[0, 2, 16, 16]);
    let lstm = LSTM::new(5, 3);
    let h0 = Tensor::ones(&[1, 2, 3], DType::F32);
    let (out, (h, _)) = lstm.forward_seq(
        &Tensor::zeros(&[2, 0, 5], DType::F32),
        Some((h0.clone(), h0.clone())),
    );
    assert_eq!(out.shape(), &[2, 0, 3]);
    assert_eq!(h.to_vec::<f32>(), h0.to_vec::<f32>());
    let (out, h) = GRU::new(5, 3).forward_seq(&Tensor::zeros(&[0, 4, 5], DType::F32), None);
    assert_eq!((out.shape(), h.shape()), (&[0, 4, 3][..], &[1, 0, 3][..]));
}

#[test]
fn batchnorm1d_over_channels_and_length_with_its_affine_parameters() {
    let bn = BatchNorm1d::new(3);
    to_f64(&bn);
    let params = bn.params();
    params[0]
        .1
        .set(&Tensor::from_vec(vec![2.0f64, 0.5, -1.0], &[3]));
    params[1]
        .1
        .set(&Tensor::from_vec(vec![0.1f64, 0.2, 0.3], &[3]));
    let x = &randn(&[4, 3, 5], 30) * 3.0;
    let y = bn.forward(&x, Mode::Train);
    let (gamma, beta) = ([2.0, 0.5, -1.0], [0.1, 0.2, 0.3]);
    let (xv, yv) = (x.to_vec::<f64>(), y.to_vec::<f64>());
    for c in 0..3 {
        let vals: Vec<f64> = (0..4)
            .flat_map(|n| (0..5).map(move |l| (n * 3 + c) * 5 + l))
            .map(|i| xv[i])
            .collect();
        let mean = vals.iter().sum::<f64>() / 20.0;
        let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 20.0;
        for n in 0..4 {
            for l in 0..5 {
                let i = (n * 3 + c) * 5 + l;
                let want = (xv[i] - mean) / (var + 1e-5).sqrt() * gamma[c] + beta[c];
                assert!((yv[i] - want).abs() < 1e-9, "{} vs {want}", yv[i]);
            }
        }
        // The running variance is unbiased over the N·L = 20 values.
        let rv = bn.buffers()[1].1.tensor().to_vec::<f64>()[c];
        assert!((rv - (0.9 + 0.1 * var * 20.0 / 19.0)).abs() < 1e-12);
    }
    // Evaluation applies the running statistics and the affine step.
    let e = bn.forward(&x, Mode::Eval).to_vec::<f64>();
    let (rm, rv) = (
        bn.buffers()[0].1.tensor().to_vec::<f64>(),
        bn.buffers()[1].1.tensor().to_vec::<f64>(),
    );
    let i = (2 * 3 + 1) * 5 + 4;
    let want = (xv[i] - rm[1]) / (rv[1] + 1e-5).sqrt() * gamma[1] + beta[1];
    assert!((e[i] - want).abs() < 1e-9);
    // An empty batch passes through and leaves the statistics alone.
    let empty = Tensor::zeros(&[0, 3, 5], DType::F64);
    assert_eq!(bn.forward(&empty, Mode::Train).shape(), &[0, 3, 5]);
    assert_eq!(bn.buffers()[2].1.tensor().item(), 1.0);
}

/// Values PyTorch gives (`F.conv2d`, float64) for inputs in closed form: `x = sin(0.7·i)`
/// `[1, 2, 4, 5]`, and the weights below.
fn closed_form(shape: &[usize], f: impl Fn(f64) -> f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| f(i as f64)).collect::<Vec<f64>>(), shape)
}

#[test]
fn conv_layers_take_pytorchs_per_axis_sizes_and_same_padding() {
    let x = closed_form(&[1, 2, 4, 5], |i| (0.7 * i).sin());
    // F.conv2d(x, w, padding="same", dilation=(1, 2)) with w = cos(0.3·i) [3, 2, 2, 2]: an
    // even kernel, so PyTorch pads the odd zero on the bottom and the right.
    let same = Conv2d::new_hw(2, 3, 2, 2)
        .dilation_hw(1, 2)
        .padding_same()
        .without_bias();
    to_f64(&same);
    same.weight()
        .set(&closed_form(&[3, 2, 2, 2], |i| (0.3 * i).cos()));
    let y = Layer::forward(&same, &x, Mode::Eval);
    assert_eq!(y.shape(), &[1, 3, 4, 5]);
    let want = Tensor::from_vec(
        vec![
            0.438837733803112,
            0.617824432835558,
            0.429697798968407,
            0.039477576033094,
            0.048812424144079,
            -0.406094508089838,
            -0.555238783125791,
            -0.244935439480603,
            0.18056486857413,
            0.082599856348047,
            0.32174210174248,
            0.422089710167146,
            0.029045061543835,
            -0.377659933365147,
            -0.203514799836854,
            -0.930690103017471,
            -1.635404419060486,
            -0.852344651064812,
            0.331586124579193,
            0.394040293985469,
            -0.208214548805595,
            -0.214189379717332,
            -0.09753094075775,
            0.06499782360319,
            -0.003290212814037,
            0.190729426585932,
            0.164483410487396,
            0.015323334435917,
            -0.141043545234481,
            -0.023094254534153,
            -0.149005145173475,
            -0.093873799681306,
            0.068831662749534,
            0.199164518664871,
            0.046543751007044,
            0.836458796059965,
            1.233910952962212,
            -0.090672333692806,
            -1.372611005017801,
            -0.916749495955938,
            -0.131765534256108,
            -0.301940627757083,
            -0.285860393397226,
            -0.135335549330795,
            -0.043960059640351,
            0.124809147023336,
            0.312660716717399,
            0.222336778452239,
            0.027444379172996,
            -0.048540740030858,
            -0.101991186474018,
            -0.2836458102892,
            -0.130557132627356,
            0.083934604520603,
            0.134872660856233,
            -0.302908816030158,
            -0.184351945443203,
            0.98606706914188,
            1.692723333386565,
            0.957970340101558,
        ],
        &[1, 3, 4, 5],
    );
    assert_close(&y, &want, 1e-12);
    // F.conv2d(x, w, stride=(1, 2), padding=(1, 2)) with w = cos(0.2·i) [2, 2, 3, 5].
    let rect = Conv2d::new_hw(2, 2, 3, 5)
        .stride_hw(1, 2)
        .padding_hw(1, 2)
        .without_bias();
    assert_eq!(rect.weight().shape(), vec![2, 2, 3, 5]);
    assert_eq!(rect.name(), "Conv2d(2, 2, (3, 5))");
    to_f64(&rect);
    rect.weight()
        .set(&closed_form(&[2, 2, 3, 5], |i| (0.2 * i).cos()));
    let want = Tensor::from_vec(
        vec![
            0.272053935177946,
            1.897846227200397,
            2.895993442460029,
            -1.911334835054221,
            -1.165705290772894,
            0.22814964099502,
            1.644998662756092,
            0.433918043302669,
            -0.831965016671205,
            1.518718576736854,
            2.274367580263044,
            1.652928708959843,
            0.153797891367026,
            2.04056922281314,
            2.809071493931655,
            -1.790564445826754,
            -0.809569969051264,
            0.310894030703595,
            1.501429153087332,
            0.108601119870636,
            -0.801713648716412,
            1.091104519920477,
            1.619239711239672,
            1.072032096005258,
        ],
        &[1, 2, 4, 3],
    );
    assert_close(&Layer::forward(&rect, &x, Mode::Eval), &want, 1e-12);
}
