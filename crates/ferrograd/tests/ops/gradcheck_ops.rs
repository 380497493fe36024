//! Every differentiable op checked against central finite differences in f64, at random
//! points, with broadcast shapes and views; second derivatives checked too.

use crate::common::{check, randn};
use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// Values in [lo, hi): for ops defined on part of the line or with kinks to avoid.
fn uniform(shape: &[usize], lo: f64, hi: f64, seed: u64) -> Tensor {
    Tensor::rand_uniform(shape, lo, hi, DType::F64, &mut StdRng::seed_from_u64(seed))
}

/// Values with |x| in [0.2, 2): away from the kinks of relu, abs, sign at 0.
fn away_from_zero(shape: &[usize], seed: u64) -> Tensor {
    let m = uniform(shape, 0.2, 2.0, seed);
    let s = uniform(shape, -1.0, 1.0, seed + 100).sign();
    &m * &s
}

fn check1(name: &str, f: impl Fn(&Tensor) -> Tensor, x: &Tensor) {
    check(name, |t| f(&t[0]), std::slice::from_ref(x));
}

/// The element-wise primitives are checked from their table (`tests/autodiff/primitives.rs`); these are
/// the composites written from them.
#[test]
fn unary_composites() {
    let x = randn(&[3, 4], 1);
    check1("gelu", |a| a.gelu(), &x);
    check1("elu", |a| a.elu(0.7), &away_from_zero(&[3, 4], 3));
}

#[test]
fn binary_ops_with_broadcasting() {
    let shapes: [(&[usize], &[usize]); 4] = [
        (&[3, 4], &[3, 4]),
        (&[3, 1], &[1, 4]),
        (&[2, 3, 4], &[4]),
        (&[2, 3], &[]),
    ];
    for (i, (sa, sb)) in shapes.iter().enumerate() {
        let a = randn(sa, 10 + i as u64);
        let b = randn(sb, 20 + i as u64);
        let bpos = uniform(sb, 0.5, 2.0, 30 + i as u64);
        check("add", |t| &t[0] + &t[1], &[a.clone(), b.clone()]);
        check("sub", |t| &t[0] - &t[1], &[a.clone(), b.clone()]);
        check("mul", |t| &t[0] * &t[1], &[a.clone(), b.clone()]);
        check("div", |t| &t[0] / &t[1], &[a.clone(), bpos.clone()]);
        // Distinct values: no ties.
        let b_off = &b + 0.05;
        check(
            "maximum",
            |t| t[0].maximum(&t[1]),
            &[a.clone(), b_off.clone()],
        );
        check(
            "minimum",
            |t| t[0].minimum(&t[1]),
            &[a.clone(), b_off.clone()],
        );
    }
    let a = randn(&[3, 4], 40);
    check(
        "scalar ops",
        |t| &(&(2.0 - &t[0]) * 3.0) / 1.5,
        std::slice::from_ref(&a),
    );
    check(
        "where_cond",
        |t| {
            let mask = Tensor::from_vec(vec![1.0f64, 0.0, 1.0, 1.0], &[4]);
            mask.where_cond(&t[0], &t[1])
        },
        &[a, randn(&[1, 4], 41)],
    );
}

#[test]
fn ties_split_the_gradient() {
    let a = Tensor::scalar(1.0f64).requires_grad();
    let b = Tensor::scalar(1.0f64).requires_grad();
    let g = a.maximum(&b).backward();
    assert_eq!(
        (g.get(&a).unwrap().item(), g.get(&b).unwrap().item()),
        (0.5, 0.5)
    );
    let x = Tensor::from_vec(vec![3.0f64, 1.0, 3.0], &[3]).requires_grad();
    assert_eq!(
        x.max().backward().get(&x).unwrap().to_vec::<f64>(),
        vec![0.5, 0.0, 0.5]
    );
}

