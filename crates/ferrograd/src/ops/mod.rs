//! The op table: every primitive's forward (calling `kernels`) next to its derivative rule,
//! written with tensor ops so that the rule is itself differentiable. One file per family.

pub(crate) mod attention;
pub(crate) mod binary;
mod cast;
mod compare;
pub(crate) mod concat;
pub(crate) mod conv;
pub(crate) mod dtype;
pub(crate) mod einsum;
pub(crate) mod index;
pub(crate) mod matmul;
pub(crate) mod norm;
mod operators;
pub(crate) mod pool;
mod random;
mod rearrange;
pub(crate) mod recurrent;
pub(crate) mod reduce;
mod rope;
mod select;
pub(crate) mod shape;
mod softmax;
mod statistics;
pub(crate) mod unary;
pub(crate) mod view;

pub(crate) use binary::promote as binary_promote;
pub use index::Indices;

use crate::kernels::strided;
use crate::tensor::{
    broadcast_shapes, numel_or_panic, reserved, Dims, Element, FloatElement, Layout, Tensor,
};

/// A shape with `axis` set to `len`.
pub(crate) fn with_axis(shape: &[usize], axis: usize, len: usize) -> Dims {
    let mut s = Dims::from_slice(shape);
    s[axis] = len;
    s
}

/// `f` applied to every element of `x`, as a new contiguous untracked tensor.
pub(crate) fn map_elems<T: Element>(x: &Tensor, f: impl Fn(T) -> T + Sync) -> Tensor {
    let l = x.layout();
    if l.numel() == 1 {
        // One element: computed in place of a kernel launch, stored inline.
        let v = f(x.buffer::<T>()[l.offset]);
        return Tensor::from_parts(T::inline(v), Layout::contiguous(&l.shape), None);
    }
    if l.is_contiguous() {
        let mut out = reserved("map", l.numel());
        strided::map_flat_into(&x.contiguous_data::<T>(), &mut out, f);
        return Tensor::from_data(out, &l.shape);
    }
    let mut out = reserved("map", l.numel());
    strided::map_into(&l.shape, x.src::<T>(&l.strides), &mut out, f);
    Tensor::from_data(out, &l.shape)
}

/// The slice function `f` (such as `Float::tanh_in_place`, vectorised) over a contiguous copy
/// of `x`; one element takes `map_elems`' inline path.
pub(crate) fn map_slices<T: FloatElement>(x: &Tensor, f: fn(&mut [T])) -> Tensor {
    if x.numel() == 1 {
        return map_elems(x, |v: T| {
            let mut one = [v];
            f(&mut one);
            one[0]
        });
    }
    let out = strided::applied(x.contiguous_data::<T>(), f);
    Tensor::from_data(out, x.shape())
}

/// Panics naming `op` unless the prediction and target shapes are equal (losses and metrics:
/// broadcasting `[N, 1]` against `[N]` would compare every prediction with every target).
pub(crate) fn same_shape(op: &str, pred: &Tensor, target: &Tensor) {
    assert!(
        pred.shape() == target.shape(),
        "{op}: prediction shape {:?} differs from target shape {:?}",
        pred.shape(),
        target.shape()
    );
}

/// The shape two operands of `op` broadcast to; panics naming the op and both shapes.
pub(crate) fn broadcast_shape_or_panic(op: &str, a: &[usize], b: &[usize]) -> Dims {
    let shape = broadcast_shapes(a, b)
        .unwrap_or_else(|| panic!("{op}: shapes {a:?} and {b:?} do not broadcast"));
    numel_or_panic(op, &shape);
    shape
}

/// `f(a, b)` element by element over the broadcast of the two shapes (same dtype `T`).
pub(crate) fn zip_elems<T: Element>(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(T, T) -> T + Sync,
) -> Tensor {
    if a.numel() == 1 && b.numel() == 1 {
        let shape = broadcast_shape_or_panic(op, a.shape(), b.shape());
        let v = f(
            a.buffer::<T>()[a.layout().offset],
            b.buffer::<T>()[b.layout().offset],
        );
        return Tensor::from_parts(T::inline(v), Layout::contiguous(&shape), None);
    }
    if a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous() {
        // Same shape, both row-major: a plain zip, no broadcasting plan.
        let (da, db) = (a.contiguous_data::<T>(), b.contiguous_data::<T>());
        let mut out = reserved(op, da.len());
        strided::zip_flat_into(&da, &db, &mut out, f);
        return Tensor::from_data(out, a.shape());
    }
    let shape = broadcast_shape_or_panic(op, a.shape(), b.shape());
    let sa = a.layout().broadcast_strides(&shape);
    let sb = b.layout().broadcast_strides(&shape);
    let mut out = reserved(op, numel_or_panic(op, &shape));
    strided::zip_into(&shape, a.src::<T>(&sa), b.src::<T>(&sb), &mut out, f);
    Tensor::from_data(out, &shape)
}

