//! New buffers assembled from blocks: cat and stack join tensors along an axis, pad surrounds
//! one with a constant. Their gradients are views of the upstream gradient (narrow).

use smallvec::smallvec;

use super::{with_axis, Axis};
use crate::error::{Error, Result};
use crate::kernels::{index, strided, Rows};
use crate::tensor::{checked_numel, filled, record, with_any_dtype, Element, Tensor};

impl Tensor {
    /// Padded with `value`: `pads[i] = (before, after)` elements along axis `i`.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Tensor {
        assert!(
            pads.len() == self.ndim(),
            "pad: {} (before, after) pairs given for shape {:?}",
            pads.len(),
            self.shape()
        );
        let padded: Option<Vec<usize>> = self
            .shape()
            .iter()
            .zip(pads)
            .map(|(&d, &(before, after))| d.checked_add(before)?.checked_add(after))
            .collect();
        let (out_shape, len) = padded
            .and_then(|s| checked_numel(&s).map(|n| (s, n)))
            .unwrap_or_else(|| {
                panic!(
                    "pad: padding {pads:?} makes shape {:?} larger than fits in memory",
                    self.shape()
                )
            });
        let start: Vec<usize> = pads.iter().map(|&(before, _)| before).collect();
        let out = with_any_dtype!(self.dtype(), T => {
            let mut out = filled("pad", len, T::cast_from_f64(value));
            let src = self.contiguous_data::<T>();
            strided::copy_into_block(&src, self.shape(), &mut out, &out_shape, &start);
            Tensor::from_data(out, &out_shape)
        });
        let pads = pads.to_vec();
        record("pad", out, &[self], move |c, up| {
            let mut g = up.clone();
            for (axis, &(before, _)) in pads.iter().enumerate() {
                g = g.narrow(axis, before, c.input(0).shape()[axis]);
            }
            smallvec![Some(g)]
        })
    }

    /// Tensors joined along `axis`; all other axes must agree.
    pub fn cat<A: Axis>(tensors: &[&Tensor], axis: A) -> Tensor {
        Tensor::try_cat(tensors, axis).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::cat`], returning [`Error::Shape`] instead of panicking when the list is empty,
    /// the axis is out of range or the other axes disagree.
    pub fn try_cat<A: Axis>(tensors: &[&Tensor], axis: A) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::Shape("cat: no tensors given".into()))?;
        let Some(axis) = axis.position(first.ndim()) else {
            return Err(Error::Shape(format!(
                "cat: axis {axis} out of range for shape {:?}",
                first.shape()
            )));
        };
        for t in &tensors[1..] {
            let same_rank = t.ndim() == first.ndim();
            if !same_rank
                || (0..first.ndim()).any(|i| i != axis && t.shape()[i] != first.shape()[i])
            {
                return Err(Error::Shape(format!(
                    "cat: shapes {:?} and {:?} differ outside axis {axis}",
                    first.shape(),
                    t.shape()
                )));
            }
        }
        // Whatever the order: f32 with f64 joins as f64, integers with floats as the float.
        let dtype = tensors
            .iter()
            .fold(first.dtype(), |d, t| d.promote(t.dtype()));
        let cast: Vec<Tensor> = tensors.iter().map(|t| t.to_dtype(dtype)).collect();
        let sizes: Vec<usize> = cast.iter().map(|t| t.shape()[axis]).collect();
        let total = sizes.iter().try_fold(0usize, |acc, &n| acc.checked_add(n));
        let out_shape = total
            .map(|total| with_axis(first.shape(), axis, total))
            .filter(|s| checked_numel(s).is_some())
            .ok_or_else(|| {
                Error::Shape(format!(
                    "cat: joining {} tensors along axis {axis} gives more elements than fit \
                     in memory",
                    tensors.len()
                ))
            })?;
        let out = with_any_dtype!(dtype, T => {
            let Rows { outer, inner, .. } = Rows::around(&out_shape, axis);
            let datas: Vec<_> = cast.iter().map(|t| t.contiguous_data::<T>()).collect();
            let parts: Vec<&[T]> = datas.iter().map(|d| &d[..]).collect();
            let runs: Vec<usize> = sizes.iter().map(|&n| n * inner).collect();
            Tensor::from_data(index::concat(&parts, &runs, outer), &out_shape)
        });
        let inputs: Vec<&Tensor> = cast.iter().collect();
        Ok(record("cat", out, &inputs, move |c, up| {
            let mut start = 0;
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let g = c.needs(i).then(|| up.narrow(axis, start, n));
                    start += n;
                    g
                })
                .collect()
        }))
    }

    /// Tensors of one shape stacked along a new axis `axis`.
    /// A negative `axis` counts from the back of the result.
    pub fn stack<A: Axis>(tensors: &[&Tensor], axis: A) -> Tensor {
        let expanded: Vec<Tensor> = tensors.iter().map(|t| t.unsqueeze(axis)).collect();
        let refs: Vec<&Tensor> = expanded.iter().collect();
        Tensor::cat(&refs, axis)
    }
}
