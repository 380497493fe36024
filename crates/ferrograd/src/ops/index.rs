//! Selection by index along an axis (index_select) and its adjoint (index_add), each the
//! other's derivative. The loops are `kernels::index`.

use crate::tensor::trace::{self, attrs};
use std::borrow::Cow;
use std::sync::Arc;

use smallvec::smallvec;

use super::dtype::{eager_dtype_or_panic, float_rule};
use super::shape::{check_axis, eager, eager_or_panic, known, same, show, Rule};
use super::{axis_in, Axis};
use crate::error::{Error, Result};
use crate::kernels::{index, Rows};
use crate::tensor::{record, with_any_dtype, with_dtype, DType, Tensor};

/// Positions to select: `usize`s (a slice, an array, a `Vec`) or a 1-d `I64` tensor, as
/// PyTorch's `index_select` takes an int64 index tensor.
pub trait Indices {
    /// The positions; an error naming `op` for a tensor that is not 1-d `I64` or holds a
    /// negative value.
    fn positions(&self, op: &str) -> Result<Cow<'_, [usize]>>;

    /// The tensor holding them, when they are one: a trace records it as an input (its
    /// values may differ from run to run) instead of fixing the positions.
    fn tensor(&self) -> Option<&Tensor> {
        None
    }
}

impl Indices for [usize] {
    fn positions(&self, _: &str) -> Result<Cow<'_, [usize]>> {
        Ok(Cow::Borrowed(self))
    }
}

impl<const N: usize> Indices for [usize; N] {
    fn positions(&self, _: &str) -> Result<Cow<'_, [usize]>> {
        Ok(Cow::Borrowed(self))
    }
}

impl Indices for Vec<usize> {
    fn positions(&self, _: &str) -> Result<Cow<'_, [usize]>> {
        Ok(Cow::Borrowed(self))
    }
}

impl Indices for Tensor {
    fn positions(&self, op: &str) -> Result<Cow<'_, [usize]>> {
        if self.dtype() != DType::I64 || self.ndim() != 1 {
            return Err(Error::Shape(format!(
                "{op}: indices must be a 1-d i64 tensor, got {:?} {}",
                self.shape(),
                self.dtype()
            )));
        }
        self.to_vec::<i64>()
            .into_iter()
            .map(|i| {
                usize::try_from(i).map_err(|_| Error::Shape(format!("{op}: negative index {i}")))
            })
            .collect::<Result<Vec<usize>>>()
            .map(Cow::Owned)
    }

    fn tensor(&self) -> Option<&Tensor> {
        Some(self)
    }
}

