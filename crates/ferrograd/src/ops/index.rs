//! Selection by index along an axis (index_select) and its adjoint (index_add), each the
//! other's derivative. The loops are `kernels::index`.

use std::sync::Arc;

use smallvec::smallvec;

use super::{axis_in, with_axis, Axis};
use crate::error::{Error, Result};
use crate::kernels::{index, Rows};
use crate::tensor::{record, with_dtype, Tensor};

impl Tensor {
    /// The entries `indices` along `axis`, in that order (repeats allowed).
    pub fn index_select<A: Axis>(&self, axis: A, indices: &[usize]) -> Tensor {
        self.try_index_select(axis, indices)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_index_select<A: Axis>(&self, axis: A, indices: &[usize]) -> Result<Tensor> {
        let Some(axis) = axis.position(self.ndim()) else {
            return Err(Error::Shape(format!(
                "index_select: axis {axis} out of range for shape {:?}",
                self.shape()
            )));
        };
        check_indices("index_select", self.shape(), axis, indices)?;
        let indices: Arc<[usize]> = indices.into();
        let out = with_dtype!(self.dtype(), T => {
            let rows = Rows::around(self.shape(), axis);
            let out = index::select(&self.contiguous_data::<T>(), rows, &indices);
            Tensor::from_data(out, &with_axis(self.shape(), axis, indices.len()))
        });
        Ok(record("index_select", out, &[self], move |c, up| {
            smallvec![Some(c.input(0).zeros_like().index_add(axis, &indices, up))]
        }))
    }

    /// This tensor with `source`'s entries along `axis` added at `indices` (repeats add up):
    /// `out[.., indices[j], ..] += source[.., j, ..]`.
    pub fn index_add<A: Axis>(&self, axis: A, indices: &[usize], source: &Tensor) -> Tensor {
        let axis = axis_in("index_add", axis, self.shape());
        check_indices("index_add", self.shape(), axis, indices).unwrap_or_else(|e| panic!("{e}"));
        let expected = with_axis(self.shape(), axis, indices.len());
        assert!(
            source.shape() == expected.as_slice(),
            "index_add: source shape {:?} should be {:?} for {} indices into {:?}",
            source.shape(),
            expected,
            indices.len(),
            self.shape()
        );
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
                c.needs(1).then(|| up.index_select(axis, &indices)),
            ]
        })
    }
}

fn check_indices(op: &str, shape: &[usize], axis: usize, indices: &[usize]) -> Result<()> {
    if axis >= shape.len() {
        return Err(Error::Shape(format!(
            "{op}: axis {axis} out of range for shape {shape:?}"
        )));
    }
    match indices.iter().find(|&&i| i >= shape[axis]) {
        Some(i) => Err(Error::Shape(format!(
            "{op}: index {i} out of range for axis {axis} of shape {shape:?}"
        ))),
        None => Ok(()),
    }
}