#[test]
fn reductions() {
    let x = randn(&[2, 3, 4], 50);
    check1("sum", |t| t.sum(), &x);
    check1("mean", |t| t.mean(), &x);
    check1("sum_axes [1]", |t| t.sum_axes(&[1], false), &x);
    check(
        "sum_axes [0, 2] keepdim",
        |t| t[0].sum_axes(&[0, 2], true),
        std::slice::from_ref(&x),
    );
    check(
        "mean_axes [0, 1]",
        |t| t[0].mean_axes(&[0, 1], false),
        std::slice::from_ref(&x),
    );
    check1("max_axes", |t| t.max_axes(&[2], false), &x);
    check(
        "min_axes keepdim",
        |t| t[0].min_axes(&[0, 1], true),
        std::slice::from_ref(&x),
    );
    check1("max", |t| t.max(), &x);
    check1("sum_to", |t| t.sum_to(&[3, 1]), &x);
}

#[test]
fn matmul_forms() {
    check(
        "matmul 2-d",
        |t| t[0].matmul(&t[1]),
        &[randn(&[3, 4], 60), randn(&[4, 5], 61)],
    );
    check(
        "matmul batched broadcast",
        |t| t[0].matmul(&t[1]),
        &[randn(&[2, 3, 4], 62), randn(&[4, 2], 63)],
    );
    check(
        "matmul batch both",
        |t| t[0].matmul(&t[1]),
        &[randn(&[2, 1, 3, 4], 64), randn(&[3, 4, 2], 65)],
    );
    check(
        "matmul vector",
        |t| t[0].matmul(&t[1]),
        &[randn(&[4], 66), randn(&[4, 3], 67)],
    );
    check(
        "matmul matrix-vector",
        |t| t[0].matmul(&t[1]),
        &[randn(&[3, 4], 68), randn(&[4], 69)],
    );
    check(
        "matmul transposed view",
        |t| t[0].t().matmul(&t[1]),
        &[randn(&[4, 3], 70), randn(&[4, 2], 71)],
    );
}

#[test]
fn linear_forms() {
    check(
        "linear 2-d",
        |t| t[0].linear(&t[1], Some(&t[2])),
        &[randn(&[3, 4], 72), randn(&[5, 4], 73), randn(&[5], 74)],
    );
    check(
        "linear over leading axes",
        |t| t[0].linear(&t[1], Some(&t[2])),
        &[randn(&[2, 3, 4], 75), randn(&[5, 4], 76), randn(&[5], 77)],
    );
    check(
        "linear of a vector",
        |t| t[0].linear(&t[1], Some(&t[2])),
        &[randn(&[4], 78), randn(&[2, 4], 79), randn(&[2], 90)],
    );
    check(
        "linear without bias, transposed input",
        |t| t[0].transpose(0, 1).linear(&t[1], None),
        &[randn(&[4, 3], 91), randn(&[2, 4], 92)],
    );
}

#[test]
fn shape_ops_and_views() {
    let x = randn(&[2, 3, 4], 80);
    check1("reshape", |t| t.reshape(&[6, 4]), &x);
    check(
        "reshape of view",
        |t| t[0].transpose(0, 2).reshape(&[4, 6]),
        std::slice::from_ref(&x),
    );
    check1("transpose", |t| t.transpose(0, 1), &x);
    check1("permute", |t| t.permute(&[2, 0, 1]), &x);
    check(
        "broadcast_to",
        |t| t[0].broadcast_to(&[5, 3, 4]),
        &[randn(&[3, 1], 81)],
    );
    check(
        "squeeze/unsqueeze",
        |t| t[0].unsqueeze(1).squeeze(1),
        std::slice::from_ref(&x),
    );
    check1("narrow", |t| t.narrow(2, 1, 2), &x);
    check(
        "pad",
        |t| t[0].pad(&[(1, 0), (0, 2), (1, 1)], 0.5),
        std::slice::from_ref(&x),
    );
    check(
        "cat",
        |t| Tensor::cat(&[&t[0], &t[1]], 1),
        &[x.clone(), randn(&[2, 2, 4], 82)],
    );
    check(
        "stack",
        |t| Tensor::stack(&[&t[0], &t[1]], 0),
        &[randn(&[3], 83), randn(&[3], 84)],
    );
    check(
        "index_select",
        |t| t[0].index_select(1, &[2, 0, 2]),
        std::slice::from_ref(&x),
    );
    check(
        "index_add",
        |t| t[0].index_add(0, &[1, 1, 0], &t[1]),
        &[randn(&[2, 3], 85), randn(&[3, 3], 86)],
    );
    check(
        "contiguous",
        |t| t[0].transpose(1, 2).contiguous(),
        std::slice::from_ref(&x),
    );
    // Through f32 the finite differences need a coarser step and tolerance.
    let coarse = GradcheckOptions {
        eps: 1e-3,
        atol: 1e-3,
        rtol: 1e-3,
        ..Default::default()
    };
    let via_f32 = |t: &[Tensor]| t[0].to_dtype(DType::F32).square().to_dtype(DType::F64);
    gradcheck(via_f32, &[randn(&[3], 87)], &coarse).unwrap();
    gradgradcheck(via_f32, &[randn(&[3], 87)], &coarse).unwrap();
}

