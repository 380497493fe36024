//! The core's element-wise primitives as methods of `Tensor` and of the graph's `Node`,
//! generated from the core's table: a primitive added there is a Python method here with no
//! line written. Primitives with constants (`powf`, `clamp`, the scalar arithmetic) take
//! PyTorch's spellings and defaults instead (`pow`, `clamp(min=None, max=None)`, operators),
//! written by hand in `tensor.rs` and `graph.rs`.

use ferrograd::graph::Node;
use ferrograd::prelude::Tensor;
use ferrograd::{Unary, UnaryDomain};
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