/// An axis: a position from the front (`usize`, or a non-negative signed integer) or, when
/// negative, from the back (`-1` is the last axis), as numpy and PyTorch count.
pub trait Axis: Copy + std::fmt::Display {
    /// The position among `ndim` axes, or `None` when out of range.
    fn position(self, ndim: usize) -> Option<usize>;
}

impl Axis for usize {
    fn position(self, ndim: usize) -> Option<usize> {
        (self < ndim).then_some(self)
    }
}

macro_rules! signed_axis {
    ($($t:ty),*) => {
        $(impl Axis for $t {
            fn position(self, ndim: usize) -> Option<usize> {
                let from_back = usize::try_from(self.unsigned_abs()).ok();
                match usize::try_from(self) {
                    Ok(a) => (a < ndim).then_some(a),
                    Err(_) => from_back.and_then(|b| ndim.checked_sub(b)),
                }
            }
        })*
    };
}
signed_axis!(i8, i16, i32, i64, isize);

/// An axis's position as a trace records it; 0 where it is out of range, which the op itself
/// reports (in its own words) before anything is recorded.
pub(crate) fn traced_axis<A: Axis>(axis: A, ndim: usize) -> usize {
    axis.position(ndim).unwrap_or(0)
}

/// Axes' positions as a trace records them, as [`traced_axis`].
pub(crate) fn traced_axes<A: Axis>(axes: &[A], ndim: usize) -> Vec<usize> {
    axes.iter().map(|&a| traced_axis(a, ndim)).collect()
}

/// `axis` as a position in `shape`, or a panic naming `op`.
pub(crate) fn axis_in<A: Axis>(op: &str, axis: A, shape: &[usize]) -> usize {
    axis.position(shape.len())
        .unwrap_or_else(|| panic!("{op}: axis {axis} out of range for shape {shape:?}"))
}

/// `axes` as positions in `shape`, or a panic naming `op`. Repeats are the reductions' shape
/// rule's to refuse (as numpy refuses `axis=(1, -2)` on three axes).
pub(crate) fn axes_in<A: Axis>(op: &str, axes: &[A], shape: &[usize]) -> Vec<usize> {
    axes.iter().map(|&a| axis_in(op, a, shape)).collect()
}

/// Whether a derivative clause of a primitives table declares a rule.
macro_rules! has_rule {
    (none $(,)?) => {
        false
    };
    ($($rule:tt)+) => {
        true
    };
}
pub(crate) use has_rule;

/// `f` applied elementwise to the tensor's elements, as `with_dtype` dispatch in one line.
macro_rules! map_dispatch {
    ($x:expr, |$v:ident| $body:expr) => {
        $crate::tensor::with_dtype!($x.dtype(), T => $crate::ops::map_elems::<T>($x, |$v: T| $body))
    };
}
pub(crate) use map_dispatch;

/// `map_slices` with the slice function `$f` of `x`'s float type (`tanh_in_place`, ...).
macro_rules! map_slices_dispatch {
    ($x:expr, $f:ident) => {
        $crate::tensor::with_dtype!($x.dtype(), T => $crate::ops::map_slices::<T>($x, <T as $crate::kernels::Float>::$f))
    };
}
pub(crate) use map_slices_dispatch;

/// As `map_dispatch`, for a binary elementwise function over broadcast operands of one dtype.
macro_rules! zip_dispatch {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        $crate::tensor::with_dtype!($a.dtype(), T => $crate::ops::zip_elems::<T>($op, $a, $b, |$x: T, $y: T| $body))
    };
}
pub(crate) use zip_dispatch;

/// A scalar of `like`'s dtype (for mixing tensors with plain numbers).
pub(crate) fn scalar_like(like: &Tensor, v: f64) -> Tensor {
    Tensor::full(&[], v, like.dtype())
}