#[test]
fn softmax_family() {
    let x = randn(&[3, 5], 90);
    check1("softmax", |t| t.softmax(1), &x);
    check1("softmax axis 0", |t| t.softmax(0), &x);
    check1("log_softmax", |t| t.log_softmax(1), &x);
    check(
        "log_softmax 3-d middle axis",
        |t| t[0].log_softmax(1),
        &[randn(&[2, 3, 4], 91)],
    );
}

#[test]
fn composite_expression() {
    // A small network-like expression mixing many rules.
    let f = |t: &[Tensor]| {
        let h = (&t[0].matmul(&t[1]) + &t[2]).tanh();
        let logits = h.matmul(&t[1].t());
        (&logits.log_softmax(1) * &logits.softmax(1))
            .sum_axes(&[1], false)
            .mean()
    };
    check(
        "composite",
        f,
        &[randn(&[4, 3], 100), randn(&[3, 3], 101), randn(&[3], 102)],
    );
}

#[test]
fn gradcheck_reports_a_wrong_rule() {
    // `sign` has no rule at all; a wrong result is made by detaching half of a product.
    let wrong = |t: &[Tensor]| &t[0] * &t[0].detach();
    let err = gradcheck(wrong, &[randn(&[3], 110)], &GradcheckOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("gradcheck: input 0 (shape [3]) at index ["),
        "{msg}"
    );
    assert!(msg.contains("analytic") && msg.contains("numeric"), "{msg}");
}

#[test]
fn batch_norm_fused() {
    // [N, C] and [N, C, H, W]; the output weighted so that no sum over a channel is constant.
    for (shape, seed) in [
        (vec![5, 3], 300),
        (vec![2, 3, 4, 5], 310),
        (vec![3, 2, 7], 320),
    ] {
        let c = shape[1];
        let mix = randn(&shape, seed + 3);
        let inputs = [
            &randn(&shape, seed) * 2.0 + 1.5,
            uniform(&[c], 0.5, 2.0, seed + 1),
            randn(&[c], seed + 2),
        ];
        let f = |t: &[Tensor]| &t[0].batch_norm(&t[1], &t[2], 1e-5).0 * &mix;
        check("batch_norm", f, &inputs);
        batch_norm_matches_composite(&inputs, &mix);
    }
    // Large enough for the thread pool: long runs split by channel and run, short runs (one
    // value, five) by blocks of columns that end inside a channel and inside a row, and by
    // blocks of rows (many rows of few columns); one of those on the calling thread.
    for (shape, seed) in [
        (vec![4, 3, 128, 96], 340),
        (vec![64, 2100], 350),
        (vec![40, 701, 5], 360),
        (vec![1100, 130], 370),
        (vec![600, 7], 380),
    ] {
        let c = shape[1];
        let inputs = [
            &randn(&shape, seed) * 2.0 + 1.5,
            uniform(&[c], 0.5, 2.0, seed + 1),
            randn(&[c], seed + 2),
        ];
        batch_norm_matches_composite(&inputs, &randn(&shape, seed + 3));
    }
}

