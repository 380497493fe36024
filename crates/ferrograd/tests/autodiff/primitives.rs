//! Every element-wise primitive of one tensor and of two, walked from the tables that declare
//! them (`Unary::examples()`, `Binary::examples()`): each has a derivative checked to second
//! order in f64 (with broadcasting for two), or none by declaration; each runs in a static
//! graph as it runs eagerly, and the dtype rule refuses an integer input with the same message
//! in both. A primitive added to a table is checked here without a line of this file changing.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::common::check;
use ferrograd::prelude::*;
use ferrograd::{Binary, BinaryKind, Unary, UnaryDomain};
use rand::rngs::StdRng;
use rand::SeedableRng;

/// Points where `op` is smooth, in f64, shaped `shape`.
fn sample(op: Unary, shape: &[usize], seed: u64) -> Tensor {
    sample_on(op.smooth_on(), shape, seed)
}

/// Points of `domain`, in f64, shaped `shape`.
fn sample_on(domain: UnaryDomain, shape: &[usize], seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    let magnitude = Tensor::rand_uniform(shape, 0.2, 2.0, DType::F64, &mut rng);
    match domain {
        UnaryDomain::Real => Tensor::randn(shape, DType::F64, &mut rng),
        UnaryDomain::Positive => magnitude,
        UnaryDomain::NonZero => {
            let sign = Tensor::rand_uniform(shape, -1.0, 1.0, DType::F64, &mut rng).sign();
            &magnitude * &sign
        }
    }
}

fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn the_table_names_each_primitive_once() {
    let ops = Unary::examples();
    let mut names: Vec<&str> = ops.iter().map(|op| op.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), ops.len(), "a name appears twice in the table");
    assert!(ops.len() >= 22, "the table lost entries: {names:?}");
    for op in ops {
        assert!(op.to_string().starts_with(op.name()));
        assert_eq!(
            op.constants().is_empty(),
            !op.to_string().contains('('),
            "{op}"
        );
    }
}

#[test]
fn every_differentiable_primitive_passes_gradcheck_to_second_order() {
    for (i, op) in Unary::examples().into_iter().enumerate() {
        if !op.is_differentiable() {
            continue;
        }
        let x = sample(op, &[3, 4], 10 + i as u64);
        check(
            &op.to_string(),
            |t| op.apply(&t[0]),
            std::slice::from_ref(&x),
        );
        // On a strided view too, and with a tracked factor after it, so that the second
        // derivative passes through the rule's own rule.
        let y = crate::common::randn(&[4, 3], 50 + i as u64);
        check(
            &format!("{op} of a transposed view, times y"),
            |t| &op.apply(&t[0].transpose(0, 1)) * &t[1],
            &[x, y],
        );
    }
}

#[test]
fn a_primitive_without_a_derivative_says_so_in_backward() {
    for op in Unary::examples()
        .into_iter()
        .filter(|op| !op.is_differentiable())
    {
        let x = sample(op, &[5], 3).requires_grad();
        let err = op.apply(&x).sum().try_backward().unwrap_err().to_string();
        assert!(err.contains(op.name()), "{op}: {err}");
    }
}

#[test]
fn every_primitive_runs_in_a_graph_bit_for_bit_as_eagerly() {
    for (i, op) in Unary::examples().into_iter().enumerate() {
        for dtype in [DType::F32, DType::F64] {
            let x = sample(op, &[2, 3], 70 + i as u64).to_dtype(dtype);
            let g = Graph::new();
            let p = g.placeholder("x");
            let y = p.unary(op);
            let got = Session::new(&g)
                .run(&y, &Feed::new().with(&p, x.clone()))
                .unwrap();
            let want = op.apply(&x);
            assert_eq!(got.dtype(), dtype, "{op}");
            assert_eq!(
                got.to_vec::<f64>()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                want.to_vec::<f64>()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                "{op} in {dtype}"
            );
            assert!(g.to_dot().contains(&op.to_string()), "{op} in the listing");
        }
    }
}

