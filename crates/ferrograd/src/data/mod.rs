//! Datasets: the IDX reader, MNIST-format datasets and a shuffling batch iterator.

mod batch;
mod idx;
mod mnist;

pub use batch::{epoch_order, Batch, BatchIterator, Batches, Shard};
pub use idx::{encode_idx_u8, parse_idx_u8, read_idx_u8, IdxU8};
pub use mnist::Mnist;

use crate::tensor::Tensor;

/// A set of (input, target) samples held as two tensors whose axis 0 is the sample.
pub trait Dataset {
    /// Number of samples.
    fn len(&self) -> usize;
    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Inputs and targets of the samples `indices`, stacked along axis 0.
    fn get(&self, indices: &[usize]) -> (Tensor, Tensor);
}

/// Inputs and targets in memory.
#[derive(Clone)]
pub struct TensorDataset {
    /// The inputs, one sample per index of axis 0.
    pub inputs: Tensor,
    /// The targets, one sample per index of axis 0.
    pub targets: Tensor,
}

impl TensorDataset {
    /// The samples of `inputs` and `targets`; panics unless both have the same length along
    /// axis 0.
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

/// A class label: any integer type (`u8` as IDX files store them, `usize` for many classes,
/// plain literals); a negative one has no class.
pub trait ClassLabel: Copy + std::fmt::Display {
    /// The class index, or `None` for a negative label (or one past `usize`).
    fn class(self) -> Option<usize>;
}

macro_rules! class_labels {
    ($($t:ty),*) => {
        $(impl ClassLabel for $t {
            fn class(self) -> Option<usize> {
                usize::try_from(self).ok()
            }
        })*
    };
}
class_labels!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// One-hot rows `[labels.len(), classes]` in f32.
pub fn one_hot<L: ClassLabel>(labels: &[L], classes: usize) -> Tensor {
    let mut data = vec![0.0f32; labels.len() * classes];
    for (i, &l) in labels.iter().enumerate() {
        let class = l.class().filter(|&c| c < classes);
        let c =
            class.unwrap_or_else(|| panic!("one_hot: label {l} is not a class of 0..{classes}"));
        data[i * classes + c] = 1.0;
    }
    Tensor::from_vec(data, &[labels.len(), classes])
}
