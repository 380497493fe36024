//! Scaled dot-product attention: against PyTorch's float64 values
//! (`scripts/export_torch_attention.py` wrote `tests/fixtures/torch_attention.safetensors`),
//! against its own definition written with tensor ops, and its first and second derivatives
//! against finite differences.

use std::collections::HashMap;
use std::path::Path;

use crate::common::{check, randn};
use ferrograd::io::load_tensors;
use ferrograd::prelude::*;

/// The fixture's closed-form inputs: `f(a·i + b)` over the elements, in f64.
fn wave(shape: &[usize], a: f64, b: f64, f: fn(f64) -> f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| f(a * i as f64 + b)).collect(), shape)
}

fn torch() -> HashMap<String, Tensor> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    load_tensors(&dir.join("torch_attention.safetensors"))
        .unwrap()
        .0
}

fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (a, b) in got.to_vec::<f64>().iter().zip(want.to_vec::<f64>()) {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: {a} vs PyTorch's {b}"
        );
    }
}

/// The definition: softmax(q kᵀ · scale + mask) v, with tensor ops.
fn definition(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: Option<&Tensor>) -> Tensor {
    let mut s = &q.matmul(&k.transpose(-2, -1)) * scale;
    if let Some(m) = mask {
        s = &s + m;
    }
    s.softmax(-1).matmul(v)
}

#[test]
fn values_and_gradients_are_pytorchs() {
    let t = torch();
    let q = wave(&[2, 3, 4, 5], 0.3, 0.0, f64::sin).requires_grad();
    let k = wave(&[2, 3, 6, 5], 0.2, 0.0, f64::cos).requires_grad();
    let v = wave(&[2, 3, 6, 7], 0.7, 1.0, f64::sin).requires_grad();
    let mask = wave(&[4, 6], 0.1, 0.0, f64::cos).requires_grad();
    let w = wave(&[2, 3, 4, 7], 0.13, 0.5, f64::sin);
    let y = q.scaled_dot_product_attention(&k, &v, &Attention::new().mask(&mask).scale(0.3));
    assert_close(&y, &t["masked.out"], 1e-13, "masked output");
    let g = grad(&(&y * &w).sum(), &[&q, &k, &v, &mask]);
    for (name, g) in ["q", "k", "v", "mask"].iter().zip(&g) {
        assert_close(g, &t[&format!("masked.grad_{name}")], 1e-12, name);
    }
    let (k4, v4) = (k.narrow(2, 0, 4), v.narrow(2, 0, 4));
    let y = q.scaled_dot_product_attention(&k4, &v4, &Attention::new().causal(true));
    assert_close(&y, &t["causal.out"], 1e-13, "causal output");
    let g = grad(&(&y * &w).sum(), &[&q, &k, &v]);
    assert_close(&g[0], &t["causal.grad_q"], 1e-12, "causal q");
    assert_close(
        &g[1].narrow(2, 0, 4),
        &t["causal.grad_k"],
        1e-12,
        "causal k",
    );
    assert_close(
        &g[2].narrow(2, 0, 4),
        &t["causal.grad_v"],
        1e-12,
        "causal v",
    );
}

/// Operands of two float types compute in the wider one; each gradient comes back in its
/// operand's type, on both paths.
#[test]
fn mixed_float_types_get_gradients_in_their_own_types() {
    let q = wave(&[2, 3, 4], 0.3, 0.0, f64::sin)
        .to_dtype(DType::F32)
        .requires_grad();
    let mask = wave(&[3, 3], 0.1, 0.0, f64::cos).requires_grad();
    let y = q.scaled_dot_product_attention(&q, &q, &Attention::new().mask(&mask));
    assert_eq!(y.dtype(), DType::F64);
    for g in [y.sum().backward(), y.sum().backward_with_graph()] {
        assert_eq!(g.get(&q).unwrap().dtype(), DType::F32);
        assert_eq!(g.get(&mask).unwrap().dtype(), DType::F64);
    }
}

/// `loss`'s plain gradients (the fused kernel's) against those of a backward that builds a
/// graph (the tensor-op rule), input by input: equal within `tol`, and present on both paths or
/// neither.
fn fused_is_the_rule(loss: &Tensor, inputs: &[(&str, &Tensor)], tol: f64, what: &str) {
    let (fused, rule) = (loss.backward(), loss.backward_with_graph());
    for &(name, x) in inputs {
        match (fused.get(x), rule.get(x)) {
            (Some(a), Some(b)) => assert_close(&a, &b, tol, &format!("{what}: {name}")),
            (None, None) => {}
            _ => panic!("{what}: {name} has a gradient on one path only"),
        }
    }
}

/// A plain backward runs the fused kernel, a backward that builds a graph the tensor-op rule:
/// the two give the same gradients, for every operand and setting.
#[test]
fn the_fused_backward_is_the_differentiable_rule() {
    for dtype in [DType::F64, DType::F32] {
        let tol = if dtype == DType::F64 { 1e-12 } else { 2e-5 };
        let q = wave(&[2, 3, 4, 5], 0.3, 0.0, f64::sin)
            .to_dtype(dtype)
            .requires_grad();
        // Keys and values shared by the three heads (broadcast), more keys than queries.
        let k = wave(&[2, 1, 7, 5], 0.2, 0.0, f64::cos)
            .to_dtype(dtype)
            .requires_grad();
        let v = wave(&[2, 1, 7, 3], 0.7, 1.0, f64::sin)
            .to_dtype(dtype)
            .requires_grad();
        let mask = wave(&[4, 7], 0.1, 0.0, f64::cos)
            .to_dtype(dtype)
            .requires_grad();
        let w = wave(&[2, 3, 4, 3], 0.13, 0.5, f64::sin).to_dtype(dtype);
        let settings = [
            Attention::new(),
            Attention::new().causal(true),
            Attention::new().mask(&mask).scale(0.3),
            Attention::new().mask(&mask).causal(true),
        ];
        for (i, opts) in settings.iter().enumerate() {
            let loss = (&q.scaled_dot_product_attention(&k, &v, opts) * &w).sum();
            let inputs = [("q", &q), ("k", &k), ("v", &v), ("mask", &mask)];
            fused_is_the_rule(&loss, &inputs, tol, &format!("{dtype} setting {i}"));
        }
    }
}

