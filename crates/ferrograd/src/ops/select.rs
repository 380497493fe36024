//! Selections that transformers use: triangles of the last two axes, masked filling and the
//! `k` largest entries. Each is written with the differentiable ops (`where_cond` with a
//! constant mask, `index_select`), so each has derivatives of every order.

use super::Axis;
use crate::tensor::trace::{self, attrs};
use crate::tensor::{no_grad, DType, Tensor};

impl Tensor {
    /// The elements on and below diagonal `k` of the last two axes, zeros above (PyTorch's
    /// `tril`: `k` > 0 keeps more, `k` < 0 fewer).
    pub fn tril(&self, k: isize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("tril");
        trace::op("Tril", attrs![k], &[self], || self.tril_untraced(k))
    }

    fn tril_untraced(&self, k: isize) -> Tensor {
        self.triangle("tril", k, |i, j, k| j - i <= k)
    }

    /// The elements on and above diagonal `k` of the last two axes, zeros below (`triu`).
    pub fn triu(&self, k: isize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("triu");
        trace::op("Triu", attrs![k], &[self], || self.triu_untraced(k))
    }

    fn triu_untraced(&self, k: isize) -> Tensor {
        self.triangle("triu", k, |i, j, k| j - i >= k)
    }

    fn triangle(&self, op: &str, k: isize, keep: fn(isize, isize, isize) -> bool) -> Tensor {
        assert!(
            self.ndim() >= 2,
            "{op}: needs at least 2 axes, got {:?}",
            self.shape()
        );
        let (r, c) = (self.shape()[self.ndim() - 2], self.shape()[self.ndim() - 1]);
        let kept = |x: usize| keep(((x / c) % r.max(1)) as isize, (x % c) as isize, k);
        if !self.dtype().is_float() {
            // Integers are kept or zeroed exactly (a selection, not arithmetic).
            let mut v = self.contiguous().to_vec::<i64>();
            v.iter_mut()
                .enumerate()
                .filter(|(x, _)| !kept(*x))
                .for_each(|(_, e)| *e = 0);
            return Tensor::from_vec(v, self.shape());
        }
        let mask: Vec<f64> = (0..r * c).map(|x| f64::from(u8::from(kept(x)))).collect();
        // A selection, not a product: an infinite element outside the triangle must become
        // 0, not NaN (PyTorch's causal mask is `triu` of a −∞ matrix).
        let mask = Tensor::from_vec(mask, &[r, c]).to_dtype(self.dtype());
        mask.where_cond(self, &Tensor::zeros(&[], self.dtype()))
    }

    /// `value` where `mask` (broadcast to this shape) is non-zero, this tensor's elements
    /// elsewhere (PyTorch's `masked_fill`). The gradient passes where the mask is zero.
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Tensor {
        let _profiled = crate::tensor::profile::scope("masked_fill");
        trace::op("MaskedFill", attrs![value], &[self, mask], || {
            self.masked_fill_untraced(mask, value)
        })
    }

    fn masked_fill_untraced(&self, mask: &Tensor, value: f64) -> Tensor {
        let fill = Tensor::full(&[], value, self.dtype());
        let out = mask.detach().ne_scalar(0.0).where_cond(&fill, self);
        if out.shape() != self.shape() {
            panic!(
                "masked_fill: mask {:?} does not broadcast to {:?}",
                mask.shape(),
                self.shape()
            );
        }
        out
    }

    /// The `k` largest entries along the last axis, largest first, and their positions
    /// (`I64`), as PyTorch's `topk`. Ties keep the earlier position first; NaN counts as
    /// largest. The values are differentiable (the gradient goes to the chosen positions).
    pub fn topk(&self, k: usize) -> (Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("topk");
        self.topk_along(k, -1, true)
    }

    /// [`Tensor::topk`] along `axis`, of the largest entries (largest first) or with
    /// `largest` false the smallest (smallest first; NaN still counts as largest, as in
    /// PyTorch's `topk(largest=False)`).
    pub fn topk_along<A: Axis>(&self, k: usize, axis: A, largest: bool) -> (Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("topk_along");
        let resolved = super::traced_axis(axis, self.ndim());
        trace::op("TopK", attrs![k, resolved, largest], &[self], || {
            self.topk_along_untraced(k, axis, largest)
        })
    }

    fn topk_along_untraced<A: Axis>(&self, k: usize, axis: A, largest: bool) -> (Tensor, Tensor) {
        if self.ndim() == 0 {
            // A number is its own single entry (axis 0 or −1, as PyTorch's).
            assert!(
                axis.position(1).is_some(),
                "topk: axis {axis} is not an axis of a 0-d tensor"
            );
            let (v, i) = self.reshape(&[1]).topk_along(k, 0, largest);
            let shape: &[usize] = if k == 1 { &[] } else { &[k] };
            return (v.reshape(shape), i.reshape(shape));
        }
        let last = self.ndim() - 1;
        let Some(axis) = axis.position(self.ndim()) else {
            panic!("topk: axis {axis} is not an axis of {:?}", self.shape())
        };
        if axis != last {
            let (v, i) = self.transpose(axis, last).topk_along(k, last, largest);
            return (v.transpose(axis, last), i.transpose(axis, last));
        }
        let n = self.shape()[last];
        assert!(
            k <= n,
            "topk: k {k} is more than the {n} entries of the last axis"
        );
        let rows = self.numel() / n.max(1);
        let values = self
            .detach()
            .to_dtype(DType::F64)
            .contiguous()
            .to_vec::<f64>();
        let mut picked = Vec::with_capacity(rows * k);
        for r in 0..rows {
            let row = &values[r * n..(r + 1) * n];
            let mut order: Vec<usize> = (0..n).collect();
            // NaN above every number; descending or ascending, stable for ties.
            order.sort_by(|&a, &b| {
                let up = row[a]
                    .partial_cmp(&row[b])
                    .unwrap_or_else(|| row[a].is_nan().cmp(&row[b].is_nan()));
                if largest {
                    up.reverse()
                } else {
                    up
                }
            });
            picked.extend(order[..k].iter().map(|&j| (r * n + j) as i64));
        }
        let mut shape = self.shape().to_vec();
        *shape.last_mut().expect("at least one axis") = k;
        let idx: Vec<i64> = picked.iter().map(|&f| f % n.max(1) as i64).collect();
        let positions = no_grad(|| Tensor::from_vec(idx, &shape));
        // Read by the positions as a tensor: the gradient scatters by the same tensor, which
        // a recording transform (vmap of a gradient) follows.
        (self.gather(last, &positions), positions)
    }
}
