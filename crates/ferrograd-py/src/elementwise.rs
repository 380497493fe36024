//! The core's element-wise primitives as methods of `Tensor` and of the graph's `Node`,
//! generated from the core's tables: a primitive added there is a Python method here with no
//! line written. Primitives with constants (`powf`, `clamp`, the scalar arithmetic) take
//! PyTorch's spellings and defaults instead (`pow`, `clamp(min=None, max=None)`, operators),
//! written by hand in `tensor.rs` and `graph.rs`; so do the `Tensor` methods of two operands,
//! which take Python numbers and integer tensors as PyTorch's do.

use ferrograd::graph::Node;
use ferrograd::prelude::Tensor;
use ferrograd::{Binary, Unary, UnaryDomain};
use pyo3::prelude::*;

use crate::graph::PyNode;
use crate::tensor::PyTensor;

/// One entry of the table: a method on each class for a primitive without constants.
/// `gelu` takes PyTorch's `approximate` argument: written by hand in `tensor.rs` and
/// `graph.rs`.
macro_rules! python_method {
    ($(#[$doc:meta])* gelu) => {};
    ($(#[$doc:meta])* $name:ident) => {
        #[pymethods]
        impl PyTensor {
            $(#[$doc])*
            fn $name(&self, py: Python<'_>) -> PyResult<PyTensor> {
                self.map_unary(py, Tensor::$name, stringify!($name))
            }
        }

        #[pymethods]
        impl PyNode {
            $(#[$doc])*
            fn $name(&self) -> PyResult<PyNode> {
                self.unary(Node::$name)
            }
        }
    };
    ($(#[$doc:meta])* $name:ident ($($arg:ident: $ty:ty),+)) => {};
}

macro_rules! python_methods {
    ($(
        $(#[$doc:meta])*
        $name:ident $Variant:ident $(($($arg:ident: $ty:ty),+))? { $($entry:tt)* }
    )*) => {
        $(python_method!($(#[$doc])* $name $(($($arg: $ty),+))?);)*
    };
}

ferrograd::elementwise_primitives!(python_methods);

/// One `Node` method per primitive of two tensors (`maximum`, `lt`, ...; the arithmetic also
/// as operators), taking another node or a Python number, as PyTorch's `torch.maximum` takes
/// a tensor and `torch.lt` a number too.
macro_rules! python_binary_methods {
    ($(
        $(#[$doc:meta])*
        $name:ident $Variant:ident { $($entry:tt)* }
    )*) => {
        #[pymethods]
        impl PyNode {
            $(
                $(#[$doc])*
                fn $name(&self, other: &Bound<'_, PyAny>) -> PyResult<PyNode> {
                    let other = self.operand_node(other)?;
                    self.unary(|a| a.$name(&other))
                }
            )*
        }
    };
}

ferrograd::binary_primitives!(python_binary_methods);

/// Every element-wise primitive of two tensors as `(name, differentiable, divisor's domain is
/// away from zero)`: what the Python tests walk.
#[pyfunction]
pub fn binary_primitives() -> Vec<(&'static str, bool, bool)> {
    Binary::examples()
        .into_iter()
        .map(|op| {
            let nonzero = op.smooth_on().1 == UnaryDomain::NonZero;
            (op.name(), op.is_differentiable(), nonzero)
        })
        .collect()
}

/// Every element-wise primitive as `(name, example constants, domain)`: what the Python tests
/// walk to check that each has its methods and functions and agrees with numpy.
#[pyfunction]
pub fn elementwise_primitives() -> Vec<(&'static str, Vec<f64>, &'static str)> {
    Unary::examples()
        .into_iter()
        .map(|op| {
            let domain = match op.smooth_on() {
                UnaryDomain::Real => "real",
                UnaryDomain::Positive => "positive",
                UnaryDomain::NonZero => "nonzero",
            };
            (op.name(), op.constants(), domain)
        })
        .collect()
}