/// The fused backward against the tensor-op rule with more queries and keys than one block
/// of each (64) and a row whose first key block is masked out entirely (its keys come from
/// the next block), in f64 and f32, for each of `settings(mask)`. 70 queries under a causal
/// mask walk the half blocks of a short sequence (32 rows), 140 the full ones.
fn fused_is_the_rule_over_blocks(settings: impl Fn(&Tensor) -> Vec<Attention>, what: &str) {
    for (dtype, l) in [(DType::F64, 70), (DType::F32, 70), (DType::F64, 140)] {
        let tol = if dtype == DType::F64 { 1e-11 } else { 5e-5 };
        let q = wave(&[1, 2, l, 5], 0.3, 0.0, f64::sin)
            .to_dtype(dtype)
            .requires_grad();
        let k = wave(&[1, 2, 150, 5], 0.2, 0.0, f64::cos)
            .to_dtype(dtype)
            .requires_grad();
        let v = wave(&[1, 2, 150, 3], 0.7, 1.0, f64::sin)
            .to_dtype(dtype)
            .requires_grad();
        let mut m = wave(&[l, 150], 0.1, 0.0, f64::cos).to_vec::<f64>();
        m[(l - 1) * 150..(l - 1) * 150 + 64].fill(f64::NEG_INFINITY);
        let mask = Tensor::from_vec(m, &[l, 150])
            .to_dtype(dtype)
            .requires_grad();
        let w = wave(&[1, 2, l, 3], 0.13, 0.5, f64::sin).to_dtype(dtype);
        for opts in settings(&mask) {
            let loss = (&q.scaled_dot_product_attention(&k, &v, &opts) * &w).sum();
            let inputs = [("q", &q), ("k", &k), ("v", &v), ("mask", &mask)];
            fused_is_the_rule(&loss, &inputs, tol, &format!("{dtype} {l} queries {what}"));
        }
    }
}

#[test]
fn the_fused_backward_walks_blocks_of_queries_and_keys() {
    fused_is_the_rule_over_blocks(
        |mask| vec![Attention::new().mask(mask), Attention::new().causal(true)],
        "",
    );
}

/// `q`, `k`, `v` (views of the tracked `leaves`) through attention, the output consumed as
/// a GPT block consumes it (transposed back to `[N, T, H·Ev]`, so its gradient reaches the
/// kernel strided), against the same through contiguous copies: the same values and
/// gradients, and the fused gradients the rule's.
fn strided_is_contiguous(qkv: [&Tensor; 3], leaves: &[&Tensor], tol: f64, what: &str) {
    let [q, k, v] = qkv;
    let consume = |y: Tensor| {
        let (n, h, t, ev) = (y.shape()[0], y.shape()[1], y.shape()[2], y.shape()[3]);
        let y = y.transpose(1, 2).reshape(&[n, t, h * ev]);
        let w = wave(y.shape(), 0.13, 0.5, f64::sin).to_dtype(y.dtype());
        (&y * &w).sum()
    };
    for opts in [Attention::new(), Attention::new().causal(true).scale(0.7)] {
        let strided = consume(q.scaled_dot_product_attention(k, v, &opts));
        let (qc, kc, vc) = (q.contiguous(), k.contiguous(), v.contiguous());
        let dense = consume(qc.scaled_dot_product_attention(&kc, &vc, &opts));
        assert_close(&strided, &dense, tol, &format!("{what}: forward"));
        let (gs, gd) = (strided.backward(), dense.backward());
        for (i, x) in leaves.iter().enumerate() {
            let (a, b) = (gs.get(x).unwrap(), gd.get(x).unwrap());
            assert_close(&a, &b, tol, &format!("{what}: leaf {i}"));
        }
        let named: Vec<(&str, &Tensor)> = leaves.iter().map(|&x| ("leaf", x)).collect();
        fused_is_the_rule(&strided, &named, 10.0 * tol, what);
    }
}

#[test]
fn operands_are_read_where_they_lie() {
    // The queries, keys and values of a GPT block: one [N, T, 3E] projection, split along its
    // last axis and transposed to [N, H, T, E / H] (strided views the kernel reads in place),
    // with more positions than a block (64) of queries and of keys; values that are a
    // transposed matrix (rows not contiguous: copied) broadcast over the heads; keys broadcast
    // along their rows (a row stride of 0).
    for dtype in [DType::F64, DType::F32] {
        let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
        let (n, t, h, e) = (2, 70, 3, 4);
        let qkv = wave(&[n, t, 3 * h * e], 0.37, 0.1, f64::sin)
            .to_dtype(dtype)
            .requires_grad();
        let split = |i: usize| {
            qkv.narrow(2, i * h * e, h * e)
                .reshape(&[n, t, h, e])
                .transpose(1, 2)
        };
        let vt = wave(&[n, 1, 2, t], 0.21, 0.4, f64::cos)
            .to_dtype(dtype)
            .requires_grad();
        let v = vt.transpose(-2, -1);
        let what = format!("{dtype} projection");
        strided_is_contiguous([&split(0), &split(1), &v], &[&qkv, &vt], tol, &what);
        let k1 = wave(&[n, h, 1, e], 0.5, 0.2, f64::sin)
            .to_dtype(dtype)
            .requires_grad();
        let k = k1.broadcast_to(&[n, h, t, e]);
        let what = format!("{dtype} rows broadcast");
        strided_is_contiguous([&split(0), &k, &v], &[&qkv, &k1, &vt], tol, &what);
    }
}