/// The fused batch norm against the composite formula, value and (fused) gradient.
fn batch_norm_matches_composite(inputs: &[Tensor; 3], mix: &Tensor) {
    let shape = inputs[0].shape().to_vec();
    let c = shape[1];
    let f = |t: &[Tensor]| &t[0].batch_norm(&t[1], &t[2], 1e-5).0 * mix;
    {
        let composite = |t: &[Tensor]| {
            let axes: Vec<usize> = (0..shape.len()).filter(|&a| a != 1).collect();
            let mut keep = vec![1; shape.len()];
            keep[1] = c;
            let centered = &t[0] - &t[0].mean_axes(&axes, true);
            let var = centered.square().mean_axes(&axes, true);
            let xhat = &centered / &var.add_scalar(1e-5).sqrt();
            &(&(&xhat * &t[1].reshape(&keep)) + &t[2].reshape(&keep)) * mix
        };
        same_values_and_gradients(f, composite, inputs);
    }
}

#[test]
fn layer_norm_fused() {
    // Rows of 5, of 7 over two leading axes, of 11 (a whole group of eight running sums and
    // a rest) and 16 (two groups, no rest), and (for the thread pool) 1,100 rows of 130: the
    // fused value and gradient against the composite formula, and gradcheck to second order.
    for (shape, seed) in [
        (vec![4, 5], 400),
        (vec![2, 3, 7], 410),
        (vec![3, 11], 430),
        (vec![2, 16], 440),
        (vec![1100, 130], 420),
    ] {
        let d = shape[shape.len() - 1];
        let mix = randn(&shape, seed + 3);
        let inputs = [
            &randn(&shape, seed) * 2.0 + 1.5,
            uniform(&[d], 0.5, 2.0, seed + 1),
            randn(&[d], seed + 2),
        ];
        let f = |t: &[Tensor]| &t[0].layer_norm(&t[1], &t[2], 1e-5) * &mix;
        if shape[0] < 100 {
            check("layer_norm", f, &inputs);
        }
        let composite = |t: &[Tensor]| {
            let centered = &t[0] - &t[0].mean_axes(&[-1], true);
            let var = centered.square().mean_axes(&[-1], true);
            let xhat = &centered / &var.add_scalar(1e-5).sqrt();
            &(&(&xhat * &t[1]) + &t[2]) * &mix
        };
        same_values_and_gradients(f, composite, &inputs);
    }
}

#[test]
fn layer_norm_refuses_what_does_not_fit_by_name() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let (w, b) = (
        Tensor::ones(&[3], DType::F32),
        Tensor::zeros(&[3], DType::F32),
    );
    let msg = |f: &dyn Fn()| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("refused");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    assert!(
        msg(&|| drop(x.layer_norm(&w.narrow(0, 0, 2), &b, 1e-5))).contains("layer_norm: expected")
    );
    assert!(
        msg(&|| drop(x.layer_norm(&w.to_dtype(DType::F64), &b, 1e-5)))
            .contains("share a float dtype")
    );
}

/// A fused op (`fused`) against its composite formula: the same values, and the same plain
/// gradients (which the fused kernel computes).
fn same_values_and_gradients(
    fused: impl Fn(&[Tensor]) -> Tensor,
    composite: impl Fn(&[Tensor]) -> Tensor,
    inputs: &[Tensor],
) {
    let tracked: Vec<Tensor> = inputs.iter().map(|t| t.requires_grad()).collect();
    let refs: Vec<&Tensor> = tracked.iter().collect();
    let (fused_y, plain_y) = (fused(&tracked), composite(&tracked));
    assert!(fused_y.allclose(&plain_y, 1e-12, 1e-12));
    let fused_g = grad(&fused_y.sum(), &refs);
    let plain_g = grad(&plain_y.sum(), &refs);
    for (a, b) in fused_g.iter().zip(&plain_g) {
        assert!(a.allclose(b, 1e-10, 1e-10), "{a} vs {b}");
    }
}