impl Tensor {
    /// The entries `indices` along `axis`, in that order (repeats allowed).
    pub fn index_select<A: Axis, I: Indices + ?Sized>(&self, axis: A, indices: &I) -> Tensor {
        let _profiled = crate::tensor::profile::scope("index_select");
        self.try_index_select(axis, indices)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::index_select`], returning [`Error::Shape`] instead of panicking when the axis
    /// is out of range or the indices are not valid positions along it (negative, past the
    /// end, or a tensor other than a 1-d `I64` one).
    pub fn try_index_select<A: Axis, I: Indices + ?Sized>(
        &self,
        axis: A,
        indices: &I,
    ) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("index_select");
        let resolved = axis.position(self.ndim()).unwrap_or(0);
        let body = || self.index_select_untraced(axis, indices);
        match indices.tensor() {
            Some(by) => trace::op("IndexSelectBy", attrs![resolved], &[self, by], body),
            None => {
                let positions = || indices.positions("index_select").map(Cow::into_owned);
                let attrs = attrs![resolved, positions().unwrap_or_default()];
                trace::op("IndexSelect", attrs, &[self], body)
            }
        }
    }

    fn index_select_untraced<A: Axis, I: Indices + ?Sized>(
        &self,
        axis: A,
        indices: &I,
    ) -> Result<Tensor> {
        let Some(axis) = axis.position(self.ndim()) else {
            return Err(Error::Shape(format!(
                "index_select: axis {axis} out of range for shape {:?}",
                self.shape()
            )));
        };
        let by = indices.tensor().cloned();
        let indices = indices.positions("index_select")?;
        let out_shape = eager(
            "index_select",
            index_select_rule(&known(self.shape()), axis, &indices),
        )?;
        let indices: Arc<[usize]> = indices.into();
        let out = with_any_dtype!(self.dtype(), T => {
            let rows = Rows::around(self.shape(), axis);
            let out = index::select(&self.contiguous_data::<T>(), rows, &indices);
            Tensor::from_data(out, &out_shape)
        });
        Ok(record("index_select", out, &[self], move |c, up| {
            let zeros = c.input(0).zeros_like();
            match &by {
                // A recording transform (vmap of a gradient) must see the positions as the
                // tensor they came from: scattered by it, spread along the other axes.
                Some(ids) if trace::is_tracing() => {
                    let mut shape = vec![1; up.ndim()];
                    shape[axis] = ids.numel();
                    let at = ids.reshape(&shape).broadcast_to(up.shape()).contiguous();
                    smallvec![Some(zeros.scatter_add(axis, &at, up))]
                }
                _ => smallvec![Some(zeros.index_add(axis, &indices, up))],
            }
        }))
    }

    /// This tensor with `source`'s entries along `axis` added at `indices` (repeats add up):
    /// `out[.., indices[j], ..] += source[.., j, ..]`.
    pub fn index_add<A: Axis>(&self, axis: A, indices: &[usize], source: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("index_add");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op(
            "IndexAdd",
            attrs![resolved, indices.to_vec()],
            &[self, source],
            || self.index_add_untraced(axis, indices, source),
        )
    }

    fn index_add_untraced<A: Axis>(&self, axis: A, indices: &[usize], source: &Tensor) -> Tensor {
        let axis = axis_in("index_add", axis, self.shape());
        let rule = index_add_rule(&known(self.shape()), &known(source.shape()), axis, indices);
        eager_or_panic("index_add", rule);
        eager_dtype_or_panic("index_add", float_rule(self.dtype()));
        let source = source.to_dtype(self.dtype());
        let indices: Arc<[usize]> = indices.into();
        let out = with_dtype!(self.dtype(), T => {
            let rows = Rows::around(self.shape(), axis);
            let mut out = self.contiguous_data::<T>().into_owned();
            index::add_at(&mut out, &source.contiguous_data::<T>(), rows, &indices);
            Tensor::from_data(out, self.shape())
        });
        record("index_add", out, &[self, &source], move |c, up| {
            smallvec![
                c.needs(0).then(|| up.clone()),
                c.needs(1).then(|| up.index_select(axis, &*indices)),
            ]
        })
    }
}

// The shape rules of selection by index, which the static graph's inference shares (see
// `ops::shape`).

/// `Err` unless every index is a position along `axis` of `s` (a free size takes any).
fn check_indices(
    s: &[Option<usize>],
    axis: usize,
    indices: &[usize],
) -> std::result::Result<(), String> {
    check_axis(axis, s)?;
    match indices.iter().find(|&&i| s[axis].is_some_and(|n| i >= n)) {
        Some(i) => Err(format!(
            "index {i} out of range for axis {axis} of shape {}",
            show(s)
        )),
        None => Ok(()),
    }
}

pub(crate) fn index_select_rule(s: &[Option<usize>], axis: usize, indices: &[usize]) -> Rule {
    check_indices(s, axis, indices)?;
    let mut out = s.to_vec();
    out[axis] = Some(indices.len());
    Ok(out)
}

/// `src` must be `s` with `indices.len()` along `axis`; the result is `s`.
pub(crate) fn index_add_rule(
    s: &[Option<usize>],
    src: &[Option<usize>],
    axis: usize,
    indices: &[usize],
) -> Rule {
    check_indices(s, axis, indices)?;
    let mut expected = s.to_vec();
    expected[axis] = Some(indices.len());
    let fits = src.len() == s.len() && src.iter().zip(&expected).all(|(a, b)| same(*a, *b));
    if !fits {
        return Err(format!(
            "source shape {} should be {} for {} indices into {}",
            show(src),
            show(&expected),
            indices.len(),
            show(s)
        ));
    }
    Ok(s.to_vec())
}
