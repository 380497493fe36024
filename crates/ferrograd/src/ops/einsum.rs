//! Einstein summation, PyTorch's `einsum`, written from the differentiable selections and
//! products (a flat `index_select` for diagonals, `sum_axes`, `permute`, `broadcast_to`,
//! `reshape` and batched `matmul`), so it has derivatives of every order and needs no rule of
//! its own. Operands are contracted left to right, each pair as one batched product.

use super::shape::{Rule, Shape};
use crate::error::{Error, Result};
use crate::tensor::trace::{self, attrs};
use crate::tensor::Tensor;

/// A subscript: a letter (its ASCII code), or one of the axes an ellipsis stands for
/// (`ELLIPSIS + i`, axis i of the broadcast axes counted from the left of the widest).
type Label = u16;
const ELLIPSIS: Label = 256;

/// An operand (or the result) during the contraction: its value and one label per axis.
struct Term {
    value: Tensor,
    labels: Vec<Label>,
}

/// Subscripts of one side of `->`, the ellipsis (if any) as the position it stands at.
struct Subscripts {
    letters: Vec<Label>,
    ellipsis_at: Option<usize>,
}

fn shape_error(spec: &str, msg: impl std::fmt::Display) -> Error {
    Error::Shape(format!("einsum \"{spec}\": {msg}"))
}

/// One term of the equation: letters and at most one `...`.
fn parse_term(spec: &str, term: &str) -> Result<Subscripts> {
    let mut parsed = Subscripts {
        letters: Vec::new(),
        ellipsis_at: None,
    };
    let mut rest = term;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("...") {
            if parsed.ellipsis_at.is_some() {
                return Err(shape_error(
                    spec,
                    format!("more than one ... in \"{term}\""),
                ));
            }
            parsed.ellipsis_at = Some(parsed.letters.len());
            rest = after;
        } else if c.is_ascii_alphabetic() {
            parsed.letters.push(c as Label);
            rest = &rest[1..];
        } else {
            return Err(shape_error(
                spec,
                format!("'{c}' is not a subscript (letters a-z, A-Z, and ...)"),
            ));
        }
    }
    Ok(parsed)
}

/// `subscripts` with the ellipsis replaced by the labels of the last `count` of `width`
/// broadcast axes (aligned right, as numpy broadcasts).
fn expand(subscripts: &Subscripts, count: usize, width: usize) -> Vec<Label> {
    let mut labels = subscripts.letters.clone();
    if let Some(at) = subscripts.ellipsis_at {
        let axes = (width - count..width).map(|i| ELLIPSIS + i as Label);
        labels.splice(at..at, axes);
    }
    labels
}

/// The labels of every operand and of the result, as PyTorch reads the equation: without
/// `->`, the result has the broadcast axes, then every letter used once, in ASCII order.
fn parse(spec: &str, shapes: &[&[usize]]) -> Result<(Vec<Vec<Label>>, Vec<Label>)> {
    let spec_clean: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match spec_clean.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (spec_clean.as_str(), None),
    };
    let terms: Vec<Subscripts> = lhs
        .split(',')
        .map(|t| parse_term(spec, t))
        .collect::<Result<_>>()?;
    if terms.len() != shapes.len() {
        return Err(shape_error(
            spec,
            format!("{} terms for {} operands", terms.len(), shapes.len()),
        ));
    }
    let mut counts = Vec::with_capacity(terms.len());
    for (i, (term, shape)) in terms.iter().zip(shapes).enumerate() {
        let fits = match term.ellipsis_at {
            Some(_) => shape.len() >= term.letters.len(),
            None => shape.len() == term.letters.len(),
        };
        if !fits {
            return Err(shape_error(
                spec,
                format!(
                    "operand {i} has {} axes, its subscripts name {}",
                    shape.len(),
                    term.letters.len()
                ),
            ));
        }
        counts.push(shape.len() - term.letters.len());
    }
    let width = counts.iter().copied().max().unwrap_or(0);
    let inputs: Vec<Vec<Label>> = terms
        .iter()
        .zip(&counts)
        .map(|(t, &count)| expand(t, count, width))
        .collect();
    let output = match rhs {
        Some(rhs) => {
            let out = parse_term(spec, rhs)?;
            for (i, l) in out.letters.iter().enumerate() {
                if out.letters[..i].contains(l) {
                    return Err(shape_error(
                        spec,
                        format!("'{}' twice in the result", *l as u8 as char),
                    ));
                }
                if !inputs.iter().any(|labels| labels.contains(l)) {
                    return Err(shape_error(
                        spec,
                        format!(
                            "'{}' in the result names no operand's axis",
                            *l as u8 as char
                        ),
                    ));
                }
            }
            expand(&out, width, width)
        }
        None => {
            let all: Vec<Label> = inputs.iter().flatten().copied().collect();
            let mut once: Vec<Label> = all
                .iter()
                .copied()
                .filter(|&l| l < ELLIPSIS && all.iter().filter(|&&m| m == l).count() == 1)
                .collect();
            once.sort_unstable();
            (0..width as Label)
                .map(|i| ELLIPSIS + i)
                .chain(once)
                .collect()
        }
    };
    Ok((inputs, output))
}

