//! Conversion between dtypes, and materialising views.

use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use crate::tensor::{record, record_nondiff, with_any_dtype, DType, Element, Tensor};

impl Tensor {
    /// The same values in `dtype` (a no-op when it already is), cast as PyTorch casts (into
    /// an integer: truncated toward zero). Between floats it is differentiable (the gradient is
    /// cast back); a cast into an integer has no derivative.
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        let _profiled = crate::tensor::profile::scope("to_dtype");
        trace::op("ToDtype", attrs![dtype], &[self], || {
            self.to_dtype_untraced(dtype)
        })
    }

    fn to_dtype_untraced(&self, dtype: DType) -> Tensor {
        if self.dtype() == dtype {
            return self.clone();
        }
        let out = with_any_dtype!(dtype, T => Tensor::from_data(self.to_vec::<T>(), self.shape()));
        if !dtype.is_float() {
            return record_nondiff("to_dtype", out, &[self]);
        }
        let from = self.dtype();
        record("to_dtype", out, &[self], move |_, up| {
            smallvec![Some(up.to_dtype(from))]
        })
    }

    /// The elements in a fresh row-major buffer, or this tensor when it already is one.
    pub fn contiguous(&self) -> Tensor {
        let _profiled = crate::tensor::profile::scope("contiguous");
        if self.is_contiguous() {
            return self.clone();
        }
        let out = with_any_dtype!(self.dtype(), T => self.materialize::<T>());
        record("contiguous", out, &[self], |_, up| {
            smallvec![Some(up.clone())]
        })
    }

    /// An untracked contiguous copy of the elements.
    pub(crate) fn materialize<T: Element>(&self) -> Tensor {
        Tensor::from_data(self.contiguous_data::<T>().into_owned(), self.shape())
    }
}
