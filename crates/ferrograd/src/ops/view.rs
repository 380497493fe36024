//! Views: reshape (of a contiguous tensor), permute, transpose, broadcast_to, squeeze,
//! unsqueeze, flatten_from and narrow share the input's storage. Each gradient maps back
//! through the inverse view (broadcast sums, narrow pads).

use smallvec::smallvec;

use super::{axis_in, with_axis, Axis};
use crate::error::{Error, Result};
use crate::tensor::{
    broadcast_shapes, checked_numel, contiguous_strides, numel_or_panic, record, with_any_dtype,
    Dims, Layout, Tensor,
};

impl Tensor {
    /// The same elements in `shape` (same count). A view when the tensor is contiguous.
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        self.try_reshape(shape).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::reshape`], returning [`Error::Shape`] instead of panicking when the element
    /// counts differ.
    pub fn try_reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let n = checked_numel(shape);
        if n != Some(self.numel()) {
            return Err(Error::Shape(format!(
                "reshape: cannot reshape {:?} ({} elements) into {:?} ({})",
                self.shape(),
                self.numel(),
                shape,
                n.map_or("more elements than fit in memory".into(), |n| format!(
                    "{n} elements"
                ))
            )));
        }
        if shape == self.shape() {
            return Ok(self.clone());
        }
        let base = if self.is_contiguous() {
            self.detach()
        } else {
            with_any_dtype!(self.dtype(), T => self.materialize::<T>())
        };
        let layout = Layout {
            shape: Dims::from_slice(shape),
            strides: contiguous_strides(shape),
            offset: base.layout().offset,
        };
        let out = base.view_untracked(layout);
        Ok(record("reshape", out, &[self], |c, up| {
            smallvec![Some(up.reshape(c.input(0).shape()))]
        }))
    }

    /// Axes reordered: axis `i` of the result is axis `perm[i]` of this tensor. A view.
    pub fn permute(&self, perm: &[usize]) -> Tensor {
        let n = self.ndim();
        let mut seen = vec![false; n];
        let valid = perm.len() == n
            && perm
                .iter()
                .all(|&p| p < n && !std::mem::replace(&mut seen[p], true));
        assert!(
            valid,
            "permute: {perm:?} is not a permutation of the axes of shape {:?}",
            self.shape()
        );
        let out = self.view_untracked(self.layout().permuted(perm));
        let mut inverse = vec![0; n];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        record("permute", out, &[self], move |_, up| {
            smallvec![Some(up.permute(&inverse))]
        })
    }

    /// Axes `a` and `b` swapped. A view.
    pub fn transpose<A: Axis, B: Axis>(&self, a: A, b: B) -> Tensor {
        let (a, b) = (
            axis_in("transpose", a, self.shape()),
            axis_in("transpose", b, self.shape()),
        );
        let mut perm: Vec<usize> = (0..self.ndim()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// The last two axes swapped (the matrix transpose of a batch). A view.
    pub fn t(&self) -> Tensor {
        assert!(
            self.ndim() >= 2,
            "t: needs at least 2 axes, shape is {:?}",
            self.shape()
        );
        self.transpose(self.ndim() - 2, self.ndim() - 1)
    }

    /// This tensor repeated along new leading axes and size-1 axes to `shape`, as a view
    /// (stride 0 on the repeated axes). The gradient sums back.
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        self.try_broadcast_to(shape)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::broadcast_to`], returning [`Error::Shape`] instead of panicking when the
    /// shape cannot be broadcast to `shape`.
    pub fn try_broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        if shape.len() < self.ndim()
            || broadcast_shapes(self.shape(), shape).as_deref() != Some(shape)
            || checked_numel(shape).is_none()
        {
            return Err(Error::Shape(format!(
                "broadcast_to: cannot broadcast {:?} to {:?}",
                self.shape(),
                shape
            )));
        }
        let layout = Layout {
            shape: Dims::from_slice(shape),
            strides: self.layout().broadcast_strides(shape),
            offset: self.layout().offset,
        };
        let out = self.view_untracked(layout);
        Ok(record("broadcast_to", out, &[self], |c, up| {
            smallvec![Some(up.sum_to(c.input(0).shape()))]
        }))
    }

    /// Removes axis `axis`, which must have size 1.
    pub fn squeeze<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis_in("squeeze", axis, self.shape());
        assert!(
            self.shape()[axis] == 1,
            "squeeze: axis {axis} of shape {:?} has size {}, not 1",
            self.shape(),
            self.shape()[axis]
        );
        let mut shape = self.shape().to_vec();
        shape.remove(axis);
        self.reshape(&shape)
    }

    /// Inserts a size-1 axis at position `axis` (0..=ndim).
    /// A negative `axis` counts from the back of the result (`-1` appends an axis).
    pub fn unsqueeze<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis.position(self.ndim() + 1).unwrap_or_else(|| {
            panic!(
                "unsqueeze: axis {axis} out of range for shape {:?}",
                self.shape()
            )
        });
        let mut shape = self.shape().to_vec();
        shape.insert(axis, 1);
        self.reshape(&shape)
    }

    /// Axes from `start` on merged into one: `[N, C, H, W].flatten_from(1)` is `[N, C*H*W]`.
    pub fn flatten_from(&self, start: usize) -> Tensor {
        assert!(
            start <= self.ndim(),
            "flatten_from: axis {start} out of range for shape {:?}",
            self.shape()
        );
        let mut shape = self.shape()[..start].to_vec();
        shape.push(numel_or_panic("flatten_from", &self.shape()[start..]));
        self.reshape(&shape)
    }

    /// Elements `start..start + len` along `axis`. A view.
    pub fn narrow<A: Axis>(&self, axis: A, start: usize, len: usize) -> Tensor {
        let axis = axis_in("narrow", axis, self.shape());
        let size = self.shape()[axis];
        assert!(
            start.checked_add(len).is_some_and(|end| end <= size),
            "narrow: {len} elements from {start} out of bounds for axis {axis} of shape {:?}",
            self.shape()
        );
        let l = self.layout();
        let layout = Layout {
            shape: with_axis(&l.shape, axis, len),
            strides: l.strides.clone(),
            offset: l.offset + start * l.strides[axis],
        };
        let out = self.view_untracked(layout);
        record("narrow", out, &[self], move |_, up| {
            let mut pads = vec![(0, 0); up.ndim()];
            pads[axis] = (start, size - start - len);
            smallvec![Some(up.pad(&pads, 0.0))]
        })
    }
}
