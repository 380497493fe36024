//! Inverted dropout: in training, zeroes each element with probability `p` and scales the rest
//! by 1 / (1 − p), so evaluation needs no rescaling.

use rand::Rng;

use super::{Layer, Mode, Module, RngStream};
use crate::tensor::{with_default_rng, Tensor};

pub struct Dropout {
    p: f64,
    stream: RngStream,
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
            stream: RngStream::new(seed),
        }
    }
}

impl Module for Dropout {
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        vec![("rng".into(), self.stream.clone())]
    }

    fn name(&self) -> String {
        format!("Dropout({})", self.p)
    }
}

impl Layer for Dropout {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        if mode == Mode::Eval || self.p == 0.0 {
            return x.clone();
        }
        let mut rng = self.stream.next_rng();
        let keep = Tensor::rand_uniform(x.shape(), 0.0, 1.0, x.dtype(), &mut rng).ge_scalar(self.p);
        x * &keep.mul_scalar(1.0 / (1.0 - self.p))
    }
}