#[test]
fn an_integer_input_is_refused_with_one_message_eagerly_and_in_a_graph() {
    for op in Unary::examples() {
        let rule = op.result_dtype(DType::I64).unwrap_err();
        let x = Tensor::from_vec(vec![1i64, 2], &[2]);
        let eager = panic_message(|| {
            op.apply(&x);
        });
        assert!(eager.contains(&rule), "{op}: {eager}");
        let g = Graph::new();
        let p = g.placeholder_with("x", &[Some(2)], DType::I64);
        let graph = panic_message(|| {
            p.unary(op);
        });
        assert!(graph.contains(&rule), "{op}: {graph}");
        assert_eq!(op.result_dtype(DType::F32), Ok(DType::F32));
    }
}

#[test]
fn log1p_and_expm1_keep_the_digits_that_log_and_exp_lose() {
    let small = [1e-10f64, -3e-12, 0.5, -0.5, 20.0];
    let x = Tensor::from_vec(small.to_vec(), &[5]);
    let log1p = x.log1p().to_vec::<f64>();
    let expm1 = x.expm1().to_vec::<f64>();
    for (k, v) in small.iter().enumerate() {
        assert_eq!(log1p[k], v.ln_1p(), "log1p({v})");
        assert_eq!(expm1[k], v.exp_m1(), "expm1({v})");
    }
    // In f32 the naive forms round 1 + x to 1 and give 0; these keep x.
    let x32 = Tensor::from_vec(vec![1e-9f32], &[1]);
    assert_eq!(x32.log1p().to_vec::<f32>(), vec![1e-9]);
    assert_eq!(x32.expm1().to_vec::<f32>(), vec![1e-9]);
    assert_eq!((&x32 + 1.0).log().to_vec::<f32>(), vec![0.0]);
    // Their derivatives: 1/(1 + x) and eˣ.
    let w = Tensor::from_vec(vec![0.25f64], &[1]).requires_grad();
    assert_eq!(grad(&w.log1p().sum(), &[&w])[0].item(), 1.0 / 1.25);
    let d = grad(&w.expm1().sum(), &[&w])[0].item();
    assert!((d - 0.25f64.exp()).abs() < 1e-15, "{d}");
}

/// Operands for a primitive of two tensors where it is smooth: `[3, 4]` against `[4]`, so that
/// every test also broadcasts (and the gradient of the second is a sum).
fn operands(op: Binary, seed: u64) -> [Tensor; 2] {
    let (da, db) = op.smooth_on();
    [sample_on(da, &[3, 4], seed), sample_on(db, &[4], seed + 1)]
}

#[test]
fn the_binary_table_names_each_primitive_once() {
    let ops = Binary::examples();
    let mut names: Vec<&str> = ops.iter().map(|op| op.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), ops.len(), "a name appears twice in the table");
    assert!(ops.len() >= 12, "the table lost entries: {names:?}");
    for op in ops {
        assert_eq!(op.to_string(), op.name());
        // Exactly the comparisons lack a derivative.
        assert_eq!(
            op.is_differentiable(),
            op.kind() == BinaryKind::Arithmetic,
            "{op}"
        );
    }
}

#[test]
fn every_differentiable_binary_primitive_passes_gradcheck_to_second_order() {
    for (i, op) in Binary::examples().into_iter().enumerate() {
        if !op.is_differentiable() {
            continue;
        }
        let [a, b] = operands(op, 100 + 2 * i as u64);
        check(
            &format!("{op}(a, b)"),
            |t| op.apply(&t[0], &t[1]),
            &[a.clone(), b.clone()],
        );
        // The broadcast operand first, the other a strided view, and a tracked factor after
        // it, so that the second derivative passes through the rule's own rule. (Only where
        // the operands may swap domains: not the divisor.)
        let y = crate::common::randn(&[3, 4], 150 + i as u64);
        let b_first =
            |t: &[Tensor]| &op.apply(&t[1].reshape(&[1, 4]), &t[0].transpose(0, 1)) * &t[2];
        if op.smooth_on().0 == op.smooth_on().1 {
            let a_t = a.transpose(0, 1).contiguous();
            check(
                &format!("{op}(b, a as a transposed view) times y"),
                b_first,
                &[a_t, b, y],
            );
        }
    }
}