#[test]
fn no_queries_and_f64_layers_work() {
    // L = 0: an empty result, and an empty gradient.
    let q = Tensor::zeros(&[2, 0, 4], DType::F32).requires_grad();
    let kv = Tensor::ones(&[2, 3, 4], DType::F32).requires_grad();
    let y = q.scaled_dot_product_attention(&kv, &kv, &Attention::new());
    assert_eq!(y.shape(), &[2, 0, 4]);
    assert_eq!(grad(&y.sum(), &[&kv])[0].to_vec::<f32>(), vec![0.0; 24]);
    // An f64 input through layers whose parameters are f32: LayerNorm follows the input.
    let x = wave(&[2, 3, 8], 0.3, 0.0, f64::sin);
    let y = Layer::forward(&LayerNorm::new(8), &x, Mode::Eval);
    assert_eq!(y.dtype(), DType::F64);
    let row = &y.to_vec::<f64>()[..8];
    assert!(row.iter().sum::<f64>().abs() < 1e-12);
}

#[test]
fn the_fused_forward_is_the_definition() {
    // Leading axes broadcast (k and v shared by the batch), more keys than a block, f32 too.
    let q = randn(&[2, 3, 5, 8], 1);
    let k = randn(&[1, 3, 150, 8], 2);
    let v = randn(&[3, 150, 4], 3);
    let mask = randn(&[5, 150], 4);
    let want = definition(&q, &k, &v, 0.25, Some(&mask));
    let got = q.scaled_dot_product_attention(&k, &v, &Attention::new().mask(&mask).scale(0.25));
    assert_close(&got, &want, 1e-12, "masked, broadcast");
    let causal: Vec<f64> = (0..25)
        .map(|x| {
            if x % 5 > x / 5 {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let causal = Tensor::from_vec(causal, &[5, 5]);
    let k5 = k.narrow(2, 0, 5);
    let v5 = v.narrow(1, 0, 5);
    let want = definition(&q, &k5, &v5, 1.0 / 8f64.sqrt(), Some(&causal));
    let got = q.scaled_dot_product_attention(&k5, &v5, &Attention::new().causal(true));
    assert_close(&got, &want, 1e-12, "causal, default scale");
    let f32s = [&q, &k, &v].map(|t| t.to_dtype(DType::F32));
    let got = f32s[0].scaled_dot_product_attention(&f32s[1], &f32s[2], &Attention::new());
    assert_eq!(got.dtype(), DType::F32);
    assert_close(
        &got.to_dtype(DType::F64),
        &definition(&q, &k, &v, 1.0 / 8f64.sqrt(), None),
        1e-5,
        "f32",
    );
}

#[test]
fn first_and_second_derivatives() {
    let (q, k, v, m) = (
        randn(&[2, 3, 4], 5),
        randn(&[2, 5, 4], 6),
        randn(&[2, 5, 3], 7),
        randn(&[3, 5], 8),
    );
    check(
        "attention",
        |t| {
            t[0].scaled_dot_product_attention(
                &t[1],
                &t[2],
                &Attention::new().mask(&t[3]).scale(0.7),
            )
        },
        &[q.clone(), k.clone(), v.clone(), m],
    );
    let (k3, v3) = (k.narrow(1, 0, 3), v.narrow(1, 0, 3));
    check(
        "causal attention",
        |t| t[0].scaled_dot_product_attention(&t[1], &t[2], &Attention::new().causal(true)),
        &[q, k3, v3],
    );
}

/// A query hidden from every key (its mask row all −∞) gets weights 0, as in PyTorch: its
/// output is 0, it passes no gradient (to anything: the other rows' gradients are those of
/// attention without it), on both backward paths, over one block of keys and several.
#[test]
fn a_query_hidden_from_every_key_is_zero_and_passes_no_gradient() {
    for s in [5, 150] {
        let (q, k, v) = (
            randn(&[2, 3, 4], 5).requires_grad(),
            randn(&[2, s, 4], 6).requires_grad(),
            randn(&[2, s, 3], 7).requires_grad(),
        );
        let mut m = randn(&[3, s], 8).to_vec::<f64>();
        m[s..2 * s].fill(f64::NEG_INFINITY);
        m[0] = f64::NEG_INFINITY;
        let mask = Tensor::from_vec(m, &[3, s]).requires_grad();
        let y = q.scaled_dot_product_attention(&k, &v, &Attention::new().mask(&mask));
        assert_eq!(y.narrow(1, 1, 1).to_vec::<f64>(), vec![0.0; 6], "{s} keys");
        let w = randn(&[2, 3, 3], 9);
        let loss = (&y * &w).sum();
        let inputs = [("q", &q), ("k", &k), ("v", &v), ("mask", &mask)];
        fused_is_the_rule(&loss, &inputs, 1e-12, &format!("hidden row, {s} keys"));
        let g = loss.backward();
        let dq = g.get(&q).unwrap();
        assert_eq!(dq.narrow(1, 1, 1).to_vec::<f64>(), vec![0.0; 8]);
        assert_eq!(
            g.get(&mask).unwrap().narrow(0, 1, 1).to_vec::<f64>(),
            vec![0.0; s]
        );
        // Without the hidden row: the same output rows and the same key and value gradients.
        let keep = [0, 2];
        let (q2, m2, w2) = (
            q.index_select(1, &keep),
            mask.index_select(0, &keep),
            w.index_select(1, &keep),
        );
        let y2 = q2.scaled_dot_product_attention(&k, &v, &Attention::new().mask(&m2));
        assert_close(&y.index_select(1, &keep), &y2, 1e-14, "the other rows");
        let g2 = (&y2 * &w2).sum().backward();
        for (name, x) in [("k", &k), ("v", &v)] {
            let what = format!("{name} without the hidden row, {s} keys");
            assert_close(&g.get(x).unwrap(), &g2.get(x).unwrap(), 1e-12, &what);
        }
    }
    // NaN is never taken for a hidden row: a NaN query, or a NaN among hidden keys, gives a
    // NaN row and NaN gradients on both paths, as the definition does.
    for (s, dtype) in [(5, DType::F64), (150, DType::F64), (150, DType::F32)] {
        let mut qs = randn(&[1, 3, 4], 5).to_vec::<f64>();
        qs[..4].fill(f64::NAN);
        let q = Tensor::from_vec(qs, &[1, 3, 4])
            .to_dtype(dtype)
            .requires_grad();
        let (k, v) = (
            randn(&[1, s, 4], 6).to_dtype(dtype).requires_grad(),
            randn(&[1, s, 3], 7).to_dtype(dtype).requires_grad(),
        );
        let mut m = vec![0.0; 3 * s];
        m[s..2 * s].fill(f64::NEG_INFINITY);
        m[2 * s - 1] = f64::NAN;
        let mask = Tensor::from_vec(m, &[3, s]).to_dtype(dtype);
        let y = q.scaled_dot_product_attention(&k, &v, &Attention::new().mask(&mask));
        let rows: Vec<bool> = (0..3)
            .map(|r| y.narrow(1, r, 1).to_vec::<f64>().iter().all(|x| x.is_nan()))
            .collect();
        assert_eq!(rows, [true, true, false], "{s} keys, {dtype}");
        let loss = y.sum();
        for g in [loss.backward(), loss.backward_with_graph()] {
            let dq = g.get(&q).unwrap();
            for r in 0..2 {
                let row = dq.narrow(1, r, 1).to_vec::<f64>();
                assert!(
                    row.iter().all(|x| x.is_nan()),
                    "{s} keys, {dtype}: dq row {r}"
                );
            }
        }
    }
    // Second derivatives through the rule, the hidden row included.
    let mut m = randn(&[3, 5], 8).to_vec::<f64>();
    m[5..10].fill(f64::NEG_INFINITY);
    let mask = Tensor::from_vec(m, &[3, 5]);
    check(
        "attention with a hidden query",
        |t| t[0].scaled_dot_product_attention(&t[1], &t[2], &Attention::new().mask(&mask)),
        &[
            randn(&[2, 3, 4], 5),
            randn(&[2, 5, 4], 6),
            randn(&[2, 5, 3], 7),
        ],
    );
}

#[test]
fn shapes_that_do_not_fit_are_refused_by_name() {
    let q = Tensor::zeros(&[2, 3, 4], DType::F32);
    let bad = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        q.scaled_dot_product_attention(
            &Tensor::zeros(&[2, 5, 3], DType::F32),
            &q,
            &Attention::new(),
        )
    }));
    let msg = bad.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains("scaled_dot_product_attention"), "{msg}");
}