#[test]
fn batch_norm_statistics_keep_their_digits_far_from_zero() {
    // f32 values around 10,000 with a spread of 1: the variance must come out near 1.
    let x = &(randn(&[64, 4, 16, 16], 330) + 1e4).to_dtype(DType::F32);
    let (w, b) = (
        Tensor::ones(&[4], DType::F32),
        Tensor::zeros(&[4], DType::F32),
    );
    let (y, mean, var) = x.batch_norm(&w, &b, 1e-5);
    for (m, v) in mean.to_vec::<f64>().iter().zip(var.to_vec::<f64>()) {
        assert!(
            (m - 1e4).abs() < 0.1 && (v - 1.0).abs() < 0.05,
            "mean {m} var {v}"
        );
    }
    let ys = y.to_vec::<f32>();
    assert!(ys.iter().all(|v| v.abs() < 6.0));
}

#[test]
fn batch_norm_refuses_mismatched_shapes_by_name() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let w = Tensor::ones(&[4], DType::F32);
    let m = crate::common::panic_message(|| drop(x.batch_norm(&w, &w, 1e-5)));
    assert!(
        m.contains("batch_norm") && m.contains("[2, 3]") && m.contains("[4]"),
        "{m}"
    );
}

#[test]
fn recurrent_cells_fused() {
    let (n, h) = (3, 4);
    let mix = randn(&[n, h], 340);
    let lstm = |t: &[Tensor]| {
        let (h_new, c_new) = Tensor::lstm_cell(&t[0], &t[1], &t[2]);
        &(&h_new * &mix) + &(&c_new * 0.7)
    };
    let inputs = [
        randn(&[n, 4 * h], 341),
        randn(&[n, 4 * h], 342),
        randn(&[n, h], 343),
    ];
    check("lstm_cell", lstm, &inputs);
    // Only h' reaches the result, or only c'.
    check(
        "lstm_cell h'",
        |t| Tensor::lstm_cell(&t[0], &t[1], &t[2]).0,
        &inputs,
    );
    check(
        "lstm_cell c'",
        |t| Tensor::lstm_cell(&t[0], &t[1], &t[2]).1,
        &inputs,
    );

    let gru = |t: &[Tensor]| &Tensor::gru_cell(&t[0], &t[1], &t[2]) * &mix;
    let inputs = [
        randn(&[n, 3 * h], 344),
        randn(&[n, 3 * h], 345),
        randn(&[n, h], 346),
    ];
    check("gru_cell", gru, &inputs);
}

#[test]
fn recurrent_cells_refuse_mismatched_gates_by_name() {
    let gates = Tensor::zeros(&[2, 12], DType::F32);
    let state = Tensor::zeros(&[2, 4], DType::F32);
    let m = crate::common::panic_message(|| drop(Tensor::lstm_cell(&gates, &gates, &state)));
    assert!(m.contains("lstm_cell") && m.contains("[2, 12]"), "{m}");
    let wide = Tensor::zeros(&[2, 16], DType::F32);
    let m = crate::common::panic_message(|| drop(Tensor::gru_cell(&wide, &gates, &state)));
    assert!(m.contains("gru_cell") && m.contains("[2, 16]"), "{m}");
}

