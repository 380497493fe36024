//! Datasets: the IDX reader, MNIST-format datasets and a shuffling batch iterator.

mod batch;
mod idx;
mod mnist;

pub use batch::{Batch, BatchIterator};
pub use idx::{encode_idx_u8, parse_idx_u8, read_idx_u8, IdxU8};
pub use mnist::Mnist;

use crate::tensor::Tensor;

/// A set of (input, target) samples held as two tensors whose axis 0 is the sample.
pub trait Dataset {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Inputs and targets of the samples `indices`, stacked along axis 0.
    fn get(&self, indices: &[usize]) -> (Tensor, Tensor);
}

/// Inputs and targets in memory.
#[derive(Clone)]
pub struct TensorDataset {
    pub inputs: Tensor,
    pub targets: Tensor,
}

impl TensorDataset {
    pub fn new(inputs: Tensor, targets: Tensor) -> TensorDataset {
        assert_eq!(
            inputs.shape()[0],
            targets.shape()[0],
            "TensorDataset: {} inputs but {} targets",
            inputs.shape()[0],
            targets.shape()[0]
        );
        TensorDataset { inputs, targets }
    }
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.inputs.shape()[0]
    }

    fn get(&self, indices: &[usize]) -> (Tensor, Tensor) {
        (
            self.inputs.index_select(0, indices),
            self.targets.index_select(0, indices),
        )
    }
}

/// One-hot rows `[labels.len(), classes]` in f32.
pub fn one_hot(labels: &[u8], classes: usize) -> Tensor {
    let mut data = vec![0.0f32; labels.len() * classes];
    for (i, &l) in labels.iter().enumerate() {
        assert!(
            (l as usize) < classes,
            "one_hot: label {l} is not below {classes} classes"
        );
        data[i * classes + l as usize] = 1.0;
    }
    Tensor::from_vec(data, &[labels.len(), classes])
}