/// Loads the fixture's `{prefix}.state.*` into `m`, in f64.
fn load_torch_state(m: &dyn Module, t: &HashMap<String, Tensor>, prefix: &str) {
    for (_, p) in m.state_params() {
        p.set_dtype(DType::F64);
    }
    let head = format!("{prefix}.state.");
    let state: HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(&head).map(|n| (n.to_string(), v.clone())))
        .collect();
    m.load_state(&state).unwrap();
}

fn causal_additive(n: usize) -> Tensor {
    let v: Vec<f64> = (0..n * n)
        .map(|x| {
            if x % n > x / n {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(v, &[n, n])
}

#[test]
fn transformer_layers_load_pytorchs_weights_and_compute_its_outputs() {
    let t = torch();
    let x = wave(&[2, 5, 8], 0.37, 0.0, f64::sin);
    let mha = MultiheadAttention::new(8, 2);
    load_torch_state(&mha, &t, "mha");
    let names: Vec<String> = mha.params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "in_proj_weight",
            "in_proj_bias",
            "out_proj.weight",
            "out_proj.bias"
        ]
    );
    let (y, w) = mha.attend_with_weights(&x, &x, &x, &Attention::new().mask(&causal_additive(5)));
    assert_close(&y, &t["mha.out"], 1e-12, "MultiheadAttention");
    assert_close(&w, &t["mha.weights"], 1e-12, "MultiheadAttention weights");
    let causal = mha.attend(&x, &x, &x, &Attention::new().causal(true));
    assert_close(&causal, &t["mha.out"], 1e-12, "MultiheadAttention, causal");
    for (name, layer) in [
        (
            "post_relu",
            TransformerEncoderLayer::new(8, 2)
                .dim_feedforward(16)
                .dropout(0.0),
        ),
        (
            "pre_gelu",
            TransformerEncoderLayer::new(8, 2)
                .dim_feedforward(16)
                .dropout(0.0)
                .gelu()
                .norm_first(true),
        ),
    ] {
        load_torch_state(&layer, &t, name);
        let y = Layer::forward(&layer, &x, Mode::Eval);
        assert_close(&y, &t[&format!("{name}.out")], 1e-12, name);
        let y = layer.forward_masked(&x, Mode::Eval, &Attention::new().causal(true));
        assert_close(&y, &t[&format!("{name}.out_causal")], 1e-12, name);
    }
    let rms = RMSNorm::new(8);
    rms.params()[0].1.set_dtype(DType::F64);
    rms.params()[0].1.set(&wave(&[8], 0.9, 1.0, f64::sin));
    assert_close(
        &Layer::forward(&rms, &x, Mode::Eval),
        &t["rms.out"],
        1e-12,
        "RMSNorm",
    );
}

/// The fixture's mask of the keys each sample pads, `[N, 1, 1, S]` (−∞ at key 2 of the
/// first sample and key 3 of the second), beside its 3-D mask `[N·H, L, S]` as `[N, H, L, S]`.
fn padded_and_3d_masks() -> Tensor {
    let mut padding = vec![0.0f64; 8];
    (padding[2], padding[7]) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let padding = Tensor::from_vec(padding, &[2, 1, 1, 4]);
    &wave(&[4, 5, 4], 0.17, 0.0, f64::cos).reshape(&[2, 2, 5, 4]) + &padding
}

#[test]
fn attention_of_other_key_widths_without_bias_and_unbatched_is_pytorchs() {
    let t = torch();
    let x = wave(&[2, 5, 8], 0.37, 0.0, f64::sin);
    let (key, value) = (
        wave(&[2, 4, 6], 0.23, 0.0, f64::cos),
        wave(&[2, 4, 3], 0.41, 0.3, f64::sin),
    );
    let opts = Attention::new().mask(&padded_and_3d_masks());
    for (name, mha, names) in [
        (
            "mha_kv",
            MultiheadAttention::new(8, 2).kdim_vdim(6, 3),
            &[
                "q_proj_weight",
                "k_proj_weight",
                "v_proj_weight",
                "in_proj_bias",
            ][..],
        ),
        (
            "mha_nobias",
            MultiheadAttention::new(8, 2).kdim_vdim(6, 3).without_bias(),
            &["q_proj_weight", "k_proj_weight", "v_proj_weight"][..],
        ),
    ] {
        load_torch_state(&mha, &t, name);
        let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        want.push("out_proj.weight".into());
        if name == "mha_kv" {
            want.push("out_proj.bias".into());
        }
        let got: Vec<String> = mha.params().into_iter().map(|(n, _)| n).collect();
        assert_eq!(got, want, "{name}");
        let (y, w) = mha.attend_with_head_weights_in(&x, &key, &value, &opts, Mode::Eval);
        assert_close(&y, &t[&format!("{name}.out")], 1e-12, name);
        assert_close(&w, &t[&format!("{name}.weights")], 1e-12, name);
        // Unbatched inputs [T, ·]: the first sample's results, without the batch axis.
        let first = |a: &Tensor| a.narrow(0, 0, 1).squeeze(0);
        let one = Attention::new().mask(&first(&padded_and_3d_masks()));
        let (y1, w1) =
            mha.attend_with_weights_in(&first(&x), &first(&key), &first(&value), &one, Mode::Eval);
        assert_eq!((y1.shape(), w1.shape()), (&[5, 8][..], &[5, 4][..]));
        assert_close(&y1, &first(&y), 1e-12, name);
        assert_close(&w1, &first(&w).mean_axes(&[0], false), 1e-12, name);
        assert_close(
            &mha.attend(&first(&x), &first(&key), &first(&value), &one),
            &y1,
            1e-12,
            name,
        );
    }
    let layer = TransformerEncoderLayer::new(8, 2)
        .without_bias()
        .dim_feedforward(16)
        .dropout(0.0)
        .layer_norm_eps(1e-3)
        .activation(Tensor::tanh);
    load_torch_state(&layer, &t, "enc_custom");
    assert!(layer.params().iter().all(|(n, _)| !n.ends_with("bias")));
    let y = Layer::forward(&layer, &x, Mode::Eval);
    assert_close(
        &y,
        &t["enc_custom.out"],
        1e-12,
        "encoder layer without bias",
    );
}

#[test]
fn an_embeddings_padding_row_is_zero_and_never_learns() {
    let emb = Embedding::new(6, 4).padding_idx(3);
    assert_eq!(emb.name(), "Embedding(6, 4, padding_idx=3)");
    let table = emb.weight().tensor();
    assert_eq!(table.narrow(0, 3, 1).to_vec::<f32>(), [0.0; 4]);
    // A value set later is what it looks up; still no gradient reaches it.
    let set = Tensor::from_vec((0..24).map(|v| v as f32).collect(), &[6, 4]);
    emb.weight().set(&set);
    let ids = Tensor::from_vec(vec![3i64, 1, 3, 5], &[2, 2]);
    let y = Layer::forward(&emb, &ids, Mode::Train);
    assert_eq!(y.to_vec::<f32>()[..4], [12.0, 13.0, 14.0, 15.0]);
    let g = (&y * &y)
        .sum()
        .backward()
        .get(&emb.weight().tensor())
        .unwrap();
    assert_eq!(g.narrow(0, 3, 1).to_vec::<f32>(), [0.0; 4]);
    assert_eq!(g.narrow(0, 1, 1).to_vec::<f32>(), [8.0, 10.0, 12.0, 14.0]);
    let bad = std::panic::catch_unwind(|| Embedding::new(6, 4).padding_idx(6));
    let msg = bad.err().unwrap().downcast::<String>().unwrap();
    assert!(msg.contains("padding_idx 6"), "{msg}");
}

#[test]
fn transformer_layers_have_first_and_second_derivatives() {
    let mha = MultiheadAttention::new(4, 2);
    let enc = TransformerEncoderLayer::new(4, 2)
        .dim_feedforward(6)
        .dropout(0.0)
        .gelu();
    let (narrow, bare) = (
        MultiheadAttention::new(4, 2).kdim_vdim(3, 2).without_bias(),
        TransformerEncoderLayer::new(4, 2)
            .dim_feedforward(6)
            .dropout(0.0)
            .without_bias()
            .activation(Tensor::tanh),
    );
    for m in [&mha as &dyn Module, &enc, &narrow, &bare] {
        for (_, p) in m.state_params() {
            p.set_dtype(DType::F64);
        }
    }
    let x = randn(&[2, 3, 4], 9);
    check(
        "MultiheadAttention",
        |t| mha.attend(&t[0], &t[0], &t[0], &Attention::new().causal(true)),
        std::slice::from_ref(&x),
    );
    check(
        "TransformerEncoderLayer",
        |t| Layer::forward(&enc, &t[0], Mode::Eval),
        std::slice::from_ref(&x),
    );
    check(
        "MultiheadAttention, other key and value widths, no bias",
        |t| narrow.attend(&t[0], &t[1], &t[2], &Attention::new()),
        &[x.clone(), randn(&[2, 5, 3], 11), randn(&[2, 5, 2], 12)],
    );
    check(
        "TransformerEncoderLayer without bias, tanh",
        |t| Layer::forward(&bare, &t[0], Mode::Eval),
        std::slice::from_ref(&x),
    );
    check(
        "rms_norm",
        |t| t[0].rms_norm(Some(&t[1]), Some(1e-5)),
        &[x, randn(&[4], 10)],
    );
}

#[test]
fn triangles_masked_fill_and_top_k() {
    let x = wave(&[2, 3, 4], 0.9, 0.2, f64::sin);
    let v = x.tril(0).to_vec::<f64>();
    let u = x.triu(1).to_vec::<f64>();
    let all = x.to_vec::<f64>();
    for (p, a) in all.iter().enumerate() {
        let (i, j) = ((p / 4) % 3, p % 4);
        assert_eq!(v[p], if j <= i { *a } else { 0.0 });
        assert_eq!(u[p], if j > i { *a } else { 0.0 });
        assert_eq!(v[p] + u[p], *a);
    }
    // Diagonal −1: row 1 keeps column 0 (on it) and zeroes column 1 (the main diagonal).
    let below = x.tril(-1).to_vec::<f64>();
    assert_eq!((below[4], below[5]), (all[4], 0.0));
    let ints = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]);
    assert_eq!(ints.triu(0).to_vec::<i64>(), vec![1, 2, 0, 4]);
    let hide = x.gt(&Tensor::scalar(0.5f64));
    let filled = x.masked_fill(&hide, -1e9);
    for (a, f) in all.iter().zip(filled.to_vec::<f64>()) {
        assert_eq!(f, if *a > 0.5 { -1e9 } else { *a });
    }
    let row = Tensor::from_vec(vec![0.5f64, 3.0, -1.0, 3.0, 2.0], &[1, 5]);
    let (vals, idx) = row.topk(3);
    assert_eq!(vals.to_vec::<f64>(), vec![3.0, 3.0, 2.0]);
    assert_eq!(idx.to_vec::<i64>(), vec![1, 3, 4]);
    assert_eq!(idx.dtype(), DType::I64);
    // The smallest first (ties in order, NaN never before a number), along another axis.
    let nan = Tensor::from_vec(vec![f64::NAN, 3.0, -1.0, 3.0, -1.0, 2.0], &[1, 6]);
    let (vals, idx) = nan.topk_along(4, 1, false);
    assert_eq!(vals.to_vec::<f64>(), vec![-1.0, -1.0, 2.0, 3.0]);
    assert_eq!(idx.to_vec::<i64>(), vec![2, 4, 5, 1]);
    assert_eq!(nan.topk(1).1.to_vec::<i64>(), vec![0]);
    let (one, at) = Tensor::scalar(2.5f64).topk(1);
    assert_eq!((one.shape(), one.item(), at.item()), (&[][..], 2.5, 0.0));
    let cols = row.reshape(&[5, 1]).broadcast_to(&[5, 2]).contiguous();
    let (vals, idx) = cols.topk_along(2, 0, true);
    assert_eq!(vals.shape(), &[2, 2]);
    assert_eq!(vals.to_vec::<f64>(), vec![3.0, 3.0, 3.0, 3.0]);
    assert_eq!(idx.to_vec::<i64>(), vec![1, 1, 3, 3]);
    let (low, low_idx) = cols.topk_along(2, -2, false);
    assert_eq!(low.to_vec::<f64>(), vec![-1.0, -1.0, 0.5, 0.5]);
    assert_eq!(low_idx.to_vec::<i64>(), vec![2, 2, 0, 0]);
    check("tril", |t| t[0].tril(1), std::slice::from_ref(&x));
    check("triu", |t| t[0].triu(-1), std::slice::from_ref(&x));
    check(
        "masked_fill",
        |t| t[0].masked_fill(&hide, 2.0),
        std::slice::from_ref(&x),
    );
    check("topk values", |t| t[0].topk(2).0, std::slice::from_ref(&x));
    check(
        "smallest values along the first axis",
        |t| t[0].topk_along(2, 0, false).0,
        std::slice::from_ref(&x),
    );
    check("gelu_tanh", |t| t[0].gelu_tanh(), std::slice::from_ref(&x));
    // PyTorch's F.gelu(approximate="tanh") at −3, −2, ..., 3.
    let g = Tensor::linspace(-3.0, 3.0, 7, DType::F64)
        .gelu_tanh()
        .to_vec::<f64>();
    let torch = [
        -0.0036373920817729943,
        -0.04540230591222494,
        -0.15880800939172324,
        0.0,
        0.8411919906082768,
        1.954597694087775,
        2.996362607918227,
    ];
    for (a, b) in g.iter().zip(torch) {
        assert!((a - b).abs() < 1e-15, "{a} vs {b}");
    }
}

