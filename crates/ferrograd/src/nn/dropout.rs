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

/// Channel dropout (PyTorch's `nn.Dropout2d`): in training, zeroes whole channels of
/// `[N, C, H, W]` with probability `p` and scales the rest by 1 / (1 − p).
pub struct Dropout2d {
    p: f64,
    stream: RngStream,
}

impl Dropout2d {
    /// Drop probability `p` in [0, 1), with a generator seeded from the default one.
    pub fn new(p: f64) -> Dropout2d {
        assert!(
            (0.0..1.0).contains(&p),
            "Dropout2d: p = {p} must be in [0, 1)"
        );
        Dropout2d {
            p,
            stream: RngStream::new(with_default_rng(|r| r.gen())),
        }
    }
}

impl Module for Dropout2d {
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        vec![("rng".into(), self.stream.clone())]
    }

    fn name(&self) -> String {
        format!("Dropout2d({})", self.p)
    }
}

impl Layer for Dropout2d {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        assert!(
            x.ndim() == 4,
            "{}: expected input [N, C, H, W], got {:?}",
            self.name(),
            x.shape()
        );
        if mode == Mode::Eval || self.p == 0.0 {
            return x.clone();
        }
        let mask_shape = [x.shape()[0], x.shape()[1], 1, 1];
        let mut rng = self.stream.next_rng();
        let keep =
            Tensor::rand_uniform(&mask_shape, 0.0, 1.0, x.dtype(), &mut rng).ge_scalar(self.p);
        x * &keep.mul_scalar(1.0 / (1.0 - self.p))
    }
}
