//! Random ops. Sampling has no derivative.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::tensor::{no_grad, record_nondiff, Tensor};

impl Tensor {
    /// The entries along axis 0 in a random order drawn from `rng`. Has no derivative: wrap it
    /// in `stop_gradient` (or `detach`) where a gradient could reach it.
    pub fn shuffle(&self, rng: &mut impl Rng) -> Tensor {
        assert!(
            self.ndim() > 0,
            "shuffle: needs at least one axis, shape is []"
        );
        let mut perm: Vec<usize> = (0..self.shape()[0]).collect();
        perm.shuffle(rng);
        let out = no_grad(|| self.detach().index_select(0, &perm));
        record_nondiff("shuffle", out, &[self])
    }
}
