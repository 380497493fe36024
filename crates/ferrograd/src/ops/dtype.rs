//! The dtype rules of the ops that are not element-wise (those have `Unary::result_dtype` and
//! `Binary::result_dtype`): what each op makes of its operands' dtypes, or why it takes none
//! of them. As with the shape rules (`ops::shape`), the eager op checks its operands with its
//! rule before it computes, and the static graph infers its nodes' dtypes with the same
//! function, so the two accept the same dtypes and agree on the result's.
//!
//! The ops that only move elements (views, `narrow`, `pad`, `index_select`) keep their
//! input's dtype, integers included, and need no rule.

use crate::error::{Error, Result};
use crate::tensor::{DType, INTEGER_IN_FLOAT_OP};

/// A dtype rule's answer: the result's dtype, or why the operands do not fit (without the
/// op's name, which the caller adds).
pub(crate) type DtypeRule = std::result::Result<DType, String>;

/// An op that computes in floating point on one operand (softmax, reductions, pooling and
/// adaptive pooling, `sum_to`, `index_add`'s target, a gradient): the operand's dtype, which
/// must be a float.
pub(crate) fn float_rule(d: DType) -> DtypeRule {
    if d.is_float() {
        Ok(d)
    } else {
        Err(INTEGER_IN_FLOAT_OP.to_string())
    }
}

/// An op whose operands meet in their promoted dtype, which must be a float (`matmul`,
/// `where_cond`'s two branches): an integer operand beside a float one is promoted.
pub(crate) fn promoted_float_rule(a: DType, b: DType) -> DtypeRule {
    float_rule(a.promote(b))
}

/// An op that refuses an integer operand outright rather than promote it (the convolutions,
/// as PyTorch does): the promoted dtype of `operands`, each named for the message.
pub(crate) fn floats_rule(operands: &[(&str, DType)]) -> DtypeRule {
    if let Some((what, d)) = operands.iter().find(|(_, d)| !d.is_float()) {
        return Err(format!("the {what} is {d}: {INTEGER_IN_FLOAT_OP}"));
    }
    Ok(operands
        .iter()
        .fold(operands[0].1, |acc, (_, d)| acc.promote(*d)))
}

/// An op that joins operands of any dtype (`cat`): their promotion, whatever the order (f32
/// with f64 joins as f64, integers with floats as the float).
pub(crate) fn joined_rule(dtypes: impl IntoIterator<Item = DType>) -> DType {
    let mut dtypes = dtypes.into_iter();
    let first = dtypes.next().expect("a join has operands");
    dtypes.fold(first, DType::promote)
}

/// `sum_axes`: integers sum exactly to integers (PyTorch's int64 sum); floats keep their
/// dtype.
pub(crate) fn sum_rule(d: DType) -> DtypeRule {
    if d == DType::I64 {
        Ok(d)
    } else {
        float_rule(d)
    }
}

/// `argmax` and `argmin`: positions (`I64`) along a float operand.
pub(crate) fn positions_rule(d: DType) -> DtypeRule {
    float_rule(d).map(|_| DType::I64)
}

/// An eager op's result dtype from its rule, or [`Error::Shape`] naming `op`.
pub(crate) fn eager_dtype(op: &str, rule: DtypeRule) -> Result<DType> {
    rule.map_err(|e| Error::Shape(format!("{op}: {e}")))
}

/// [`eager_dtype`], panicking with the error (the ops without a `try_` form).
pub(crate) fn eager_dtype_or_panic(op: &str, rule: DtypeRule) -> DType {
    eager_dtype(op, rule).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_promote_floats_and_refuse_integers_where_the_op_computes() {
        use DType::{F32, F64, I64};
        assert_eq!(float_rule(F32), Ok(F32));
        assert!(float_rule(I64).unwrap_err().contains("i64 tensor"));
        assert_eq!(promoted_float_rule(I64, F32), Ok(F32));
        assert_eq!(promoted_float_rule(F32, F64), Ok(F64));
        assert!(promoted_float_rule(I64, I64).is_err());
        assert_eq!(floats_rule(&[("input", F32), ("weight", F64)]), Ok(F64));
        let e = floats_rule(&[("input", F32), ("weight", I64)]).unwrap_err();
        assert!(e.starts_with("the weight is i64"), "{e}");
        assert_eq!(joined_rule([I64, F32, F64]), F64);
        assert_eq!(joined_rule([I64, I64]), I64);
        assert_eq!(positions_rule(F64), Ok(I64));
        assert_eq!(sum_rule(I64), Ok(I64));
        assert_eq!(sum_rule(F32), Ok(F32));
        let e = eager_dtype("softmax", float_rule(I64))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("softmax: an i64 tensor"), "{e}");
    }
}