/// The length of every label: equal wherever it appears, or 1 there (broadcast); a label
/// repeated within one operand (a diagonal) must have one length there.
fn label_sizes(
    spec: &str,
    inputs: &[Vec<Label>],
    shapes: &[&[usize]],
) -> Result<Vec<(Label, usize)>> {
    let mut sizes: Vec<(Label, usize)> = Vec::new();
    for (i, (labels, shape)) in inputs.iter().zip(shapes).enumerate() {
        for (a, (&l, &n)) in labels.iter().zip(shape.iter()).enumerate() {
            if let Some(b) = labels[..a].iter().position(|&m| m == l) {
                if shape[b] != n {
                    return Err(shape_error(
                        spec,
                        format!(
                            "'{}' repeated in operand {i} over axes of lengths {} and {n}",
                            name(l),
                            shape[b]
                        ),
                    ));
                }
            }
            match sizes.iter_mut().find(|(m, _)| *m == l) {
                None => sizes.push((l, n)),
                Some((_, s)) if *s == n || n == 1 => {}
                Some((_, s)) if *s == 1 => *s = n,
                Some((_, s)) => {
                    return Err(shape_error(
                        spec,
                        format!("'{}' has length {s} and {n} (operand {i})", name(l)),
                    ))
                }
            }
        }
    }
    Ok(sizes)
}

/// A label as the equation writes it.
fn name(l: Label) -> String {
    if l < ELLIPSIS {
        (l as u8 as char).to_string()
    } else {
        format!("... axis {}", l - ELLIPSIS)
    }
}

impl Term {
    /// The axes of a label repeated within the term reduced to its diagonal (PyTorch's
    /// `"ii->i"`): each label once, in order of first appearance.
    fn diagonal(self) -> Term {
        let mut unique: Vec<Label> = Vec::new();
        for &l in &self.labels {
            if !unique.contains(&l) {
                unique.push(l);
            }
        }
        if unique.len() == self.labels.len() {
            return self;
        }
        let shape = self.value.shape().to_vec();
        let strides: Vec<usize> = (0..shape.len())
            .map(|a| shape[a + 1..].iter().product())
            .collect();
        let sizes: Vec<usize> = unique
            .iter()
            .map(|l| shape[self.labels.iter().position(|m| m == l).expect("label")])
            .collect();
        let count: usize = sizes.iter().product();
        let picks: Vec<usize> = (0..count)
            .map(|flat| {
                // The coordinate of each unique label in `flat`, then the element where every
                // axis of that label takes it.
                let mut rest = flat;
                let mut coord = vec![0; sizes.len()];
                for (u, &n) in sizes.iter().enumerate().rev() {
                    coord[u] = rest % n;
                    rest /= n;
                }
                self.labels
                    .iter()
                    .zip(&strides)
                    .map(|(l, s)| s * coord[unique.iter().position(|m| m == l).expect("label")])
                    .sum()
            })
            .collect();
        let value = self
            .value
            .reshape(&[self.value.numel()])
            .index_select(0, picks.as_slice())
            .reshape(&sizes);
        Term {
            value,
            labels: unique,
        }
    }

    /// The term with the axes of labels not in `keep` summed away.
    fn sum_except(self, keep: &[Label]) -> Term {
        let (summed, kept): (Vec<usize>, Vec<usize>) =
            (0..self.labels.len()).partition(|&a| !keep.contains(&self.labels[a]));
        if summed.is_empty() {
            return self;
        }
        Term {
            value: self.value.sum_axes(&summed, false),
            labels: kept.iter().map(|&a| self.labels[a]).collect(),
        }
    }

    /// The value with its axes in the order of `labels` (each of its own among them), every
    /// axis broadcast to the label's length in `sizes`.
    fn arranged(&self, labels: &[Label], sizes: &[(Label, usize)]) -> Result<Tensor> {
        let perm: Vec<usize> = labels
            .iter()
            .map(|l| {
                self.labels
                    .iter()
                    .position(|m| m == l)
                    .expect("label of the term")
            })
            .collect();
        let shape: Vec<usize> = labels.iter().map(|l| size_of(sizes, *l)).collect();
        self.value.permute(&perm).try_broadcast_to(&shape)
    }
}

fn size_of(sizes: &[(Label, usize)], l: Label) -> usize {
    sizes
        .iter()
        .find(|(m, _)| *m == l)
        .expect("label has a size")
        .1
}

