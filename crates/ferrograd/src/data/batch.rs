//! Mini-batches over a dataset: a seeded shuffle per epoch, each batch gathered on its own
//! (the dataset is never copied whole).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::Dataset;
use crate::tensor::Tensor;

/// The order in which a shuffled epoch visits `len` samples: a permutation fixed by `seed` and
/// `epoch` alone (the one [`BatchIterator::epoch`] uses), so that another front end (the
/// Python package) can batch its own arrays in the same order.
pub fn epoch_order(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    // The generator's 32-byte key holds the seed and the epoch side by side, so two different
    // (seed, epoch) pairs can never share a stream.
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..].copy_from_slice(b"ferrograd:batch.");
    let mut order = crate::tensor::filled("epoch_order", len, 0usize);
    order.iter_mut().enumerate().for_each(|(i, o)| *o = i);
    order.shuffle(&mut StdRng::from_seed(key));
    order
}

/// One batch: inputs, targets and the sample indices they came from.
pub struct Batch {
    /// The samples' inputs, stacked along axis 0.
    pub inputs: Tensor,
    /// The samples' targets, stacked along axis 0.
    pub targets: Tensor,
    /// The samples' indices in the dataset, in the batch's order.
    pub indices: Vec<usize>,
}

/// How to cut a dataset into batches, epoch after epoch: a builder with the options named
/// (`Batches::new(&data, 64).shuffle(seed).drop_last(true)`), whose [`Batches::epoch`] gives
/// that epoch's [`BatchIterator`].
pub struct Batches<'a, D: Dataset> {
    data: &'a D,
    batch_size: usize,
    seed: Option<u64>,
    drop_last: bool,
    shard: Shard,
}

/// One process's share of every batch in data-parallel training: of each global batch of
/// `batch_size × ranks` samples (one shuffle, the same on every rank), rank `rank` takes the
/// `rank`-th of `ranks` near-equal slices, so that the ranks see every sample once per epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This process's index, `0..ranks`.
    pub rank: usize,
    /// How many processes share the batches.
    pub ranks: usize,
}

impl Shard {
    /// The whole of every batch: a single process.
    pub const WHOLE: Shard = Shard { rank: 0, ranks: 1 };

    /// This shard's part of a global batch of `len` samples.
    fn slice(&self, len: usize) -> std::ops::Range<usize> {
        len * self.rank / self.ranks..len * (self.rank + 1) / self.ranks
    }
}

impl<'a, D: Dataset> Batches<'a, D> {
    /// Batches of `batch_size` in the data's order, the last one possibly smaller.
    pub fn new(data: &'a D, batch_size: usize) -> Self {
        assert!(batch_size > 0, "Batches: batch size must be positive");
        Batches {
            data,
            batch_size,
            seed: None,
            drop_last: false,
            shard: Shard::WHOLE,
        }
    }

    /// Only rank `rank`'s share of each batch of `batch_size × ranks` samples (see
    /// [`Shard`]): with the same seed on every rank, the ranks together see each sample once
    /// per epoch, `batch_size` at a time each.
    pub fn shard(mut self, rank: usize, ranks: usize) -> Self {
        assert!(
            rank < ranks,
            "Batches: rank {rank} is not one of {ranks} ranks"
        );
        self.shard = Shard { rank, ranks };
        self
    }

    /// A new order every epoch, drawn from `seed` and the epoch number.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Whether a last batch smaller than the others is left out.
    pub fn drop_last(mut self, drop: bool) -> Self {
        self.drop_last = drop;
        self
    }

    /// The batches of epoch `epoch`.
    pub fn epoch(&self, epoch: u64) -> BatchIterator<'a, D> {
        let mut it = BatchIterator::epoch(
            self.data,
            self.batch_size.saturating_mul(self.shard.ranks),
            self.seed.is_some(),
            self.seed.unwrap_or(0),
            epoch,
            self.drop_last,
        );
        it.shard = self.shard;
        it
    }
}

/// Yields the batches of one epoch. Create one per epoch with [`BatchIterator::epoch`]: the
/// order depends only on the seed and the epoch number.
pub struct BatchIterator<'a, D: Dataset> {
    data: &'a D,
    order: Vec<usize>,
    /// The global batch size (all shards together).
    batch_size: usize,
    drop_last: bool,
    pos: usize,
    shard: Shard,
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
        let order = if shuffle {
            epoch_order(data.len(), seed, epoch)
        } else {
            (0..data.len()).collect()
        };
        BatchIterator {
            data,
            order,
            batch_size,
            drop_last,
            pos: 0,
            shard: Shard::WHOLE,
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
        let global = &self.order[self.pos..end];
        let indices = global[self.shard.slice(global.len())].to_vec();
        self.pos = end;
        let (inputs, targets) = self.data.get(&indices);
        Some(Batch {
            inputs,
            targets,
            indices,
        })
    }
}
