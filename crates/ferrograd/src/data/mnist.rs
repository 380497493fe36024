//! MNIST and Fashion-MNIST (same IDX layout): 28×28 grey images and labels 0–9.

use std::path::{Path, PathBuf};

use super::{one_hot, read_idx_u8, Dataset, TensorDataset};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// One split of an MNIST-format dataset.
#[derive(Clone)]
pub struct Mnist {
    /// Pixels scaled to [0, 1], `[N, 784]` f32.
    pub images: Tensor,
    /// Labels 0–9.
    pub labels: Vec<u8>,
    /// One-hot labels `[N, 10]` f32.
    pub targets: Tensor,
}

/// The first of `names` that exists in `dir` (plain or `.gz`).
fn find(dir: &Path, names: &[&str]) -> Result<PathBuf> {
    for name in names {
        for candidate in [dir.join(name), dir.join(format!("{name}.gz"))] {
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    // A missing file is an I/O "not found", as opening it would have reported.
    Err(Error::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("none of {names:?} (or .gz) found; run scripts/fetch-data.sh"),
        ),
    })
}

impl Mnist {
    /// Loads the training (`train = true`, 60,000) or test (10,000) split from `dir`, which
    /// holds the four IDX files under their usual names (`train-images-idx3-ubyte`, ...,
    /// `t10k-labels-idx1-ubyte`, plain or .gz).
    pub fn load(dir: &Path, train: bool) -> Result<Mnist> {
        let prefix = if train { "train" } else { "t10k" };
        let images_path = find(
            dir,
            &[
                &format!("{prefix}-images-idx3-ubyte"),
                &format!("{prefix}-images.idx3-ubyte"),
            ],
        )?;
        let labels_path = find(
            dir,
            &[
                &format!("{prefix}-labels-idx1-ubyte"),
                &format!("{prefix}-labels.idx1-ubyte"),
            ],
        )?;
        let images = read_idx_u8(&images_path)?;
        let labels = read_idx_u8(&labels_path)?;
        let bad = |path: &Path, msg: String| Error::Format {
            path: path.to_path_buf(),
            msg,
        };
        if images.dims.len() != 3 || images.dims[1] != 28 || images.dims[2] != 28 {
            return Err(bad(
                &images_path,
                format!(
                    "images have dimensions {:?}, expected [N, 28, 28]",
                    images.dims
                ),
            ));
        }
        if labels.dims.len() != 1 {
            return Err(bad(
                &labels_path,
                format!("labels have dimensions {:?}, expected [N]", labels.dims),
            ));
        }
        if labels.dims[0] != images.dims[0] {
            return Err(bad(
                &labels_path,
                format!(
                    "{} labels for {} images in {}",
                    labels.dims[0],
                    images.dims[0],
                    images_path.display()
                ),
            ));
        }
        if let Some(&l) = labels.data.iter().find(|&&l| l > 9) {
            return Err(bad(
                &labels_path,
                format!("label {l} is not a digit class 0-9"),
            ));
        }
        let n = images.dims[0];
        let pixels: Vec<f32> = images.data.iter().map(|&p| p as f32 / 255.0).collect();
        Ok(Mnist {
            images: Tensor::from_vec(pixels, &[n, 784]),
            targets: one_hot(&labels.data, 10),
            labels: labels.data,
        })
    }

    /// The images as `[N, 1, 28, 28]` (for convolutional networks).
    pub fn images_nchw(&self) -> Tensor {
        self.images.reshape(&[self.labels.len(), 1, 28, 28])
    }

    /// Images and one-hot targets as a dataset.
    pub fn dataset(&self) -> TensorDataset {
        TensorDataset::new(self.images.clone(), self.targets.clone())
    }
}

impl Dataset for Mnist {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn get(&self, indices: &[usize]) -> (Tensor, Tensor) {
        (
            self.images.index_select(0, indices),
            self.targets.index_select(0, indices),
        )
    }
}