#[test]
fn multinomial_draws_follow_the_weights() {
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    let probs = Tensor::from_vec(vec![0.1f64, 0.0, 0.6, 0.3], &[1, 4]);
    let draws = probs.multinomial(20000, true, &mut StdRng::seed_from_u64(3));
    assert_eq!(draws.shape(), &[1, 20000]);
    let again = probs.multinomial(20000, true, &mut StdRng::seed_from_u64(3));
    assert_eq!(draws.to_vec::<i64>(), again.to_vec::<i64>());
    let mut counts = [0usize; 4];
    draws
        .to_vec::<i64>()
        .iter()
        .for_each(|&c| counts[c as usize] += 1);
    assert_eq!(counts[1], 0);
    for (c, p) in counts.iter().zip([0.1, 0.0, 0.6, 0.3]) {
        assert!((*c as f64 / 20000.0 - p).abs() < 0.015, "{counts:?}");
    }
    let distinct = probs
        .multinomial(3, false, &mut StdRng::seed_from_u64(4))
        .to_vec::<i64>();
    let mut sorted = distinct.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![0, 2, 3]);
    // Careless calls are refused with what was wrong, before any draw.
    let rng = &mut StdRng::seed_from_u64(5);
    let empty = Tensor::zeros(&[0], DType::F64);
    let msg = crate::common::panic_message(|| drop(empty.multinomial(1, false, rng)));
    assert!(
        msg.contains("multinomial: the distribution is empty"),
        "{msg}"
    );
    let msg = crate::common::panic_message(|| drop(probs.multinomial(5, false, rng)));
    assert!(
        msg.contains("cannot draw 5 samples from 4 categories"),
        "{msg}"
    );
    let msg = crate::common::panic_message(|| drop(probs.multinomial(1 << 62, true, rng)));
    assert!(msg.contains("do not fit in memory"), "{msg}");
}

