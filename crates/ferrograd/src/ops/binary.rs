//! Element-wise functions of two tensors with numpy broadcasting; gradients are summed back to
//! each operand's shape.

use super::{broadcast_shape_or_panic, zip_dispatch};
use smallvec::smallvec;

use crate::kernels::strided;
use crate::tensor::{filled, numel_or_panic, record, with_dtype, BackwardCtx, InputGrads, Tensor};
use num_traits::Zero;

/// Both operands in one dtype: f32 meets f64 as f64 (the cast is differentiable).
pub(crate) fn promote(a: &Tensor, b: &Tensor) -> (Tensor, Tensor) {
    let to = a.dtype().promote(b.dtype());
    (a.to_dtype(to), b.to_dtype(to))
}

macro_rules! promoted {
    ($a:expr, $b:expr, $method:ident) => {
        if $a.dtype() != $b.dtype() {
            let (a, b) = promote($a, $b);
            return a.$method(&b);
        }
    };
}

impl Tensor {
    /// Element-wise `self + other` with broadcasting (the `+` operator); mixed dtypes are
    /// promoted (f32 with f64 to f64). Panics when the shapes do not broadcast.
    pub fn add(&self, other: &Tensor) -> Tensor {
        promoted!(self, other, add);
        let out = zip_dispatch!("add", self, other, |x, y| x + y);
        record("add", out, &[self, other], |c, up| {
            smallvec![
                c.needs(0).then(|| up.sum_to(c.input(0).shape())),
                c.needs(1).then(|| up.sum_to(c.input(1).shape())),
            ]
        })
    }

    /// Element-wise `self - other` with broadcasting (the `-` operator); mixed dtypes are
    /// promoted (f32 with f64 to f64). Panics when the shapes do not broadcast.
    pub fn sub(&self, other: &Tensor) -> Tensor {
        promoted!(self, other, sub);
        let out = zip_dispatch!("sub", self, other, |x, y| x - y);
        record("sub", out, &[self, other], |c, up| {
            smallvec![
                c.needs(0).then(|| up.sum_to(c.input(0).shape())),
                c.needs(1).then(|| (-up).sum_to(c.input(1).shape())),
            ]
        })
    }

    /// Element-wise `self * other` with broadcasting (the `*` operator); mixed dtypes are
    /// promoted (f32 with f64 to f64). Panics when the shapes do not broadcast.
    pub fn mul(&self, other: &Tensor) -> Tensor {
        promoted!(self, other, mul);
        let out = zip_dispatch!("mul", self, other, |x, y| x * y);
        record("mul", out, &[self, other], |c, up| {
            let (a, b) = (c.input(0), c.input(1));
            smallvec![
                c.needs(0).then(|| (up * b).sum_to(a.shape())),
                c.needs(1).then(|| (up * a).sum_to(b.shape())),
            ]
        })
    }

    /// Element-wise `self / other` with broadcasting (the `/` operator); mixed dtypes are
    /// promoted (f32 with f64 to f64). Panics when the shapes do not broadcast.
    pub fn div(&self, other: &Tensor) -> Tensor {
        promoted!(self, other, div);
        let out = zip_dispatch!("div", self, other, |x, y| x / y);
        record("div", out, &[self, other], |c, up| {
            let (a, b) = (c.input(0), c.input(1));
            smallvec![
                c.needs(0).then(|| (up / b).sum_to(a.shape())),
                c.needs(1)
                    .then(|| (-&(&(up * c.out()) / b)).sum_to(b.shape())),
            ]
        })
    }

    /// Element-wise maximum; at a tie each operand receives half the gradient (the mean of the
    /// one-sided derivatives, which central differences also see).
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        promoted!(self, other, maximum);
        let out = zip_dispatch!("maximum", self, other, |x, y| if x >= y { x } else { y });
        record("maximum", out, &[self, other], |c, up| {
            let (a, b) = (c.input(0).detach(), c.input(1).detach());
            tie_split(c, &a.gt(&b), &a.eq(&b), up)
        })
    }

    /// Element-wise minimum; ties split the gradient as in [`Tensor::maximum`].
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        promoted!(self, other, minimum);
        let out = zip_dispatch!("minimum", self, other, |x, y| if x <= y { x } else { y });
        record("minimum", out, &[self, other], |c, up| {
            let (a, b) = (c.input(0).detach(), c.input(1).detach());
            tie_split(c, &a.lt(&b), &a.eq(&b), up)
        })
    }

    /// Elements of `on_true` where this mask is non-zero, of `on_false` elsewhere (all three
    /// broadcast together). The mask receives no gradient.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Tensor {
        if on_true.dtype() != on_false.dtype() {
            let (t, f) = promote(on_true, on_false);
            return self.where_cond(&t, &f);
        }
        let cond = self.to_dtype(on_true.dtype()).detach();
        let shape = broadcast_shape_or_panic("where_cond", self.shape(), on_true.shape());
        let shape = broadcast_shape_or_panic("where_cond", &shape, on_false.shape());
        let out = with_dtype!(on_true.dtype(), T => {
            let (sc, st, sf) = (
                cond.layout().broadcast_strides(&shape),
                on_true.layout().broadcast_strides(&shape),
                on_false.layout().broadcast_strides(&shape),
            );
            let mut out = filled("where", numel_or_panic("where", &shape), T::zero());
            strided::zip3(&shape, cond.src::<T>(&sc), on_true.src::<T>(&st), on_false.src::<T>(&sf), &mut out,
                |m, t, f| if m != T::zero() { t } else { f });
            Tensor::from_data(out, &shape)
        });
        record("where_cond", out, &[&cond, on_true, on_false], |c, up| {
            let mask = c.input(0);
            smallvec![
                None,
                c.needs(1).then(|| (up * mask).sum_to(c.input(1).shape())),
                c.needs(2)
                    .then(|| (up * &(1.0 - mask)).sum_to(c.input(2).shape())),
            ]
        })
    }
}

/// Gradients of an element-wise max or min: to the first operand where it `wins`, to the
/// second where it loses, half to each at a `tie`.
fn tie_split(c: &BackwardCtx<'_>, wins: &Tensor, tie: &Tensor, up: &Tensor) -> InputGrads {
    let first = wins + &(tie * 0.5);
    let second = 1.0 - &first;
    smallvec![
        c.needs(0).then(|| (up * &first).sum_to(c.input(0).shape())),
        c.needs(1)
            .then(|| (up * &second).sum_to(c.input(1).shape())),
    ]
}