#[test]
fn a_comparison_says_so_in_backward() {
    for op in Binary::examples()
        .into_iter()
        .filter(|op| !op.is_differentiable())
    {
        let [a, b] = operands(op, 7);
        let a = a.requires_grad();
        let err = op
            .apply(&a, &b)
            .sum()
            .try_backward()
            .unwrap_err()
            .to_string();
        assert!(err.contains(op.name()), "{op}: {err}");
    }
}

#[test]
fn every_binary_primitive_runs_in_a_graph_bit_for_bit_as_eagerly() {
    for (i, op) in Binary::examples().into_iter().enumerate() {
        for (da, db) in [
            (DType::F32, DType::F32),
            (DType::F64, DType::F64),
            (DType::F32, DType::F64),
        ] {
            let [a, b] = operands(op, 200 + 2 * i as u64);
            // Ties, for the comparisons and the max/min.
            let a = Tensor::cat(&[&a.narrow(0, 0, 2), &b.reshape(&[1, 4])], 0);
            let (a, b) = (a.to_dtype(da), b.to_dtype(db));
            let g = Graph::new();
            let (pa, pb) = (g.placeholder("a"), g.placeholder("b"));
            let y = pa.binary(op, &pb);
            let feed = Feed::new().with(&pa, a.clone()).with(&pb, b.clone());
            let got = Session::new(&g).run(&y, &feed).unwrap();
            let want = op.apply(&a, &b);
            assert_eq!(got.dtype(), want.dtype(), "{op}");
            assert_eq!(got.shape(), &[3, 4], "{op}");
            let bits = |t: &Tensor| {
                t.to_vec::<f64>()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&got), bits(&want), "{op} in {da} and {db}");
            assert!(g.to_dot().contains(op.name()), "{op} in the listing");
        }
    }
}

#[test]
fn the_binary_dtype_rule_is_one_eagerly_and_in_a_graph() {
    let (a, b) = (
        Tensor::from_vec(vec![1i64, 2], &[2]),
        Tensor::from_vec(vec![2i64, 2], &[2]),
    );
    for op in Binary::examples() {
        let g = Graph::new();
        let pa = g.placeholder_with("a", &[Some(2)], DType::I64);
        let pb = g.placeholder_with("b", &[Some(2)], DType::I64);
        match op.result_dtype(DType::I64, DType::I64) {
            Err(rule) => {
                // Arithmetic refuses integers, with one message.
                assert_eq!(op.kind(), BinaryKind::Arithmetic, "{op}");
                let eager = panic_message(|| {
                    op.apply(&a, &b);
                });
                assert!(eager.contains(&rule), "{op}: {eager}");
                let graph = panic_message(|| {
                    pa.binary(op, &pb);
                });
                assert!(graph.contains(&rule), "{op}: {graph}");
            }
            Ok(d) => {
                // A comparison of integers is an integer mask, in both modes.
                assert_eq!((op.kind(), d), (BinaryKind::Comparison, DType::I64), "{op}");
                let y = pa.binary(op, &pb);
                let feed = Feed::new().with(&pa, a.clone()).with(&pb, b.clone());
                let got = Session::new(&g).run(&y, &feed).unwrap();
                let want = op.apply(&a, &b);
                assert_eq!(got.dtype(), DType::I64, "{op}");
                assert_eq!(got.to_vec::<i64>(), want.to_vec::<i64>(), "{op}");
            }
        }
        assert_eq!(op.result_dtype(DType::F32, DType::F64), Ok(DType::F64));
    }
}
