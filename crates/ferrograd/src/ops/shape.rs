//! Shapes whose sizes may be unknown, and the vocabulary of the ops' shape rules.
//!
//! Each structural op (a view, a join, a reduction, a product, a pooling) has one shape rule,
//! written next to the op over a [`Shape`] in which a size may be free (`None`: a static
//! graph's placeholder fed at run time). The eager op checks its inputs with the rule, passing
//! its known sizes, and the static graph infers its nodes' shapes with the same function, so
//! the two cannot accept different inputs or disagree on the result.

use crate::error::{Error, Result};

/// A shape known axis by axis: `None` is a free axis (a batch fed at run time).
pub type Shape = Vec<Option<usize>>;

/// A shape rule's answer: the result's shape, or why the inputs do not fit (without the op's
/// name, which the caller adds).
pub(crate) type Rule = std::result::Result<Shape, String>;

/// A shape with every axis known.
pub(crate) fn known(s: &[usize]) -> Shape {
    s.iter().map(|&d| Some(d)).collect()
}

/// `[?, 784]`.
pub(crate) fn show(s: &[Option<usize>]) -> String {
    let axes: Vec<String> = s
        .iter()
        .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", axes.join(", "))
}

/// An eager op's result shape from its rule over known inputs (so every size is known), or
/// [`Error::Shape`] naming `op`.
pub(crate) fn eager(op: &str, rule: Rule) -> Result<Vec<usize>> {
    let s = rule.map_err(|e| Error::Shape(format!("{op}: {e}")))?;
    Ok(s.into_iter()
        .map(|d| d.expect("a rule over known sizes gives known sizes"))
        .collect())
}

/// [`eager`], panicking with the error (the ops without a `try_` form).
pub(crate) fn eager_or_panic(op: &str, rule: Rule) -> Vec<usize> {
    eager(op, rule).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether two sizes may be equal (a free one may be anything).
pub(crate) fn same(a: Option<usize>, b: Option<usize>) -> bool {
    a.zip(b).is_none_or(|(a, b)| a == b)
}

/// `Err` unless `a` is an axis of `s`.
pub(crate) fn check_axis(a: usize, s: &[Option<usize>]) -> std::result::Result<(), String> {
    if a < s.len() {
        Ok(())
    } else {
        Err(format!("axis {a} out of range for shape {}", show(s)))
    }
}

/// The product of the sizes, `None` inside when one is free; `Err` when the known ones
/// overflow. A known 0 makes it 0 whatever the others (`[2^40, 2^40, 0]` is empty).
pub(crate) fn numel(s: &[Option<usize>]) -> std::result::Result<Option<usize>, String> {
    if s.contains(&Some(0)) {
        return Ok(Some(0));
    }
    let fixed = s
        .iter()
        .flatten()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("{} has more elements than fit in memory", show(s)))?;
    Ok(s.iter().all(Option::is_some).then_some(fixed))
}

/// numpy broadcasting where some sizes are free: a free axis against a size above 1 takes it
/// (anything else would fail at run time), against 1 or another free axis stays free.
pub(crate) fn broadcast(a: &[Option<usize>], b: &[Option<usize>]) -> Rule {
    let n = a.len().max(b.len());
    let at = |s: &[Option<usize>], i: usize| {
        (i + s.len())
            .checked_sub(n)
            .map_or(Some(1), |j: usize| s[j])
    };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (Some(1), d) | (d, Some(1)) => Ok(d),
            (Some(x), Some(y)) if x == y => Ok(Some(x)),
            (None, d) | (d, None) => Ok(d),
            _ => Err(format!(
                "shapes {} and {} do not broadcast",
                show(a),
                show(b)
            )),
        })
        .collect()
}
