//! `ferrograd::func`: gradients, pullbacks, Hessian-vector products, Jacobians and Hessians
//! of closures, composed with each other, against their closed forms.

use ferrograd::func;
use ferrograd::prelude::*;

use crate::common::{panic_message, randn};

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>()
}

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{a:?} against {b:?}"
        );
    }
}

#[test]
fn grad_of_a_closure_and_grad_of_grad() {
    let x = Tensor::from_vec(vec![1.0f64, -2.0, 0.5], &[3]);
    let (g, y) = func::grad_and_value(|p: &[Tensor]| p[0].powf(3.0).sum(), &[&x]);
    assert_eq!(y.item(), 1.0 - 8.0 + 0.125);
    assert_eq!(values(&g[0]), [3.0, 12.0, 0.75]);
    // d/dx of Σ 3x² is 6x: grad composed with grad.
    let second = func::grad(
        |p: &[Tensor]| func::grad(|q: &[Tensor]| q[0].powf(3.0).sum(), &[&p[0]])[0].sum(),
        &[&x],
    );
    assert_eq!(values(&second[0]), [6.0, -12.0, 3.0]);
    // A primal the closure does not read gets zeros; the primals stay untouched leaves.
    let w = Tensor::ones(&[2], DType::F64);
    let g = func::grad(|p: &[Tensor]| p[0].sum(), &[&x, &w]);
    assert_eq!(values(&g[1]), [0.0, 0.0]);
    assert!(!x.is_tracked() && !w.is_tracked());
}

#[test]
fn vjp_pulls_back_any_cotangent_as_often_as_asked() {
    let a = randn(&[4, 3], 1);
    let x = randn(&[3], 2);
    let (y, pullback) = func::vjp(
        |p: &[Tensor]| a.matmul(&p[0].reshape(&[3, 1])).reshape(&[4]),
        &[&x],
    );
    assert_eq!(y.shape(), &[4]);
    for seed in [3, 4] {
        let v = randn(&[4], seed);
        let got = pullback(&v).remove(0);
        let want = v.reshape(&[1, 4]).matmul(&a).reshape(&[3]);
        close(&values(&got), &values(&want));
    }
    let msg = panic_message(|| drop(pullback(&randn(&[3], 5))));
    assert!(
        msg.contains("cotangent [3] must have the output's shape [4]"),
        "{msg}"
    );
}

#[test]
fn jacobians_and_hessians_have_their_closed_forms() {
    let a = randn(&[2, 3], 6);
    let x = randn(&[3], 7);
    // A linear map's Jacobian is its matrix, shaped output ++ input.
    let j = func::jacrev(|x: &Tensor| a.matmul(&x.reshape(&[3, 1])).reshape(&[2]), &x);
    assert_eq!(j.shape(), &[2, 3]);
    close(&values(&j), &values(&a));
    // Element-wise sin: diag(cos x).
    let j = func::jacrev(|x: &Tensor| x.sin(), &x);
    let cos = values(&x.cos());
    let want: Vec<f64> = (0..9)
        .map(|k| if k % 4 == 0 { cos[k / 4] } else { 0.0 })
        .collect();
    close(&values(&j), &want);
    // xᵀ B x has the Hessian B + Bᵀ, whatever x.
    let b = randn(&[3, 3], 8);
    let quadratic = |x: &Tensor| {
        x.reshape(&[1, 3])
            .matmul(&b)
            .matmul(&x.reshape(&[3, 1]))
            .sum()
    };
    let h = func::hessian(quadratic, &x);
    close(&values(&h), &values(&(&b + &b.t())));
    // hvp is that Hessian times a vector, without forming it.
    let v = randn(&[3], 9);
    let hv = func::hvp(|p: &[Tensor]| quadratic(&p[0]), &[&x], &[&v]).remove(0);
    close(
        &values(&hv),
        &values(&h.matmul(&v.reshape(&[3, 1])).reshape(&[3])),
    );
    // A matrix input: the Hessian is shaped [2, 2, 2, 2].
    let m = randn(&[2, 2], 10);
    let h = func::hessian(|m: &Tensor| m.square().sum(), &m);
    assert_eq!(h.shape(), &[2, 2, 2, 2]);
    let want: Vec<f64> = (0..16)
        .map(|k| if k % 5 == 0 { 2.0 } else { 0.0 })
        .collect();
    assert_eq!(values(&h), want);
}
