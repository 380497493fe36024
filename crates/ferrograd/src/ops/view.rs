//! Views: reshape (wherever strides allow; else it copies), permute, transpose, broadcast_to,
//! squeeze, unsqueeze, flatten_from and narrow share the input's storage. Each gradient maps
//! back through the inverse view (broadcast sums, narrow pads).

use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use super::shape::{check_axis, eager, eager_or_panic, known, numel, same, show, Rule, Shape};
use super::{axis_in, with_axis, Axis};
use crate::error::Result;
use crate::kernels::strided;
use crate::tensor::{
    checked_numel, contiguous_strides, record, record_part, with_any_dtype, with_dtype, Dims,
    Layout, Part, Tensor,
};

impl Tensor {
    /// The same elements in `shape` (same count). A view wherever strides can address them in
    /// the new shape (always for a contiguous tensor; for a strided one when only axes that
    /// step evenly through memory are merged), else a copy: PyTorch's `reshape`.
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        let _profiled = crate::tensor::profile::scope("reshape");
        self.try_reshape(shape).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::reshape`], returning [`Error::Shape`](crate::error::Error::Shape) instead of
    /// panicking when the element counts differ.
    pub fn try_reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("reshape");
        trace::op("Reshape", attrs![shape.to_vec()], &[self], || {
            self.reshape_untraced(shape)
        })
    }

    fn reshape_untraced(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        eager("reshape", reshape_rule(&known(self.shape()), shape))?;
        // A view where strides can address the elements in their new shape (a split axis of a
        // strided tensor, say), as PyTorch's reshape; a copy otherwise.
        let out = match self.layout().reshaped(shape) {
            Some(layout) => self.detach().view_untracked(layout),
            None => {
                let base = with_any_dtype!(self.dtype(), T => self.materialize::<T>());
                let layout = Layout {
                    shape: Dims::from_slice(shape),
                    strides: contiguous_strides(shape),
                    offset: base.layout().offset,
                };
                base.view_untracked(layout)
            }
        };
        Ok(record("reshape", out, &[self], |c, up| {
            smallvec![Some(up.reshape(c.input(0).shape()))]
        }))
    }

    /// Axes reordered: axis `i` of the result is axis `perm[i]` of this tensor. A view.
    pub fn permute(&self, perm: &[usize]) -> Tensor {
        let _profiled = crate::tensor::profile::scope("permute");
        trace::op("Permute", attrs![perm.to_vec()], &[self], || {
            self.permute_untraced(perm)
        })
    }

    fn permute_untraced(&self, perm: &[usize]) -> Tensor {
        eager_or_panic("permute", permute_rule(&known(self.shape()), perm));
        let n = self.ndim();
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
        let _profiled = crate::tensor::profile::scope("transpose");
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
        let _profiled = crate::tensor::profile::scope("t");
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
        let _profiled = crate::tensor::profile::scope("broadcast_to");
        self.try_broadcast_to(shape)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::broadcast_to`], returning [`Error::Shape`](crate::error::Error::Shape) instead of
    /// panicking when the shape cannot be broadcast to `shape`.
    pub fn try_broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("broadcast_to");
        trace::op("BroadcastTo", attrs![shape.to_vec()], &[self], || {
            self.broadcast_to_untraced(shape)
        })
    }

    fn broadcast_to_untraced(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        eager(
            "broadcast_to",
            broadcast_to_rule(&known(self.shape()), shape),
        )?;
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
        let _profiled = crate::tensor::profile::scope("squeeze");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Squeeze", attrs![resolved], &[self], || {
            self.squeeze_untraced(axis)
        })
    }

    fn squeeze_untraced<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis_in("squeeze", axis, self.shape());
        self.reshape(&eager_or_panic(
            "squeeze",
            squeeze_rule(&known(self.shape()), axis),
        ))
    }

    /// Inserts a size-1 axis at position `axis` (0..=ndim).
    /// A negative `axis` counts from the back of the result (`-1` appends an axis).
    pub fn unsqueeze<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("unsqueeze");
        let resolved = axis.position(self.ndim() + 1).unwrap_or(0);
        trace::op("Unsqueeze", attrs![resolved], &[self], || {
            self.unsqueeze_untraced(axis)
        })
    }

    fn unsqueeze_untraced<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis.position(self.ndim() + 1).unwrap_or_else(|| {
            panic!(
                "unsqueeze: axis {axis} out of range for shape {:?}",
                self.shape()
            )
        });
        self.reshape(&eager_or_panic(
            "unsqueeze",
            unsqueeze_rule(&known(self.shape()), axis),
        ))
    }

    /// Axes from `start` on merged into one: `[N, C, H, W].flatten_from(1)` is `[N, C*H*W]`.
    pub fn flatten_from(&self, start: usize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("flatten_from");
        trace::op("FlattenFrom", attrs![start], &[self], || {
            self.flatten_from_untraced(start)
        })
    }

    fn flatten_from_untraced(&self, start: usize) -> Tensor {
        self.reshape(&eager_or_panic(
            "flatten_from",
            flatten_from_rule(&known(self.shape()), start),
        ))
    }

    /// Elements `start..start + len` along `axis`. A view.
    pub fn narrow<A: Axis>(&self, axis: A, start: usize, len: usize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("narrow");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Narrow", attrs![resolved, start, len], &[self], || {
            self.narrow_untraced(axis, start, len)
        })
    }

    fn narrow_untraced<A: Axis>(&self, axis: A, start: usize, len: usize) -> Tensor {
        let axis = axis_in("narrow", axis, self.shape());
        eager_or_panic(
            "narrow",
            narrow_rule(&known(self.shape()), axis, start, len),
        );
        let size = self.shape()[axis];
        let l = self.layout();
        let layout = Layout {
            shape: with_axis(&l.shape, axis, len),
            strides: l.strides.clone(),
            offset: l.offset + start * l.strides[axis],
        };
        let out = self.view_untracked(layout);
        record_part("narrow", out, self, Part { axis, start }, move |_, up| {
            smallvec![Some(up.pad_part(Part { axis, start }, size))]
        })
    }
}

