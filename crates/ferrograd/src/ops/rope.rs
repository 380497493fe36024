//! Rotary position embeddings (RoPE, Su et al. 2021): each pair of features of a query or key
//! is rotated by an angle that grows with the position, so that `q·k` depends on how far apart
//! two positions are. A composite of primitives (products with constant cos/sin tables, a
//! negation and a concatenation): differentiable to every order with no rule of its own.

use crate::tensor::trace::{self, attrs};
use crate::tensor::{DType, Tensor};

impl Tensor {
    /// Rotary position embedding of `self` `[.., T, D]` (D even; positions on the second-last
    /// axis, `start..start + T`, so that a key/value cache continues where it left off), in
    /// the half-split layout of GPT-NeoX and LLaMA: feature `i` pairs with `i + D/2` and the
    /// pair turns by `position · base^(−2i/D)`. `base` is 10000 in those models.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::ones(&[1, 3, 4], DType::F64);
    /// let r = x.rope(0, 10000.0);
    /// assert_eq!(r.shape(), &[1, 3, 4]);
    /// // Position 0 is not turned; a rotation keeps every pair's length.
    /// assert_eq!(r.narrow(1, 0, 1).to_vec::<f64>(), vec![1.0; 4]);
    /// let len = r.square().sum_axes(&[2], false).to_vec::<f64>();
    /// assert!(len.iter().all(|l| (l - 4.0).abs() < 1e-12));
    /// ```
    pub fn rope(&self, start: usize, base: f64) -> Tensor {
        let _profiled = crate::tensor::profile::scope("rope");
        trace::op("Rope", attrs![start, base], &[self], || {
            self.rope_untraced(start, base)
        })
    }

    fn rope_untraced(&self, start: usize, base: f64) -> Tensor {
        let n = self.ndim();
        assert!(
            n >= 2 && self.shape()[n - 1].is_multiple_of(2),
            "rope: expected [.., T, D] with D even, got {:?}",
            self.shape()
        );
        assert!(
            base.is_finite() && base > 0.0,
            "rope: base {base} must be finite and positive"
        );
        let (t, d) = (self.shape()[n - 2], self.shape()[n - 1]);
        let Some(end) = start.checked_add(t) else {
            panic!("rope: positions {start} to {start} + {t} are past the largest position")
        };
        let half = d / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(t * d), Vec::with_capacity(t * d));
        for p in start..end {
            // Each angle twice: once for the first half of the features, once for the second.
            for _ in 0..2 {
                for i in 0..half {
                    let angle = p as f64 * base.powf(-2.0 * i as f64 / d as f64);
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
        }
        let dtype = if self.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let table = |v: Vec<f64>| Tensor::from_vec(v, &[t, d]).to_dtype(dtype);
        let (first, second) = (self.narrow(-1, 0, half), self.narrow(-1, half, half));
        let turned = Tensor::cat(&[&-&second, &first], -1);
        &(self * &table(cos)) + &(&turned * &table(sin))
    }
}
