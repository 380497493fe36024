//! Shape ops. Reshape of a contiguous tensor, permute, transpose, broadcast_to and narrow are
//! views (no copy); cat, stack, pad and index_select build new buffers. Each has an exact
//! gradient: views map back, selections scatter back.

use std::sync::Arc;

use super::{axis_in, Axis};
use smallvec::smallvec;

use crate::error::{Error, Result};
use crate::kernels::{strided, Float};
use crate::tensor::{
    broadcast_shapes, checked_numel, contiguous_strides, numel_or_panic, record, with_dtype, Dims,
    Element, Layout, Tensor,
};

/// A shape with `axis` set to `len`.
fn with_axis(shape: &[usize], axis: usize, len: usize) -> Dims {
    let mut s = Dims::from_slice(shape);
    s[axis] = len;
    s
}

/// Elements before, along and after `axis`: the `[outer, axis, inner]` view of a row-major
/// buffer.
fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

impl Tensor {
    /// The same elements in `shape` (same count). A view when the tensor is contiguous.
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        self.try_reshape(shape).unwrap_or_else(|e| panic!("{e}"))
    }

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
            with_dtype!(self.dtype(), T => self.materialize::<T>())
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
        let out = with_dtype!(self.dtype(), T => {
            let mut out = vec![T::from_f64(value); len];
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
        let dtype = first.dtype();
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
        let out = with_dtype!(dtype, T => cat_data::<T>(&cast, axis, &out_shape));
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
            let (outer, d, inner) = split_at_axis(self.shape(), axis);
            let x = self.contiguous_data::<T>();
            let mut out = Vec::with_capacity(outer * indices.len() * inner);
            for o in 0..outer {
                for &i in indices.iter() {
                    out.extend_from_slice(&x[(o * d + i) * inner..(o * d + i + 1) * inner]);
                }
            }
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
            let (outer, d, inner) = split_at_axis(self.shape(), axis);
            let mut out = self.contiguous_data::<T>().into_owned();
            let src = source.contiguous_data::<T>();
            for o in 0..outer {
                for (j, &i) in indices.iter().enumerate() {
                    let s = &src[(o * indices.len() + j) * inner..][..inner];
                    for (v, &a) in out[(o * d + i) * inner..][..inner].iter_mut().zip(s) {
                        *v += a;
                    }
                }
            }
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

/// Row-major data of `parts` joined along `axis` into `out_shape`.
fn cat_data<T: Element>(parts: &[Tensor], axis: usize, out_shape: &[usize]) -> Tensor {
    let (outer, _, inner) = split_at_axis(out_shape, axis);
    let datas: Vec<_> = parts.iter().map(|t| t.contiguous_data::<T>()).collect();
    let mut out = Vec::with_capacity(out_shape.iter().product());
    for o in 0..outer {
        for (t, data) in parts.iter().zip(&datas) {
            let run = t.shape()[axis] * inner;
            out.extend_from_slice(&data[o * run..(o + 1) * run]);
        }
    }
    Tensor::from_data(out, out_shape)
}
