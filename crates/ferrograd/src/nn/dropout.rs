//! Inverted dropout: in training, zeroes each element (or each whole channel) with probability
//! `p` and scales the rest by 1 / (1 − p), so evaluation needs no rescaling.

use rand::Rng;

use super::{expect_input, Layer, Mode, Module, RngStream};
use crate::tensor::{with_default_rng, Tensor};

/// Dropout of single elements (`CHANNELS = false`, PyTorch's `nn.Dropout`) or of whole
/// channels of `[N, C, H, W]` (`CHANNELS = true`, `nn.Dropout2d`). Use it through the aliases
/// [`Dropout`] and [`Dropout2d`].
///
/// ```
/// use ferrograd::prelude::*;
///
/// let drop = Dropout::with_seed(0.5, 7);
/// let x = Tensor::ones(&[4, 10], DType::F32);
/// assert_eq!(Layer::forward(&drop, &x, Mode::Eval).to_vec::<f32>(), x.to_vec::<f32>());
/// let y = Layer::forward(&drop, &x, Mode::Train);
/// assert_eq!(y.shape(), &[4, 10]);
/// // Each element is dropped (0) or kept and scaled by 1 / (1 − p) = 2.
/// assert!(y.to_vec::<f32>().iter().all(|&v| v == 0.0 || v == 2.0));
/// ```
pub struct DropoutOf<const CHANNELS: bool> {
    p: f64,
    stream: RngStream,
}

/// Element-wise dropout.
pub type Dropout = DropoutOf<false>;
/// Channel dropout over `[N, C, H, W]`.
pub type Dropout2d = DropoutOf<true>;

impl<const CHANNELS: bool> DropoutOf<CHANNELS> {
    const NAME: &'static str = if CHANNELS { "Dropout2d" } else { "Dropout" };

    /// Drop probability `p` in [0, 1), with a generator seeded from the default one (and
    /// started again by each `manual_seed`).
    pub fn new(p: f64) -> Self {
        let seed = with_default_rng(|r| r.gen());
        Self::with_stream(p, RngStream::from_default_generator(seed))
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// A key for a pattern drawn elsewhere (attention's fused dropout), taken from this
    /// layer's stream as a mask would be.
    pub(crate) fn next_key(&self) -> u64 {
        self.stream.next_rng().gen()
    }

    /// Drop probability `p` in [0, 1), with a generator of its own seeded by `seed`.
    pub fn with_seed(p: f64, seed: u64) -> Self {
        Self::with_stream(p, RngStream::new(seed))
    }

    fn with_stream(p: f64, stream: RngStream) -> Self {
        assert!(
            (0.0..1.0).contains(&p),
            "{}: p = {p} must be in [0, 1)",
            Self::NAME
        );
        DropoutOf { p, stream }
    }
}

impl<const CHANNELS: bool> Module for DropoutOf<CHANNELS> {
    fn rng_streams(&self) -> Vec<(String, RngStream)> {
        vec![("rng".into(), self.stream.clone())]
    }

    fn name(&self) -> String {
        format!("{}({})", Self::NAME, self.p)
    }
}

impl<const CHANNELS: bool> Layer for DropoutOf<CHANNELS> {
    fn forward(&self, x: &Tensor, mode: Mode) -> Tensor {
        expect_input(&self.name(), !CHANNELS || x.ndim() == 4, "[N, C, H, W]", x);
        if mode == Mode::Eval || self.p == 0.0 {
            return x.clone();
        }
        let mask_shape = if CHANNELS {
            vec![x.shape()[0], x.shape()[1], 1, 1]
        } else {
            x.shape().to_vec()
        };
        let mut rng = self.stream.next_rng();
        let keep =
            Tensor::rand_uniform(&mask_shape, 0.0, 1.0, x.dtype(), &mut rng).ge_scalar(self.p);
        x * &keep.mul_scalar(1.0 / (1.0 - self.p))
    }
}