impl Tensor {
    /// `g` added into the block of `self` that `part` names: the gradient of a narrowed view
    /// joining its input's, in a pass that builds no graph (untracked). In place when `self`
    /// alone owns its buffer; otherwise `self` becomes a copy first, and whatever shared the
    /// buffer keeps its values.
    pub(crate) fn add_part(&mut self, part: Part, g: &Tensor) {
        let shape = self.shape().to_vec();
        let mut start = vec![0; shape.len()];
        start[part.axis] = part.start;
        with_dtype!(self.dtype(), T => {
            let src = g.contiguous_data::<T>();
            strided::add_into_block(&src, g.shape(), self.data_mut::<T>(), &shape, &start);
        });
    }

    /// This gradient of the block `part` of a tensor whose axis `part.axis` is `size` long,
    /// padded with zeros to that tensor's shape: the block's share of its gradient.
    pub(crate) fn pad_part(&self, part: Part, size: usize) -> Tensor {
        let mut pads = vec![(0, 0); self.ndim()];
        let len = self.shape()[part.axis];
        pads[part.axis] = (part.start, size - part.start - len);
        self.pad(&pads, 0.0)
    }
}

// The views' shape rules, which the static graph's inference shares (see `ops::shape`).

/// The known sizes must make the target's count (free axes must be able to make up the rest).
pub(crate) fn reshape_rule(s: &[Option<usize>], to: &[usize]) -> Rule {
    let target =
        checked_numel(to).ok_or_else(|| format!("{to:?} has more elements than fit in memory"))?;
    let fixed: Vec<usize> = s.iter().flatten().copied().collect();
    let fixed = checked_numel(&fixed)
        .ok_or_else(|| format!("{} has more elements than fit in memory", show(s)))?;
    let fits = if s.iter().all(Option::is_some) {
        fixed == target
    } else if fixed == 0 {
        target == 0
    } else {
        target.is_multiple_of(fixed)
    };
    if !fits {
        return Err(format!(
            "cannot reshape {} ({fixed} elements) into {to:?} ({target} elements)",
            show(s)
        ));
    }
    Ok(known(to))
}

/// `p` must name every axis once.
pub(crate) fn permute_rule(s: &[Option<usize>], p: &[usize]) -> Rule {
    let mut seen = vec![false; s.len()];
    let valid = p.len() == s.len()
        && p.iter()
            .all(|&i| i < s.len() && !std::mem::replace(&mut seen[i], true));
    if !valid {
        return Err(format!(
            "{p:?} is not a permutation of the axes of {}",
            show(s)
        ));
    }
    Ok(p.iter().map(|&i| s[i]).collect())
}

/// numpy's rule: new axes in front, size-1 axes repeated.
pub(crate) fn broadcast_to_rule(s: &[Option<usize>], to: &[usize]) -> Rule {
    let lead = to.len().checked_sub(s.len());
    let fits = lead.is_some_and(|lead| {
        s.iter()
            .zip(&to[lead..])
            .all(|(n, &t)| n.is_none_or(|n| n == 1 || n == t))
    });
    if !fits || checked_numel(to).is_none() {
        return Err(format!("cannot broadcast {} to {to:?}", show(s)));
    }
    Ok(known(to))
}

pub(crate) fn squeeze_rule(s: &[Option<usize>], axis: usize) -> Rule {
    check_axis(axis, s)?;
    if !same(s[axis], Some(1)) {
        return Err(format!("axis {axis} of {} is not of size 1", show(s)));
    }
    let mut out = s.to_vec();
    out.remove(axis);
    Ok(out)
}

pub(crate) fn unsqueeze_rule(s: &[Option<usize>], axis: usize) -> Rule {
    if axis > s.len() {
        return Err(format!("axis {axis} out of range for shape {}", show(s)));
    }
    let mut out: Shape = s.to_vec();
    out.insert(axis, Some(1));
    Ok(out)
}

pub(crate) fn flatten_from_rule(s: &[Option<usize>], start: usize) -> Rule {
    if start > s.len() {
        return Err(format!("axis {start} out of range for shape {}", show(s)));
    }
    let mut out = s[..start].to_vec();
    out.push(numel(&s[start..])?);
    Ok(out)
}

pub(crate) fn narrow_rule(s: &[Option<usize>], axis: usize, start: usize, len: usize) -> Rule {
    check_axis(axis, s)?;
    let end = start.checked_add(len);
    if end.is_none() || s[axis].is_some_and(|n| end.is_some_and(|end| end > n)) {
        return Err(format!(
            "{len} elements from {start} out of bounds for axis {axis} of {}",
            show(s)
        ));
    }
    let mut out = s.to_vec();
    out[axis] = Some(len);
    Ok(out)
}
