//! Statistics over axes, PyTorch's `var`, `std` and `logsumexp`, and running sums and
//! products (`cumsum`, `cumprod`), written with the differentiable reductions, selections and
//! element-wise ops, so each has derivatives of every order (integer scans are exact loops).

use super::{axes_in, axis_in, Axis};
use crate::kernels::reduce::scan_with;
use crate::kernels::Rows;
use crate::tensor::trace::{self, attrs};
use crate::tensor::{DType, Tensor};

impl Tensor {
    /// The variance over `axes`: the mean square distance from the mean, the sum divided by
    /// the count less `correction` (1, Bessel's, is PyTorch's default; 0 the population's).
    /// Where the count is at most `correction` the divisor is 0, as PyTorch's: infinite, or
    /// NaN for a sum of 0.
    pub fn var_axes<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("var_axes");
        let resolved = super::traced_axes(axes, self.ndim());
        trace::op(
            "VarAxes",
            attrs![resolved.clone(), correction, keepdim],
            &[self],
            || self.var_axes_untraced(axes, correction, keepdim),
        )
    }

    fn var_axes_untraced<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Tensor {
        let axes = axes_in("var_axes", axes, self.shape());
        let count: usize = axes.iter().map(|&a| self.shape()[a]).product();
        let centered = self - &self.mean_axes(&axes, true);
        let squares = centered.square().sum_axes(&axes, keepdim);
        let divisor = count.saturating_sub(correction) as f64;
        squares.div_scalar(divisor)
    }

    /// The standard deviation over `axes`: the square root of [`Tensor::var_axes`]. Where
    /// every element is the same its gradient is 0, as PyTorch defines it (the square root's
    /// infinite slope times the variance's zero would be NaN).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::from_vec(vec![2.0f64, 2.0, 1.0, 3.0], &[2, 2]).requires_grad();
    /// let g = grad(&x.std_axes(&[1], 0, false).sum(), &[&x]).remove(0);
    /// assert_eq!(g.to_vec::<f64>(), [0.0, 0.0, -0.5, 0.5]);
    /// ```
    pub fn std_axes<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("std_axes");
        let resolved = super::traced_axes(axes, self.ndim());
        trace::op(
            "StdAxes",
            attrs![resolved.clone(), correction, keepdim],
            &[self],
            || self.std_axes_untraced(axes, correction, keepdim),
        )
    }

    fn std_axes_untraced<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Tensor {
        let var = self.var_axes(axes, correction, keepdim);
        let nonzero = var.detach().ne_scalar(0.0);
        let safe = nonzero.where_cond(&var, &var.ones_like());
        nonzero.where_cond(&safe.sqrt(), &var.zeros_like())
    }

    /// `log Σ exp(x)` over `axes`, without overflow: the largest element is taken out first
    /// (where it is infinite, the sum is of the infinities themselves, as PyTorch's).
    pub fn logsumexp<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("logsumexp");
        let resolved = super::traced_axes(axes, self.ndim());
        trace::op(
            "Logsumexp",
            attrs![resolved.clone(), keepdim],
            &[self],
            || self.logsumexp_untraced(axes, keepdim),
        )
    }

    fn logsumexp_untraced<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
        let axes = axes_in("logsumexp", axes, self.shape());
        if axes.iter().any(|&a| self.shape()[a] == 0) {
            // The log of an empty sum.
            let sum = self.sum_axes(&axes, keepdim);
            return &sum + f64::NEG_INFINITY;
        }
        let top = self.max_axes(&axes, true).detach();
        let finite = top.abs().lt_scalar(f64::INFINITY);
        let shift = finite.where_cond(&top, &top.zeros_like());
        let sum = (self - &shift).exp().sum_axes(&axes, true);
        let out = &sum.log() + &shift;
        if keepdim {
            out
        } else {
            let mut axes = axes;
            axes.sort_unstable();
            axes.iter().rev().fold(out, |t, &a| t.squeeze(a))
        }
    }

    /// The running sums along `axis` (PyTorch's `cumsum`): element `i` is the sum of elements
    /// `0..=i`. Computed by doubling shifts (each step adds the sums so far shifted by 1, 2,
    /// 4, ... places, zeros shifted in), so that only additions touch the values (an infinity
    /// or NaN reaches only the sums after it) and the derivative, the running sums from the
    /// other end, comes with it; float sums may round differently from a sequential loop.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// assert_eq!(x.cumsum(1).to_vec::<f32>(), [1.0, 3.0, 3.0, 7.0]);
    /// ```
    pub fn cumsum<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("cumsum");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Cumsum", attrs![resolved], &[self], || {
            self.cumsum_untraced(axis)
        })
    }

    fn cumsum_untraced<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis_in("cumsum", axis, self.shape());
        if self.dtype() == DType::I64 {
            return self.integer_scan(axis, i64::wrapping_add);
        }
        self.doubling_scan(axis, 0.0, |sums, shifted| sums + shifted)
    }

    /// The running products along `axis` (PyTorch's `cumprod`), by doubling shifts as
    /// [`Tensor::cumsum`] (ones shifted in), so that the derivative of every order comes from
    /// the products; an `I64` tensor multiplies exactly, wrapping on overflow as PyTorch's.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]);
    /// assert_eq!(x.cumprod(0).to_vec::<f32>(), [1.0, 2.0, 6.0, 24.0]);
    /// let big = Tensor::from_vec(vec![1i64 << 40, 1 << 20, 16], &[3]);
    /// assert_eq!(big.cumprod(0).to_vec::<i64>(), [1 << 40, 1 << 60, 0]); // 2⁶⁴ wraps to 0
    /// ```
    pub fn cumprod<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("cumprod");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Cumprod", attrs![resolved], &[self], || {
            self.cumprod_untraced(axis)
        })
    }

    fn cumprod_untraced<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis_in("cumprod", axis, self.shape());
        if self.dtype() == DType::I64 {
            return self.integer_scan(axis, i64::wrapping_mul);
        }
        self.doubling_scan(axis, 1.0, |prods, shifted| prods * shifted)
    }

    /// A running `combine` along `axis` by doubling shifts: each step combines the results
    /// so far with themselves shifted by 1, 2, 4, ... places, `identity` shifted in.
    fn doubling_scan(
        &self,
        axis: usize,
        identity: f64,
        combine: impl Fn(&Tensor, &Tensor) -> Tensor,
    ) -> Tensor {
        let n = self.shape()[axis];
        let (mut acc, mut shift) = (self.clone(), 1);
        while shift < n {
            let mut front = self.shape().to_vec();
            front[axis] = shift;
            let fill = Tensor::full(&front, identity, self.dtype());
            let shifted = Tensor::cat(&[&fill, &acc.narrow(axis, 0, n - shift)], axis);
            acc = combine(&acc, &shifted);
            shift *= 2;
        }
        acc
    }

    /// The running `op` of an integer tensor along `axis`, exact (no derivative: an integer
    /// tensor is never tracked).
    fn integer_scan(&self, axis: usize, op: fn(i64, i64) -> i64) -> Tensor {
        let data = self.contiguous_data::<i64>();
        let mut out = vec![0i64; data.len()];
        scan_with(&data, Rows::around(self.shape(), axis), &mut out, op);
        Tensor::from_data(out, self.shape())
    }
}