#[test]
fn recurrent_layers_fused() {
    use ferrograd::RecurrentWeights;
    let (n, t, input, h) = (2, 3, 3, 2);
    let mix = randn(&[n, t, h], 350);
    for (gates, seed) in [(4, 360), (3, 370), (1, 380)] {
        let mut inputs = vec![
            randn(&[n, t, input], seed),
            randn(&[n, h], seed + 1),
            randn(&[gates * h, input], seed + 3),
            randn(&[gates * h, h], seed + 4),
            randn(&[gates * h], seed + 5),
            randn(&[gates * h], seed + 6),
        ];
        if gates == 4 {
            inputs.insert(2, randn(&[n, h], seed + 2));
        }
        let f = |v: &[Tensor]| {
            let k = usize::from(gates == 4);
            let w = RecurrentWeights {
                w_ih: &v[2 + k],
                w_hh: &v[3 + k],
                b_ih: &v[4 + k],
                b_hh: &v[5 + k],
            };
            // Every output reaches the result: the sequence, the last h and (LSTM) the last c.
            let (out, h_n, c_n) = match gates {
                4 => {
                    let (o, h, c) = v[0].lstm(&v[1], &v[2], w);
                    (o, h, Some(c))
                }
                3 => {
                    let (o, h) = v[0].gru(&v[1], w);
                    (o, h, None)
                }
                _ => {
                    let (o, h) = v[0].rnn_tanh(&v[1], w);
                    (o, h, None)
                }
            };
            let mut total = &(&out * &mix).sum() + &(&h_n * 0.3).sum();
            if let Some(c) = c_n {
                total = &total + &c.square().sum();
            }
            total
        };
        check(&format!("recurrent layer, {gates} gates"), f, &inputs);
    }
}

#[test]
fn recurrent_layers_split_the_batch_across_threads_exactly() {
    // 17 rows run as parts of the batch on the threads; each row alone must agree, in values
    // and in every gradient (the inputs' row by row, the weights' summed over the rows).
    use ferrograd::RecurrentWeights;
    let (n, t, input, h) = (17, 4, 3, 5);
    for (gates, seed) in [(4, 400), (3, 410), (1, 420)] {
        let x = randn(&[n, t, input], seed).requires_grad();
        let h0 = randn(&[n, h], seed + 1).requires_grad();
        let c0 = randn(&[n, h], seed + 2).requires_grad();
        let w: Vec<Tensor> = [[gates * h, input], [gates * h, h]]
            .iter()
            .map(|s| randn(s, seed + 3))
            .chain([randn(&[gates * h], seed + 4), randn(&[gates * h], seed + 5)])
            .map(|p| p.requires_grad())
            .collect();
        let mix = randn(&[n, t, h], seed + 6);
        // The layer's scalar loss on rows `rows`, and the gradient of every weight.
        let run = |rows: std::ops::Range<usize>| {
            let len = rows.len();
            let pick = |a: &Tensor| a.narrow(0, rows.start, len);
            let weights = RecurrentWeights {
                w_ih: &w[0],
                w_hh: &w[1],
                b_ih: &w[2],
                b_hh: &w[3],
            };
            let (out, h_n) = match gates {
                4 => {
                    let (o, h, c) = pick(&x).lstm(&pick(&h0), &pick(&c0), weights);
                    (o, &h + &c)
                }
                3 => pick(&x).gru(&pick(&h0), weights),
                _ => pick(&x).rnn_tanh(&pick(&h0), weights),
            };
            let loss = &(&out * &pick(&mix)).sum() + &h_n.sum();
            let mut wrt: Vec<&Tensor> = vec![&x, &h0];
            if gates == 4 {
                wrt.push(&c0);
            }
            wrt.extend(&w);
            let grads = grad(&loss, &wrt);
            (out, loss.item(), grads)
        };
        let (out, loss, grads) = run(0..n);
        let rows: Vec<_> = (0..n).map(|r| run(r..r + 1)).collect();
        let outs: Vec<&Tensor> = rows.iter().map(|r| &r.0).collect();
        assert!(
            out.allclose(&Tensor::cat(&outs, 0), 1e-12, 1e-12),
            "{gates} gates: outputs"
        );
        let total: f64 = rows.iter().map(|r| r.1).sum();
        assert!(
            (loss - total).abs() < 1e-9,
            "{gates} gates: {loss} vs {total}"
        );
        for (k, g) in grads.iter().enumerate() {
            let summed = rows
                .iter()
                .skip(1)
                .fold(rows[0].2[k].clone(), |a, r| &a + &r.2[k]);
            assert!(
                g.allclose(&summed, 1e-10, 1e-10),
                "{gates} gates: gradient {k}"
            );
        }
    }
}

