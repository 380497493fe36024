//! Layers that only change the shape.

use super::{Layer, Mode, Module};
use crate::tensor::Tensor;

/// `[N, ...]` to `[N, product of the rest]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flatten;

impl Flatten {
    /// The layer (it has no settings).
    pub fn new() -> Self {
        Flatten
    }
}

impl Module for Flatten {
    fn name(&self) -> String {
        "Flatten".into()
    }
}

impl Layer for Flatten {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        assert!(
            x.ndim() >= 1,
            "Flatten: expected input [N, ...], got a 0-d tensor"
        );
        x.flatten_from(1)
    }
}

/// `[N, ...]` to `[N, shape...]`.
#[derive(Clone, Debug)]
pub struct Reshape {
    shape: Vec<usize>,
}

impl Reshape {
    /// The shape of one sample; the batch axis is kept.
    pub fn new(shape: &[usize]) -> Self {
        Reshape {
            shape: shape.to_vec(),
        }
    }
}

impl Module for Reshape {
    fn name(&self) -> String {
        format!("Reshape({:?})", self.shape)
    }
}

impl Layer for Reshape {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let per_sample = crate::tensor::checked_numel(&self.shape);
        assert!(
            x.ndim() >= 1
                && per_sample.and_then(|n| n.checked_mul(x.shape()[0])) == Some(x.numel()),
            "{}: expected input [N, ...] with {} elements per sample, got {:?}",
            self.name(),
            per_sample.map_or("too many".to_string(), |n| n.to_string()),
            x.shape()
        );
        let mut shape = vec![x.shape()[0]];
        shape.extend(&self.shape);
        x.reshape(&shape)
    }
}