/// `a` and `b` contracted into one term keeping the labels in `keep` (the result's and those
/// of the operands still to come): the shared labels to keep are the batch of one batched
/// product, the shared ones to drop its inner axis, the others its rows and columns.
fn contract(a: Term, b: Term, keep: &[Label], sizes: &[(Label, usize)]) -> Result<Term> {
    let needed: Vec<Label> = keep.iter().chain(&b.labels).copied().collect();
    let a = a.sum_except(&needed);
    let needed: Vec<Label> = keep.iter().chain(&a.labels).copied().collect();
    let b = b.sum_except(&needed);
    let shared = |l: &Label| a.labels.contains(l) && b.labels.contains(l);
    let batch: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| shared(l) && keep.contains(l))
        .collect();
    let inner: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| shared(l) && !keep.contains(l))
        .collect();
    let rows: Vec<Label> = a.labels.iter().copied().filter(|l| !shared(l)).collect();
    let cols: Vec<Label> = b.labels.iter().copied().filter(|l| !shared(l)).collect();
    let len = |ls: &[Label]| ls.iter().map(|&l| size_of(sizes, l)).product::<usize>();
    let (nb, m, k, n) = (len(&batch), len(&rows), len(&inner), len(&cols));
    let order_a: Vec<Label> = [&batch[..], &rows, &inner].concat();
    let order_b: Vec<Label> = [&batch[..], &inner, &cols].concat();
    let lhs = a.arranged(&order_a, sizes)?.try_reshape(&[nb, m, k])?;
    let rhs = b.arranged(&order_b, sizes)?.try_reshape(&[nb, k, n])?;
    let labels: Vec<Label> = [&batch[..], &rows, &cols].concat();
    let shape: Vec<usize> = labels.iter().map(|&l| size_of(sizes, l)).collect();
    Ok(Term {
        value: lhs.try_matmul(&rhs)?.try_reshape(&shape)?,
        labels,
    })
}

impl Tensor {
    /// Einstein summation over `operands` as PyTorch's `einsum` reads `spec`: one term of
    /// letters per operand, `...` for broadcast axes, an optional `->` and the result's
    /// subscripts (without it: the broadcast axes, then each letter used once, in ASCII
    /// order). A letter repeated within a term takes the diagonal; letters left out of the
    /// result are summed; lengths broadcast (a length of 1 stretches). Panics on a malformed
    /// equation or lengths that do not fit, naming both ([`Tensor::try_einsum`] returns them).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// let b = Tensor::from_vec(vec![5.0f32, 6.0], &[2]);
    /// assert_eq!(Tensor::einsum("ij,j->i", &[&a, &b]).to_vec::<f32>(), [17.0, 39.0]);
    /// assert_eq!(Tensor::einsum("ii", &[&a]).item(), 5.0);   // the trace
    /// ```
    pub fn einsum(spec: &str, operands: &[&Tensor]) -> Tensor {
        let _profiled = crate::tensor::profile::scope("einsum");
        Tensor::try_einsum(spec, operands).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::einsum`], returning a malformed equation or lengths that do not fit as an
    /// error.
    pub fn try_einsum(spec: &str, operands: &[&Tensor]) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("einsum");
        trace::op("Einsum", attrs![spec.to_string()], operands, || {
            Tensor::einsum_untraced(spec, operands)
        })
    }

    fn einsum_untraced(spec: &str, operands: &[&Tensor]) -> Result<Tensor> {
        if operands.is_empty() {
            return Err(shape_error(spec, "no operands"));
        }
        let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape()).collect();
        let (inputs, output) = parse(spec, &shapes)?;
        let sizes = label_sizes(spec, &inputs, &shapes)?;
        let mut terms: Vec<Term> = operands
            .iter()
            .zip(inputs)
            .map(|(t, labels)| {
                Term {
                    value: (*t).clone(),
                    labels,
                }
                .diagonal()
            })
            .collect();
        let mut acc = terms.remove(0);
        while !terms.is_empty() {
            let b = terms.remove(0);
            // What the result and the operands after this one still read.
            let keep: Vec<Label> = output
                .iter()
                .chain(terms.iter().flat_map(|t| &t.labels))
                .copied()
                .collect();
            acc = contract(acc, b, &keep, &sizes)?;
        }
        acc.sum_except(&output).arranged(&output, &sizes)
    }
}

/// The result shape of `spec` on operands whose shapes may have free axes (`None`): a free
/// axis fits any length; a result axis is free where any operand's axis of its label is.
pub(crate) fn einsum_rule(spec: &str, shapes: &[Shape]) -> Rule {
    if shapes.is_empty() {
        return Err(format!("einsum {spec:?}: no operands"));
    }
    let ones: Vec<Vec<usize>> = shapes
        .iter()
        .map(|s| s.iter().map(|d| d.unwrap_or(1)).collect())
        .collect();
    let refs: Vec<&[usize]> = ones.iter().map(Vec::as_slice).collect();
    let (inputs, output) = parse(spec, &refs).map_err(|e| e.to_string())?;
    let sizes = label_sizes(spec, &inputs, &refs).map_err(|e| e.to_string())?;
    let free = |l: Label| {
        inputs
            .iter()
            .zip(shapes)
            .any(|(labels, s)| labels.iter().zip(s).any(|(&m, d)| m == l && d.is_none()))
    };
    Ok(output
        .iter()
        .map(|&l| (!free(l)).then(|| size_of(&sizes, l)))
        .collect())
}
