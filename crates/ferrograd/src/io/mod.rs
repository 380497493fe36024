//! Files: named tensors in safetensors files (`tensors`, which layers load PyTorch weights
//! through) and training checkpoints of a whole `Model` (`checkpoint`, above the model).

mod checkpoint;
pub(crate) mod tensors;

pub use checkpoint::{load_checkpoint, save_checkpoint, Checkpoint};
pub use tensors::{
    load_file_tensors, load_tensors, load_tensors_from, save_tensors, write_atomic, FileTensor,
};
