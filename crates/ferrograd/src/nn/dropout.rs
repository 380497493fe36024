//! Inverted dropout: in training, zeroes each element with probability `p` and scales the rest
//! by 1 / (1 − p), so evaluation needs no rescaling.

use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Layer, Mode};
use crate::tensor::{with_default_rng, Tensor};

pub struct Dropout {
    p: f64,
    rng: Mutex<StdRng>,
}

impl Dropout {
    /// Drop probability `p` in [0, 1), with a generator seeded from the default one.
    pub fn new(p: f64) -> Dropout {
        let seed = with_default_rng(|r| r.gen());
        Dropout::with_seed(p, seed)
    }

    pub fn with_seed(p: f64, seed: u64) -> Dropout {
        assert!(
            (0.0..1.0).contains(&p),
            "Dropout: p = {p} must be in [0, 1)"
        );
        Dropout {
            p,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }
}

impl Layer for Dropout {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        if mode == Mode::Eval || self.p == 0.0 {
            return x.clone();
        }
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let keep =
            Tensor::rand_uniform(x.shape(), 0.0, 1.0, x.dtype(), &mut *rng).ge_scalar(self.p);
        x * &keep.mul_scalar(1.0 / (1.0 - self.p))
    }

    fn name(&self) -> String {
        format!("Dropout({})", self.p)
    }
}
