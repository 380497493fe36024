//! Conversion between f32 and f64, and materialising views.

use smallvec::smallvec;

use crate::tensor::{record, with_dtype, DType, Element, Tensor};

impl Tensor {
    /// The same values in `dtype` (a no-op when it already is). Differentiable: the gradient is
    /// cast back.
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        if self.dtype() == dtype {
            return self.clone();
        }
        let out = with_dtype!(dtype, T => Tensor::from_data(self.to_vec::<T>(), self.shape()));
        let from = self.dtype();
        record("to_dtype", out, &[self], move |_, up| {
            smallvec![Some(up.to_dtype(from))]
        })
    }

    /// The elements in a fresh row-major buffer, or this tensor when it already is one.
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        let out = with_dtype!(self.dtype(), T => self.materialize::<T>());
        record("contiguous", out, &[self], |_, up| {
            smallvec![Some(up.clone())]
        })
    }

    /// An untracked contiguous copy of the elements.
    pub(crate) fn materialize<T: Element>(&self) -> Tensor {
        Tensor::from_data(self.contiguous_data::<T>().into_owned(), self.shape())
    }
}