#[test]
fn dropout_masks_and_edges() {
    // PyTorch's causal mask is triu of a −∞ matrix: the rest must be 0, not NaN.
    let hide = Tensor::full(&[3, 3], f64::NEG_INFINITY, DType::F64).triu(1);
    assert_eq!(
        hide.to_vec::<f64>()[..4],
        [0.0, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0]
    );
    let q = randn(&[1, 3, 4], 11);
    let masked = q.scaled_dot_product_attention(&q, &q, &Attention::new().mask(&hide));
    let causal = q.scaled_dot_product_attention(&q, &q, &Attention::new().causal(true));
    assert_close(&masked, &causal, 1e-14, "triu mask as causal");
    // No keys: an empty sum, zeros (as [L, 0] @ [0, Ev]).
    let none = q.scaled_dot_product_attention(
        &Tensor::zeros(&[1, 0, 4], DType::F64),
        &Tensor::zeros(&[1, 0, 2], DType::F64),
        &Attention::new(),
    );
    assert_eq!(none.to_vec::<f64>(), vec![0.0; 6]);
    // No width (E = 0): every score is 0 whatever the scale, so the mean of the values (as
    // PyTorch gives), not 0·∞.
    let v = Tensor::from_vec((0..6).map(f64::from).collect(), &[1, 3, 2]);
    let flat = Tensor::zeros(&[1, 2, 0], DType::F64).scaled_dot_product_attention(
        &Tensor::zeros(&[1, 3, 0], DType::F64),
        &v,
        &Attention::new(),
    );
    assert_eq!(flat.to_vec::<f64>(), vec![2.0, 3.0, 2.0, 3.0]);
    // Dropout on the attention probabilities acts in training mode only.
    let mha = MultiheadAttention::new(4, 2).dropout(0.5);
    let x = Tensor::randn_default(&[2, 3, 4], DType::F32);
    let eval = Layer::forward(&mha, &x, Mode::Eval);
    assert_eq!(
        eval.to_vec::<f32>(),
        mha.attend(&x, &x, &x, &Attention::new()).to_vec::<f32>()
    );
    assert_ne!(
        Layer::forward(&mha, &x, Mode::Train).to_vec::<f32>(),
        eval.to_vec::<f32>()
    );
    let enc = TransformerEncoderLayer::new(4, 2).dim_feedforward(8);
    assert!(enc
        .rng_streams()
        .iter()
        .any(|(n, _)| n == "self_attn.dropout.rng"));
}