#[test]
fn recurrent_layers_in_f32_agree_with_f64() {
    // f32 runs the same rules as f64 through other kernels (on AVX-512: the products read
    // the kept rows and stacked weights in place): partial row panels (on 2 threads, parts of
    // 20 rows, 12 + 8; of 26 and 27), more than two parts (on 4 threads: 10, and 13 or 14
    // rows), no input features, no steps (the backward too). The rules themselves are
    // gradchecked in f64 by `recurrent_layers_fused`.
    use ferrograd::RecurrentWeights;
    let cases = [(40, 3, 5, 20), (53, 4, 7, 33), (9, 2, 0, 6), (20, 0, 3, 4)];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    for (gates, seed) in [(4, 500), (3, 510), (1, 520)] {
        for (k, &(n, t, input, h)) in cases.iter().enumerate() {
            let seed = seed + 20 * k as u64;
            let values = [
                randn(&[n, t, input], seed),
                randn(&[n, h], seed + 1),
                randn(&[n, h], seed + 2),
                randn(&[gates * h, input], seed + 3),
                randn(&[gates * h, h], seed + 4),
                randn(&[gates * h], seed + 5),
                randn(&[gates * h], seed + 6),
            ]
            .map(|v| v.mul_scalar(0.5));
            let mix = randn(&[n, t, h], seed + 7);
            // The loss and the gradient of every input, in the given dtype.
            let run = |dtype: DType| {
                let v: Vec<Tensor> = values
                    .iter()
                    .map(|v| v.to_dtype(dtype).requires_grad())
                    .collect();
                let w = RecurrentWeights {
                    w_ih: &v[3],
                    w_hh: &v[4],
                    b_ih: &v[5],
                    b_hh: &v[6],
                };
                let (out, last) = match gates {
                    4 => {
                        let (o, h, c) = v[0].lstm(&v[1], &v[2], w);
                        (o, &h + &c.square())
                    }
                    3 => v[0].gru(&v[1], w),
                    _ => v[0].rnn_tanh(&v[1], w),
                };
                let loss = &(&out * &mix.to_dtype(dtype)).sum() + &last.sum();
                let wrt: Vec<&Tensor> = v
                    .iter()
                    .filter(|t| gates == 4 || !std::ptr::eq(*t, &v[2]))
                    .collect();
                let grads = grad(&loss, &wrt);
                let mut all = vec![out.to_dtype(DType::F64), loss.to_dtype(DType::F64)];
                all.extend(grads.iter().map(|g| g.to_dtype(DType::F64)));
                all
            };
            let double = run(DType::F64);
            for single in [run(DType::F32), pool.install(|| run(DType::F32))] {
                for (i, (a, b)) in single.iter().zip(&double).enumerate() {
                    assert_eq!(a.shape(), b.shape(), "{gates} gates, case {k}, result {i}");
                    assert!(
                        a.allclose(b, 1e-4, 1e-4),
                        "{gates} gates, case {k}, result {i}: {:?} vs {:?}",
                        a.to_vec::<f64>().iter().take(4).collect::<Vec<_>>(),
                        b.to_vec::<f64>().iter().take(4).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}

/// PyTorch's rearrangements and statistics written from the selections and reductions:
/// values as PyTorch defines them, first and second derivatives.
#[test]
fn rearrangements_and_statistics() {
    let x = randn(&[2, 3, 4], 31);
    let index = Tensor::from_vec(vec![2i64, 0, 0, 1, 1, 1, 0, 2], &[2, 2, 2]);
    check1("gather", |t| t.narrow(2, 0, 2).gather(1, &index), &x);
    check1("gather, last axis", |t| t.gather(-1, &index), &x);
    check1("flip", |t| t.flip(&[0, 2]), &x);
    check1("roll", |t| t.roll(-5, 2), &x);
    check1("repeat", |t| t.repeat(&[2, 1, 3, 1]), &x);
    check1("var", |t| t.var_axes(&[1, 2], 1, false), &x);
    check1("std", |t| t.std_axes(&[-1], 0, true), &x);
    // Rows of equal elements: PyTorch's gradient there is 0, not NaN; other rows unchanged.
    let flat = Tensor::from_vec(vec![2.0f64, 2.0, 2.0, 1.0, 2.0, 4.0], &[2, 3]).requires_grad();
    let g = grad(&flat.std_axes(&[1], 1, false).sum(), &[&flat]).remove(0);
    let g2 = grad(
        &flat.narrow(0, 1, 1).std_axes(&[1], 1, false).sum(),
        &[&flat],
    )
    .remove(0);
    assert_eq!(g.to_vec::<f64>()[..3], [0.0; 3]);
    assert_eq!(g.to_vec::<f64>()[3..], g2.to_vec::<f64>()[3..]);
    // The second derivative there is 0 too (not differentiable: PyTorch's choice again).
    let g1 = grad_with_graph(&flat.std_axes(&[1], 1, false).sum(), &[&flat]).remove(0);
    let h = grad(&g1.narrow(1, 0, 1).sum(), &[&flat])
        .remove(0)
        .to_vec::<f64>();
    assert!(
        h[..3] == [0.0; 3] && h.iter().all(|v| v.is_finite()),
        "{h:?}"
    );
    check1("logsumexp", |t| t.logsumexp(&[0, 2], false), &x);
    check1("cumsum", |t| t.cumsum(1), &x);
    check1(
        "cumsum, a long axis",
        |t| t.cumsum(0),
        &randn(&[300, 2], 32),
    );
    // Values, as PyTorch gives them.
    let v = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let at = |t: Tensor| t.to_vec::<f64>();
    let pick = Tensor::from_vec(vec![2i64, 0, 1, 1], &[2, 2]);
    assert_eq!(at(v.gather(1, &pick)), [3.0, 1.0, 5.0, 5.0]);
    assert_eq!(at(v.flip(&[1])), [3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
    assert_eq!(at(v.roll(1, 1)), [3.0, 1.0, 2.0, 6.0, 4.0, 5.0]);
    assert_eq!(v.repeat(&[2, 1, 2]).shape(), &[2, 2, 6]);
    assert_eq!(at(v.repeat(&[1, 2]))[..6], [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    assert_eq!(at(v.var_axes(&[1], 1, false)), [1.0, 1.0]);
    assert!((at(v.std_axes(&[0, 1], 0, false))[0] - (35.0f64 / 12.0).sqrt()).abs() < 1e-15);
    let big = Tensor::from_vec(
        vec![1000.0f64, 1000.0, f64::NEG_INFINITY, f64::NEG_INFINITY],
        &[2, 2],
    );
    let lse = at(big.logsumexp(&[1], false));
    assert!((lse[0] - (1000.0 + 2f64.ln())).abs() < 1e-12 && lse[1] == f64::NEG_INFINITY);
    // Running sums, along a long axis too, as a sequential sum gives them; an infinity or a
    // NaN reaches only the sums after it.
    let long = randn(&[3, 700], 33);
    let want: Vec<f64> = long
        .to_vec::<f64>()
        .chunks(700)
        .flat_map(|row| {
            row.iter()
                .scan(0.0, |acc, &v| {
                    *acc += v;
                    Some(*acc)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let got = at(long.cumsum(-1));
    assert!(
        got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-10),
        "cumsum by blocks"
    );
    assert_eq!(at(v.cumsum(0)), [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    // No degrees of freedom left: infinite, as PyTorch's (NaN for a constant).
    assert_eq!(at(v.var_axes(&[0, 1], 6, false))[0], f64::INFINITY);
    assert!(at(v.ones_like().var_axes(&[1], 3, false))[0].is_nan());
    let empty = Tensor::zeros(&[2, 0], DType::F64);
    assert_eq!(at(empty.logsumexp(&[1], false)), [f64::NEG_INFINITY; 2]);
    let twice = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| v.flip(&[1, -1])));
    assert!(twice.is_err(), "flip names an axis twice");
}
