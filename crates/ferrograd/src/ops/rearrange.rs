//! Rearrangements of elements, PyTorch's `gather`, `flip`, `roll` and `repeat`, written with
//! the differentiable selections (`index_select`, `narrow`, `cat`, broadcasting), so each has
//! derivatives of every order.

use smallvec::smallvec;

use super::{axes_in, axis_in, Axis};
use crate::tensor::trace::{self, attrs};
use crate::tensor::{no_grad, record, Tensor};

impl Tensor {
    /// PyTorch's `gather`: `out[i][j][k] = self[i][index[i][j][k]][k]` along `axis` 1 (so
    /// along any axis), `index` holding positions of that axis and the shape of the result;
    /// its other axes no longer than `self`'s. The gradient adds into each position picked.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let q = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// let taken = Tensor::from_vec(vec![1i64, 0], &[2, 1]);
    /// assert_eq!(q.gather(1, &taken).to_vec::<f32>(), [2.0, 3.0]);
    /// ```
    pub fn gather<A: Axis>(&self, axis: A, index: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("gather");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Gather", attrs![resolved], &[self, index], || {
            self.gather_untraced(axis, index)
        })
    }

    fn gather_untraced<A: Axis>(&self, axis: A, index: &Tensor) -> Tensor {
        let axis = axis_in("gather", axis, self.shape());
        let picks = positions_of("gather", self.shape(), axis, index);
        let out = no_grad(|| {
            self.reshape(&[self.numel()])
                .index_select(0, picks.as_slice())
                .reshape(index.shape())
        });
        // The derivative scatters by the index tensor itself, so that a recording transform
        // (vmap of a gradient) follows the index's values.
        let (index, shape) = (index.clone(), self.shape().to_vec());
        record("gather", out, &[self], move |c, up| {
            let zeros = Tensor::zeros(&shape, c.input(0).dtype());
            smallvec![Some(zeros.scatter_add(axis, &index, up))]
        })
    }

    /// PyTorch's `scatter_add`: this tensor with each element of `src` added at the position
    /// `index` names along `axis` (`out[i][index[i][j]][k] += src[i][j][k]` for axis 1);
    /// `index` has `src`'s shape, no other axis longer than this tensor's.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// let counts = Tensor::zeros(&[1, 3], DType::F64);
    /// let at = Tensor::from_vec(vec![2i64, 0, 2], &[1, 3]);
    /// let ones = Tensor::ones(&[1, 3], DType::F64);
    /// assert_eq!(counts.scatter_add(1, &at, &ones).to_vec::<f64>(), [1.0, 0.0, 2.0]);
    /// ```
    pub fn scatter_add<A: Axis>(&self, axis: A, index: &Tensor, src: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("scatter_add");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("ScatterAdd", attrs![resolved], &[self, index, src], || {
            self.scatter_add_untraced(axis, index, src)
        })
    }

    fn scatter_add_untraced<A: Axis>(&self, axis: A, index: &Tensor, src: &Tensor) -> Tensor {
        let axis = axis_in("scatter_add", axis, self.shape());
        assert_eq!(
            index.shape(),
            src.shape(),
            "scatter_add: index {:?} and src {:?} must have one shape",
            index.shape(),
            src.shape()
        );
        let picks = positions_of("scatter_add", self.shape(), axis, index);
        let out = no_grad(|| {
            let flat = src.to_dtype(self.dtype()).reshape(&[src.numel()]);
            self.reshape(&[self.numel()])
                .index_add(0, &picks, &flat)
                .reshape(self.shape())
        });
        let index = index.clone();
        record("scatter_add", out, &[self, src], move |c, up| {
            smallvec![
                c.needs(0).then(|| up.clone()),
                c.needs(1)
                    .then(|| up.gather(axis, &index).to_dtype(c.input(1).dtype())),
            ]
        })
    }
}

