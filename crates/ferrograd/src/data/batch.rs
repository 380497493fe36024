//! Mini-batches over a dataset: a seeded shuffle per epoch, each batch gathered on its own
//! (the dataset is never copied whole).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::Dataset;
use crate::tensor::Tensor;

/// One batch: inputs, targets and the sample indices they came from.
pub struct Batch {
    pub inputs: Tensor,
    pub targets: Tensor,
    pub indices: Vec<usize>,
}

/// Yields the batches of one epoch. Create one per epoch with [`BatchIterator::epoch`]: the
/// order depends only on the seed and the epoch number.
pub struct BatchIterator<'a, D: Dataset> {
    data: &'a D,
    order: Vec<usize>,
    batch_size: usize,
    drop_last: bool,
    pos: usize,
}

impl<'a, D: Dataset> BatchIterator<'a, D> {
    /// Batches of epoch `epoch`, shuffled with `seed` (or in order when `shuffle` is false).
    pub fn epoch(
        data: &'a D,
        batch_size: usize,
        shuffle: bool,
        seed: u64,
        epoch: u64,
        drop_last: bool,
    ) -> Self {
        assert!(batch_size > 0, "BatchIterator: batch size must be positive");
        let mut order: Vec<usize> = (0..data.len()).collect();
        if shuffle {
            // The generator's 32-byte key holds the seed and the epoch side by side, so two
            // different (seed, epoch) pairs can never share a stream.
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&seed.to_le_bytes());
            key[8..16].copy_from_slice(&epoch.to_le_bytes());
            key[16..].copy_from_slice(b"ferrograd:batch.");
            let mut rng = StdRng::from_seed(key);
            order.shuffle(&mut rng);
        }
        BatchIterator {
            data,
            order,
            batch_size,
            drop_last,
            pos: 0,
        }
    }

    /// Number of batches this epoch yields.
    pub fn batches(&self) -> usize {
        let n = self.order.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }
}

impl<D: Dataset> Iterator for BatchIterator<'_, D> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        let left = self.order.len() - self.pos;
        if left == 0 || (self.drop_last && left < self.batch_size) {
            return None;
        }
        let end = self.pos + left.min(self.batch_size);
        let indices = self.order[self.pos..end].to_vec();
        self.pos = end;
        let (inputs, targets) = self.data.get(&indices);
        Some(Batch {
            inputs,
            targets,
            indices,
        })
    }
}
