//! Scaled dot-product attention: against PyTorch's float64 values
//! (`scripts/export_torch_attention.py` wrote `tests/fixtures/torch_attention.safetensors`),
//! against its own definition written with tensor ops, and its first and second derivatives
//! against finite differences.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{check, randn};
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
