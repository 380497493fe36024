//! Softmax and log-softmax along an axis, fused for stability (the maximum is subtracted before
//! `exp`, so logits of 1000 give no overflow) and speed. Each has its own rule.

use super::dtype::{eager_dtype_or_panic, float_rule};
use super::{axis_in, Axis};
use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use crate::kernels::reduce as kr;
use crate::kernels::Rows;
use crate::tensor::{record, with_dtype, FloatElement, Tensor};

fn fused<T: FloatElement>(x: &Tensor, axis: usize, log: bool) -> Tensor {
    let rows = Rows::around(x.shape(), axis);
    let mut out = vec![T::zero(); x.numel()];
    kr::softmax(&x.contiguous_data::<T>(), rows, log, &mut out);
    Tensor::from_data(out, x.shape())
}

impl Tensor {
    /// exp(x) / Σ exp(x) along `axis`.
    pub fn softmax<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("softmax");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("Softmax", attrs![resolved], &[self], || {
            self.softmax_untraced(axis)
        })
    }

    fn softmax_untraced<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis_in("softmax", axis, self.shape());
        eager_dtype_or_panic("softmax", float_rule(self.dtype()));
        let out = with_dtype!(self.dtype(), T => fused::<T>(self, axis, false));
        record("softmax", out, &[self], move |c, up| {
            let y = c.out();
            let dot = (up * y).sum_axes(&[axis], true);
            smallvec![Some(y * &(up - &dot))]
        })
    }

    /// x − log Σ exp(x) along `axis`.
    pub fn log_softmax<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("log_softmax");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("LogSoftmax", attrs![resolved], &[self], || {
            self.log_softmax_untraced(axis)
        })
    }

    fn log_softmax_untraced<A: Axis>(&self, axis: A) -> Tensor {
        let axis = axis_in("log_softmax", axis, self.shape());
        eager_dtype_or_panic("log_softmax", float_rule(self.dtype()));
        let out = with_dtype!(self.dtype(), T => fused::<T>(self, axis, true));
        record("log_softmax", out, &[self], move |c, up| {
            let total = up.sum_axes(&[axis], true);
            smallvec![Some(up - &(&c.out().exp() * &total))]
        })
    }
}
