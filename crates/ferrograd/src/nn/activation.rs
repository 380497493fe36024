//! Activations as layers (each is also a tensor method: `x.relu()`, ...).

use super::{Layer, Mode, Module};
use crate::tensor::Tensor;

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr) => {
        unit_struct!($(#[$doc])* $name);

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
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0], &[3]);
    /// let y = Layer::forward(&Relu::new(), &x, Mode::Eval);
    /// assert_eq!(y.to_vec::<f32>(), vec![0.0, 0.0, 2.0]);
    /// ```
    Relu, |x| x.relu()
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
activation!(
    /// GELU with Φ approximated through tanh (PyTorch's `GELU(approximate="tanh")`, GPT-2's).
    GeluTanh, |x| x.gelu_tanh()
);
activation!(
    /// x · sigmoid(x) (SiLU, also called swish).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::from_vec(vec![0.0f32, 2.0], &[2]);
    /// let y = Layer::forward(&Silu::new(), &x, Mode::Eval).to_vec::<f32>();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6);
    /// ```
    Silu, |x| x * &x.sigmoid()
);
activation!(
    /// The input itself (PyTorch's `Identity`, a placeholder in a sequence of layers).
    Identity, |x| x.clone()
);

/// An activation with one parameter, shown in its name (`LeakyRelu(0.01)`).
macro_rules! activation_with {
    ($(#[$doc:meta])* $name:ident($field:ident), |$x:ident, $p:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $field: f64,
        }

        impl $name {
            #[doc = concat!("The activation with the given `", stringify!($field), "`; panics \
                unless it is finite.")]
            pub fn new($field: f64) -> Self {
                assert!(
                    $field.is_finite(),
                    concat!(stringify!($name), ": ", stringify!($field), " {} must be finite"),
                    $field
                );
                $name { $field }
            }

            #[doc = concat!("The `", stringify!($field), "` in the type's formula.")]
            pub fn $field(&self) -> f64 {
                self.$field
            }
        }

        impl Module for $name {
            fn name(&self) -> String {
                format!(concat!(stringify!($name), "({})"), self.$field)
            }
        }

        impl Layer for $name {
            fn forward(&self, $x: &Tensor, _: Mode) -> Tensor {
                let $p = self.$field;
                $body
            }
        }
    };
}

activation_with!(
    /// x for x > 0, `slope · x` otherwise.
    LeakyRelu(slope), |x, slope| x.leaky_relu(slope)
);
activation_with!(
    /// x for x > 0, `alpha · (eˣ − 1)` otherwise.
    Elu(alpha), |x, alpha| x.elu(alpha)
);

/// Softmax along `axis`.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    /// The axis whose entries sum to 1; `forward` panics when the input has no such axis.
    pub axis: usize,
}

impl Softmax {
    /// Softmax along `axis` (1 for the classes of an `[N, C]` batch).
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
