//! Random ops. Sampling has no derivative.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::tensor::{no_grad, record_nondiff, Tensor};

impl Tensor {
    /// The entries along axis 0 in a random order drawn from `rng`. Has no derivative: wrap it
    /// in `stop_gradient` (or `detach`) where a gradient could reach it.
    pub fn shuffle(&self, rng: &mut impl Rng) -> Tensor {
        let _profiled = crate::tensor::profile::scope("shuffle");
        assert!(
            self.ndim() > 0,
            "shuffle: needs at least one axis, shape is []"
        );
        let mut perm: Vec<usize> = (0..self.shape()[0]).collect();
        perm.shuffle(rng);
        let out = no_grad(|| self.detach().index_select(0, &perm));
        record_nondiff("shuffle", out, &[self])
    }

    /// `samples` class indices (`I64`) per row of the probabilities (or unnormalised
    /// non-negative weights) along the last axis, drawn from `rng`, as PyTorch's
    /// `multinomial`: with `replacement`, independent draws; without, each class at most once
    /// (then `samples` must not exceed the classes with non-zero weight). Has no derivative.
    pub fn multinomial(&self, samples: usize, replacement: bool, rng: &mut impl Rng) -> Tensor {
        let _profiled = crate::tensor::profile::scope("multinomial");
        assert!(
            self.ndim() >= 1,
            "multinomial: needs at least one axis, got a 0-d tensor"
        );
        let n = self.shape()[self.ndim() - 1];
        let w = self
            .detach()
            .to_dtype(crate::tensor::DType::F64)
            .contiguous()
            .to_vec::<f64>();
        assert!(
            w.iter().all(|v| v.is_finite() && *v >= 0.0),
            "multinomial: weights must be finite and not negative"
        );
        assert!(
            n > 0,
            "multinomial: the distribution is empty (shape {:?}): there is no category to draw",
            self.shape()
        );
        assert!(
            replacement || samples <= n,
            "multinomial: cannot draw {samples} samples from {n} categories without replacement"
        );
        let rows = w.len() / n;
        let mut out = Vec::new();
        let fits = rows
            .checked_mul(samples)
            .is_some_and(|total| out.try_reserve_exact(total).is_ok());
        assert!(
            fits,
            "multinomial: {samples} samples for each of {rows} rows do not fit in memory"
        );
        for r in 0..rows {
            let mut row = w[r * n..(r + 1) * n].to_vec();
            for _ in 0..samples {
                let total: f64 = row.iter().sum();
                assert!(
                    total > 0.0,
                    "multinomial: a row has no weight left to draw from (samples {samples}, replacement {replacement})"
                );
                let mut u = rng.gen::<f64>() * total;
                let mut pick = n - 1;
                for (j, &p) in row.iter().enumerate() {
                    if u < p {
                        pick = j;
                        break;
                    }
                    u -= p;
                }
                // Rounding can leave `u` past the end: the last class with weight is taken.
                if row[pick] == 0.0 {
                    pick = row.iter().rposition(|&p| p > 0.0).unwrap_or(pick);
                }
                out.push(pick as i64);
                if !replacement {
                    row[pick] = 0.0;
                }
            }
        }
        let mut shape = self.shape().to_vec();
        *shape.last_mut().expect("at least one axis") = samples;
        Tensor::from_vec(out, &shape)
    }
}
