//! `Tensor::einsum` against a direct sum over every assignment of its subscripts, in f64:
//! contractions, diagonals, broadcasting, ellipses, PyTorch's implicit result; first and
//! second derivatives; and the errors of malformed equations.

use crate::common::{check, panic_message, randn};
use ferrograd::prelude::*;

/// The equation summed directly: every assignment of every letter (`spec` in letters only,
/// with `->`), each operand read at its letters' values, products added into the result.
fn direct(spec: &str, operands: &[&Tensor]) -> (Vec<usize>, Vec<f64>) {
    let (lhs, rhs) = spec.split_once("->").expect("explicit result");
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = rhs.chars().collect();
    let mut letters: Vec<(char, usize)> = Vec::new();
    for (term, t) in terms.iter().zip(operands) {
        for (&c, &n) in term.iter().zip(t.shape()) {
            match letters.iter_mut().find(|(l, _)| *l == c) {
                None => letters.push((c, n)),
                Some((_, m)) => *m = (*m).max(n),
            }
        }
    }
    let size = |c: char| letters.iter().find(|(l, _)| *l == c).unwrap().1;
    let out_shape: Vec<usize> = out.iter().map(|&c| size(c)).collect();
    let mut result = vec![0.0; out_shape.iter().product()];
    let values: Vec<Vec<f64>> = operands.iter().map(|t| t.to_vec::<f64>()).collect();
    let total: usize = letters.iter().map(|(_, n)| n).product();
    for flat in 0..total {
        let mut rest = flat;
        let mut at = vec![0; letters.len()];
        for (i, (_, n)) in letters.iter().enumerate().rev() {
            at[i] = rest % n;
            rest /= n;
        }
        let coord = |c: char| at[letters.iter().position(|(l, _)| *l == c).unwrap()];
        // A length-1 axis is read at 0 whatever its letter's value (broadcasting).
        let offset = |chars: &[char], shape: &[usize]| {
            chars
                .iter()
                .zip(shape)
                .fold(0, |o, (&c, &n)| o * n + if n == 1 { 0 } else { coord(c) })
        };
        let product: f64 = terms
            .iter()
            .zip(operands)
            .zip(&values)
            .map(|((term, t), v)| v[offset(term, t.shape())])
            .product();
        result[offset(&out, &out_shape)] += product;
    }
    (out_shape, result)
}

fn assert_matches(spec: &str, direct_spec: &str, operands: &[&Tensor]) {
    let got = Tensor::einsum(spec, operands);
    let (shape, want) = direct(direct_spec, operands);
    assert_eq!(got.shape(), shape.as_slice(), "{spec}: shape");
    for (i, (g, w)) in got.to_vec::<f64>().iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{spec}: element {i}: {g} against {w}"
        );
    }
}

#[test]
fn contractions_diagonals_and_implicit_results_match_the_direct_sum() {
    let (a, b, c) = (randn(&[3, 4], 1), randn(&[4, 5], 2), randn(&[5, 2], 3));
    let (v, w) = (randn(&[4], 4), randn(&[4], 5));
    let sq = randn(&[3, 3], 6);
    let cube = randn(&[3, 3, 2], 7);
    let (x, y) = (randn(&[2, 3, 4], 8), randn(&[2, 4, 5], 9));
    let (q, k) = (randn(&[2, 3, 4, 5], 10), randn(&[2, 3, 6, 5], 11));
    let s = Tensor::scalar(1.5f64);
    let (at, diag) = (a.t(), sq.narrow(0, 0, 1).reshape(&[3]));
    // (equation, the same equation with an explicit result, operands)
    let cases: Vec<(&str, &str, Vec<&Tensor>)> = vec![
        ("ij,jk->ik", "ij,jk->ik", vec![&a, &b]),
        ("ij,jk", "ij,jk->ik", vec![&a, &b]),
        ("ij,jk,kl->il", "ij,jk,kl->il", vec![&a, &b, &c]),
        ("ij,jk,kl", "ij,jk,kl->il", vec![&a, &b, &c]),
        ("bij,bjk->bik", "bij,bjk->bik", vec![&x, &y]),
        ("bhid,bhjd->bhij", "bhid,bhjd->bhij", vec![&q, &k]),
        ("i,j->ij", "i,j->ij", vec![&v, &w]),
        ("i,i->", "i,i->", vec![&v, &w]),
        ("i,i", "i,i->", vec![&v, &w]),
        ("i,i->i", "i,i->i", vec![&v, &w]),
        ("ij,j->i", "ij,j->i", vec![&a, &v]),
        ("ij,kj->ik", "ij,kj->ik", vec![&a, &a]),
        ("ij->ji", "ij->ji", vec![&a]),
        ("ij->", "ij->", vec![&a]),
        ("ij->j", "ij->j", vec![&a]),
        ("ijk->kji", "ijk->kji", vec![&x]),
        ("ii->i", "ii->i", vec![&sq]),
        ("ii", "ii->", vec![&sq]),
        ("iij->ji", "iij->ji", vec![&cube]),
        ("iij", "iij->j", vec![&cube]),
        ("ii,i->i", "ii,i->i", vec![&sq, &diag]),
        ("i,->i", "i,->i", vec![&v, &s]),
        ("Ba,aB", "Ba,aB->", vec![&at, &a]),
        ("bA", "bA->Ab", vec![&a]),
        ("aB,Ba", "aB,Ba->", vec![&a, &at]),
        ("ijk,ikl->ijl", "ijk,ikl->ijl", vec![&x, &y]),
        ("bij,bij->bi", "bij,bij->bi", vec![&x, &x]),
    ];
    for (spec, explicit, operands) in cases {
        assert_matches(spec, explicit, &operands);
    }
}