/// The weights dropout left, read through identity values: row `i` of the output is row `i`
/// of `P ⊙ D` for values `[S, S]` = I.
fn dropped_weights(q: &Tensor, k: &Tensor, opts: &Attention) -> Tensor {
    let s = k.shape()[k.ndim() - 2];
    let mut lead = k.shape()[..k.ndim() - 2].to_vec();
    lead.extend([s, s]);
    let eye: Vec<f64> = (0..s * s)
        .map(|x| if x % (s + 1) == 0 { 1.0 } else { 0.0 })
        .collect();
    let eye = Tensor::from_vec(eye, &[s, s]).broadcast_to(&lead);
    q.scaled_dot_product_attention(k, &eye, opts)
}

/// Dropout on the weights (PyTorch's `dropout_p`): each weight kept or zeroed, the kept ones
/// scaled by 1 / (1 − p), about a fraction p dropped; the key fixes the pattern, and the
/// forward and both backward paths drop the same weights.
#[test]
fn attention_dropout_drops_weights_in_a_pattern_its_key_fixes() {
    let (q, k) = (randn(&[2, 3, 40, 8], 1), randn(&[2, 3, 90, 8], 2));
    let p = 0.3;
    let full = dropped_weights(&q, &k, &Attention::new().causal(true)).to_vec::<f64>();
    let opts = Attention::new().causal(true).dropout(p, 42);
    let dropped = dropped_weights(&q, &k, &opts).to_vec::<f64>();
    let (mut kept, mut seen) = (0, 0);
    for (&w, &d) in full.iter().zip(&dropped) {
        if w == 0.0 {
            assert_eq!(d, 0.0, "a hidden key stays hidden");
            continue;
        }
        seen += 1;
        if d != 0.0 {
            kept += 1;
            assert!(
                (d - w / (1.0 - p)).abs() < 1e-12 * (1.0 + d),
                "{d} vs {w} / (1 − p)"
            );
        }
    }
    let rate = 1.0 - kept as f64 / seen as f64;
    assert!(
        (rate - p).abs() < 0.03,
        "dropped {rate} of {seen} weights, want about {p}"
    );
    // The key fixes the pattern: the same one repeats it, another differs.
    assert_eq!(dropped_weights(&q, &k, &opts).to_vec::<f64>(), dropped);
    let other = Attention::new().causal(true).dropout(p, 43);
    assert_ne!(dropped_weights(&q, &k, &other).to_vec::<f64>(), dropped);
    // p = 0 is no dropout, p = 1 drops everything.
    assert_eq!(
        dropped_weights(&q, &k, &Attention::new().causal(true).dropout(0.0, 42)).to_vec::<f64>(),
        full
    );
    let none = dropped_weights(&q, &k, &Attention::new().dropout(1.0, 42));
    assert!(none.to_vec::<f64>().iter().all(|&w| w == 0.0));
}

