//! Statistics over axes, PyTorch's `var`, `std` and `logsumexp`, and running sums
//! (`cumsum`), written with the differentiable reductions, selections and element-wise ops,
//! so each has derivatives of every order.

use super::{axes_in, axis_in, Axis};
use crate::tensor::Tensor;

impl Tensor {
    /// The variance over `axes`: the mean square distance from the mean, the sum divided by
    /// the count less `correction` (1, Bessel's, is PyTorch's default; 0 the population's).
    /// Where the count is at most `correction` the divisor is 0, as PyTorch's: infinite, or
    /// NaN for a sum of 0.
    pub fn var_axes<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Tensor {
        let axes = axes_in("var_axes", axes, self.shape());
        let count: usize = axes.iter().map(|&a| self.shape()[a]).product();
        let centered = self - &self.mean_axes(&axes, true);
        let squares = centered.square().sum_axes(&axes, keepdim);
        let divisor = count.saturating_sub(correction) as f64;
        squares.div_scalar(divisor)
    }

    /// The standard deviation over `axes`: the square root of [`Tensor::var_axes`].
    pub fn std_axes<A: Axis>(&self, axes: &[A], correction: usize, keepdim: bool) -> Tensor {
        self.var_axes(axes, correction, keepdim).sqrt()
    }

    /// `log Σ exp(x)` over `axes`, without overflow: the largest element is taken out first
    /// (where it is infinite, the sum is of the infinities themselves, as PyTorch's).
    pub fn logsumexp<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
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
        let axis = axis_in("cumsum", axis, self.shape());
        let n = self.shape()[axis];
        let (mut sums, mut shift) = (self.clone(), 1);
        while shift < n {
            let mut front = self.shape().to_vec();
            front[axis] = shift;
            let zeros = Tensor::zeros(&front, self.dtype());
            let shifted = Tensor::cat(&[&zeros, &sums.narrow(axis, 0, n - shift)], axis);
            sums = &sums + &shifted;
            shift *= 2;
        }
        sums
    }
}