/// The flat positions in a tensor of `shape` that `index` names along `axis` (each element's
/// own position with its `axis` coordinate replaced by the index there): what `gather` reads
/// and `scatter_add` writes. Panics, naming `op`, for an index that does not fit.
fn positions_of(op: &str, shape: &[usize], axis: usize, index: &Tensor) -> Vec<usize> {
    let ishape = index.shape();
    assert!(
        ishape.len() == shape.len()
            && ishape
                .iter()
                .zip(shape)
                .enumerate()
                .all(|(a, (&i, &s))| a == axis || i <= s),
        "{op}: index {ishape:?} does not fit {shape:?} along axis {axis} (same rank, no \
         other axis longer)"
    );
    let len = shape[axis];
    let strides: Vec<usize> = (0..shape.len())
        .map(|a| shape[a + 1..].iter().product())
        .collect();
    index
        .to_vec::<f64>()
        .iter()
        .enumerate()
        .map(|(flat, &i)| {
            assert!(
                i >= 0.0 && i < len as f64 && i.fract() == 0.0,
                "{op}: index {i} is out of range for axis {axis} of length {len}"
            );
            // The position `flat` of `index`, with its `axis` coordinate replaced by `i`.
            let mut rest = flat;
            (0..ishape.len()).rev().fold(0, |at, a| {
                let c = rest % ishape[a];
                rest /= ishape[a];
                at + strides[a] * if a == axis { i as usize } else { c }
            })
        })
        .collect()
}

impl Tensor {
    /// The elements in reverse order along each of `axes` (PyTorch's `flip`; an axis named
    /// twice is refused, as there).
    pub fn flip<A: Axis>(&self, axes: &[A]) -> Tensor {
        let _profiled = crate::tensor::profile::scope("flip");
        let resolved = super::traced_axes(axes, self.ndim());
        trace::op("Flip", attrs![resolved.clone()], &[self], || {
            self.flip_untraced(axes)
        })
    }

    fn flip_untraced<A: Axis>(&self, axes: &[A]) -> Tensor {
        let axes = axes_in("flip", axes, self.shape());
        assert!(
            axes.iter().enumerate().all(|(i, a)| !axes[..i].contains(a)),
            "flip: axis repeated in {axes:?}"
        );
        axes.into_iter().fold(self.clone(), |t, a| {
            let reversed: Vec<usize> = (0..t.shape()[a]).rev().collect();
            t.index_select(a, reversed.as_slice())
        })
    }

    /// The elements shifted `shift` places along `axis`, those that fall off one end coming
    /// back at the other (PyTorch's `roll`; a negative shift goes the other way).
    pub fn roll<A: Axis>(&self, shift: isize, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("roll");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Roll", attrs![shift, resolved], &[self], || {
            self.roll_untraced(shift, axis)
        })
    }

    fn roll_untraced<A: Axis>(&self, shift: isize, axis: A) -> Tensor {
        let axis = axis_in("roll", axis, self.shape());
        let n = self.shape()[axis];
        if n == 0 {
            return self.clone();
        }
        let s = shift.rem_euclid(n as isize) as usize;
        if s == 0 {
            return self.clone();
        }
        let (tail, head) = (self.narrow(axis, n - s, s), self.narrow(axis, 0, n - s));
        Tensor::cat(&[&tail, &head], axis)
    }

    /// The tensor tiled `reps[a]` times along each axis (PyTorch's `repeat`; more `reps` than
    /// axes add leading axes).
    pub fn repeat(&self, reps: &[usize]) -> Tensor {
        let _profiled = crate::tensor::profile::scope("repeat");
        trace::op("Repeat", attrs![reps.to_vec()], &[self], || {
            self.repeat_untraced(reps)
        })
    }

    fn repeat_untraced(&self, reps: &[usize]) -> Tensor {
        assert!(
            reps.len() >= self.ndim(),
            "repeat: {} repetitions for {} axes (at least one per axis)",
            reps.len(),
            self.ndim()
        );
        let mut dims = vec![1; reps.len() - self.ndim()];
        dims.extend_from_slice(self.shape());
        // [d0, d1, ..] as [1, d0, 1, d1, ..], broadcast to [r0, d0, r1, d1, ..], then merged.
        let spread: Vec<usize> = dims.iter().flat_map(|&d| [1, d]).collect();
        let wide: Vec<usize> = reps.iter().zip(&dims).flat_map(|(&r, &d)| [r, d]).collect();
        let tiled: Vec<usize> = reps.iter().zip(&dims).map(|(&r, &d)| r * d).collect();
        self.reshape(&spread).broadcast_to(&wide).reshape(&tiled)
    }
}