#[test]
fn attention_dropout_has_its_derivatives_on_every_path() {
    // The fused backward against the tensor-op rule.
    fused_is_the_rule_over_blocks(
        |mask| {
            vec![
                Attention::new().mask(mask).dropout(0.4, 9),
                Attention::new().causal(true).dropout(0.2, 10),
            ]
        },
        "with dropout",
    );
    // First and second derivatives against finite differences: the pattern is fixed by the
    // key, so the function is smooth in every input.
    let (q, k, v, m) = (
        randn(&[2, 3, 4], 5),
        randn(&[2, 5, 4], 6),
        randn(&[2, 5, 3], 7),
        randn(&[3, 5], 8),
    );
    check(
        "attention with dropout",
        |t| {
            let opts = Attention::new().mask(&t[3]).dropout(0.5, 3);
            t[0].scaled_dot_product_attention(&t[1], &t[2], &opts)
        },
        &[q, k, v, m],
    );
}

#[test]
fn multihead_attention_drops_in_training_from_its_stream() {
    // Training mode draws a new pattern per call from the layer's stream; the weights that
    // `attend_with_weights_in` returns are the dropped ones, as PyTorch's, their output too.
    let mha = MultiheadAttention::new(8, 2).dropout(0.5);
    let x = randn(&[2, 6, 8], 4).to_dtype(DType::F32);
    let opts = Attention::new();
    let first = mha
        .attend_in(&x, &x, &x, &opts, Mode::Train)
        .to_vec::<f32>();
    let second = mha
        .attend_in(&x, &x, &x, &opts, Mode::Train)
        .to_vec::<f32>();
    assert_ne!(first, second, "each call draws a new pattern");
    let eval = mha.attend(&x, &x, &x, &opts).to_vec::<f32>();
    assert_ne!(first, eval);
    let (_, eval_heads) = mha.attend_with_head_weights_in(&x, &x, &x, &opts, Mode::Eval);
    assert_eq!(eval_heads.shape(), &[2, 2, 6, 6]);
    let state = mha.rng_streams()[0].1.state();
    let (y, weights) = mha.attend_with_weights_in(&x, &x, &x, &opts, Mode::Train);
    mha.rng_streams()[0].1.set_state(state);
    let (y_heads, heads) = mha.attend_with_head_weights_in(&x, &x, &x, &opts, Mode::Train);
    assert_eq!(y.to_vec::<f32>(), y_heads.to_vec::<f32>());
    assert_eq!(
        weights.to_vec::<f32>(),
        heads.mean_axes(&[1], false).to_vec::<f32>()
    );
    // Each weight dropped (0) or kept and scaled by 1 / (1 − ½).
    let kept = heads.to_vec::<f32>();
    for (t, e) in kept.iter().zip(eval_heads.to_vec::<f32>()) {
        assert!(*t == 0.0 || (t - 2.0 * e).abs() <= 1e-6, "{t} from {e}");
    }
    assert!(kept.contains(&0.0) && kept.iter().any(|&t| t > 0.0));
    // The same draw through the fused op gives the same output.
    mha.rng_streams()[0].1.set_state(state);
    let fused = mha.attend_in(&x, &x, &x, &opts, Mode::Train);
    assert_close(
        &fused.to_dtype(DType::F64),
        &y.to_dtype(DType::F64),
        1e-5,
        "fused and unfused dropout",
    );
}

#[test]
fn an_integer_mask_is_refused_not_added_as_numbers() {
    let (q, k, v) = (randn(&[3, 4], 9), randn(&[5, 4], 10), randn(&[5, 2], 11));
    let keep = Tensor::from_vec(vec![1i64, 1, 0, 0, 1], &[5]);
    let msg = crate::common::panic_message(|| {
        q.scaled_dot_product_attention(&k, &v, &Attention::new().mask(&keep));
    });
    assert!(
        msg.contains("the mask is i64") && msg.contains("-inf"),
        "{msg}"
    );
}