#[test]
fn ellipses_and_broadcast_lengths() {
    let (x, y) = (randn(&[2, 3, 4], 12), randn(&[2, 4, 5], 13));
    assert_matches("...ij,...jk->...ik", "bij,bjk->bik", &[&x, &y]);
    assert_matches("...ij,...jk", "bij,bjk->bik", &[&x, &y]);
    assert_matches("b...,b...->b", "bij,bij->b", &[&x, &x]);
    // The broadcast axes left out of the result are summed (as PyTorch does).
    assert_matches("...ij->ij", "bij->ij", &[&x]);
    assert_matches("...ij->ji...", "bij->jib", &[&x]);
    // Broadcast axes aligned right, lengths of 1 stretched.
    let (p, r) = (randn(&[2, 1, 3], 14), randn(&[4, 3], 15));
    assert_matches("...i,...i->...", "abi,bi->ab", &[&p, &r]);
    let (col, row) = (randn(&[2, 1], 16), randn(&[5], 17));
    assert_matches("ij,j", "ij,j->i", &[&col, &row]);
    assert_matches("ij,j->ij", "ij,j->ij", &[&col, &row]);
    assert_matches(
        "i,j,i->ij",
        "i,j,i->ij",
        &[&randn(&[1], 18), &row, &randn(&[3], 19)],
    );
    // No axes at all.
    let (s, t) = (Tensor::scalar(2.0f64), Tensor::scalar(3.0f64));
    assert_eq!(Tensor::einsum(",->", &[&s, &t]).item(), 6.0);
    assert_eq!(Tensor::einsum("...,...", &[&s, &t]).item(), 6.0);
    // Spaces are ignored; f32 in, f32 out.
    let a32 = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let ab = Tensor::einsum(" ij , jk -> ik ", &[&a32, &a32]);
    assert_eq!(
        (ab.dtype(), ab.to_vec::<f32>()),
        (DType::F32, vec![7.0, 10.0, 15.0, 22.0])
    );
}

#[test]
fn first_and_second_derivatives() {
    let (x, y) = (randn(&[2, 3, 4], 20), randn(&[2, 4, 3], 21));
    check(
        "einsum bij,bjk->bik",
        |t| Tensor::einsum("bij,bjk->bik", &[&t[0], &t[1]]),
        &[x.clone(), y.clone()],
    );
    check(
        "einsum, a trace",
        |t| Tensor::einsum("ii", &[&t[0]]),
        &[randn(&[3, 3], 22)],
    );
    check(
        "einsum, a diagonal and a product",
        |t| Tensor::einsum("iij,jk->ki", &[&t[0], &t[1]]),
        &[randn(&[3, 3, 4], 23), randn(&[4, 2], 24)],
    );
    check(
        "einsum, three operands",
        |t| Tensor::einsum("ab,bc,cd->ad", &[&t[0], &t[1], &t[2]]),
        &[randn(&[2, 3], 25), randn(&[3, 4], 26), randn(&[4, 2], 27)],
    );
    check(
        "einsum, broadcast ellipses",
        |t| Tensor::einsum("...i,...i->...", &[&t[0], &t[1]]),
        &[randn(&[2, 1, 3], 28), randn(&[4, 3], 29)],
    );
    check(
        "einsum, one operand used twice",
        |t| Tensor::einsum("ij,ij->i", &[&t[0], &t[0]]),
        &[randn(&[3, 4], 30)],
    );
}

#[test]
fn malformed_equations_and_lengths_are_errors_naming_the_equation() {
    let (a, b) = (randn(&[2, 3], 40), randn(&[4, 5], 41));
    let err = |spec: &str, ops: &[&Tensor]| Tensor::try_einsum(spec, ops).unwrap_err().to_string();
    for (spec, ops, says) in [
        ("ij,jk->ik", vec![&a, &b], "length 3 and 4"),
        ("ij,jk", vec![&a], "2 terms for 1 operands"),
        (
            "ijk",
            vec![&a],
            "operand 0 has 2 axes, its subscripts name 3",
        ),
        ("i", vec![&a], "operand 0 has 2 axes, its subscripts name 1"),
        ("i1", vec![&a], "'1' is not a subscript"),
        ("ij->ii", vec![&a], "'i' twice in the result"),
        (
            "ij->k",
            vec![&a],
            "'k' in the result names no operand's axis",
        ),
        (
            "ii",
            vec![&a],
            "'i' repeated in operand 0 over axes of lengths 2 and 3",
        ),
        ("...i...", vec![&a], "more than one ..."),
        ("ij,->", vec![&a], "2 terms for 1 operands"),
    ] {
        let e = err(spec, &ops);
        assert!(
            e.contains(&format!("einsum \"{spec}\"")) && e.contains(says),
            "{spec}: {e}"
        );
    }
    assert!(err("i", &[]).contains("no operands"));
    let msg = panic_message(|| {
        Tensor::einsum("ij,jk->ik", &[&a, &b]);
    });
    assert!(msg.contains("length 3 and 4"), "{msg}");
}
