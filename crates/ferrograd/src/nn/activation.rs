//! Activations as layers (each is also a tensor method: `x.relu()`, ...).

use super::{Layer, Mode, Module};
use crate::tensor::Tensor;

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl $name {
            pub fn new() -> Self {
                $name
            }
        }

        impl Module for $name {
            fn name(&self) -> String {
                stringify!($name).into()
            }
        }

        impl Layer for $name {
            fn forward(&self, $x: &Tensor, _: Mode) -> Tensor {
                $body
            }
        }
    };
}

activation!(
    /// max(x, 0).
    ReLU, |x| x.relu()
);
activation!(
    /// 1 / (1 + e^−x).
    Sigmoid, |x| x.sigmoid()
);
activation!(
    /// tanh x.
    Tanh, |x| x.tanh()
);
activation!(
    /// ln(1 + eˣ), stable for large |x|.
    Softplus, |x| x.softplus()
);
activation!(
    /// x Φ(x), with the exact normal CDF.
    Gelu, |x| x.gelu()
);

/// x for x > 0, `slope · x` otherwise.
#[derive(Clone, Copy, Debug)]
pub struct LeakyReLU {
    pub slope: f64,
}

impl LeakyReLU {
    pub fn new(slope: f64) -> Self {
        LeakyReLU { slope }
    }
}

impl Module for LeakyReLU {
    fn name(&self) -> String {
        format!("LeakyReLU({})", self.slope)
    }
}

impl Layer for LeakyReLU {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        x.leaky_relu(self.slope)
    }
}

/// x for x > 0, `alpha · (eˣ − 1)` otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Elu {
    pub alpha: f64,
}

impl Elu {
    pub fn new(alpha: f64) -> Self {
        Elu { alpha }
    }
}

impl Module for Elu {
    fn name(&self) -> String {
        format!("Elu({})", self.alpha)
    }
}

impl Layer for Elu {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        x.elu(self.alpha)
    }
}

/// Softmax along `axis`.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    pub axis: usize,
}

impl Softmax {
    pub fn new(axis: usize) -> Self {
        Softmax { axis }
    }
}

impl Module for Softmax {
    fn name(&self) -> String {
        format!("Softmax({})", self.axis)
    }
}

impl Layer for Softmax {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        assert!(
            self.axis < x.ndim(),
            "{}: input {:?} has no axis {}",
            self.name(),
            x.shape(),
            self.axis
        );
        x.softmax(self.axis)
    }
}
