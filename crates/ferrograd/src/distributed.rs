//! Data-parallel training over MPI (feature `mpi`, on the system's Open MPI through the `mpi`
//! crate): every process (rank) holds the whole model, takes its share of each batch
//! ([`crate::data::Batches::shard`]), and averages the gradients with the others before the
//! optimizer steps, as PyTorch's DistributedDataParallel does. Buffers (batch norm's running
//! statistics) are copied from rank 0 once, by [`ProcessGroup::broadcast`]; afterwards each
//! rank keeps its own.
//!
//! ```no_run
//! use ferrograd::distributed::ProcessGroup;
//! use ferrograd::prelude::*;
//!
//! let group = ProcessGroup::init().expect("started once");
//! group.abort_on_panic();                       // a failing rank ends the job
//! manual_seed(0);
//! let net = Net::new(vec![Box::new(Dense::new(4, 2))]);
//! group.broadcast(&net).expect("the same model on every rank"); // rank 0's weights everywhere
//! let x = Tensor::ones(&[8, 4], DType::F32);
//! let loss = Layer::forward(&net, &x, Mode::Train).square().mean();
//! let grads = group.all_reduce_mean(&net.params(), &loss.backward(), 8);
//! Sgd::new(0.1).step(&net.params(), &grads);    // the same step on every rank
//! ```
//!
//! Run with `mpirun -np 2 target/release/examples/mnist_ddp` (as root: `--allow-run-as-root`;
//! more ranks than cores: `--oversubscribe`).

use std::sync::atomic::{AtomicBool, Ordering};

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Equivalence, Root};

use crate::autograd::{Gradients, Param};
use crate::nn::Module;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

mod overlap;

/// Gradients travel in buckets of about this many bytes: one collective call per bucket, not
/// per tensor (a small MLP is one bucket, a large model a few dozen).
pub const BUCKET_BYTES: usize = 4 << 20;

/// This process's place in an MPI job: its rank among the others.
pub struct ProcessGroup {
    // Finalises MPI when dropped.
    _universe: Universe,
    world: SimpleCommunicator,
}

impl ProcessGroup {
    /// Joins the job `mpirun` started (a process started on its own is a job of one rank).
    /// Fails if MPI was initialised already in this process.
    pub fn init() -> Result<ProcessGroup> {
        let universe = mpi::initialize().ok_or_else(|| {
            Error::Distributed("MPI is already initialised in this process".into())
        })?;
        let world = universe.world();
        Ok(ProcessGroup {
            _universe: universe,
            world,
        })
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// How many processes the job has.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// Whether this is rank 0, the one that prints and saves.
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// Waits until every rank has reached this point.
    pub fn barrier(&self) {
        self.world.barrier();
    }

    /// Sums of a few numbers over the ranks (loss totals, sample counts), on every rank.
    pub fn all_reduce_sum<const N: usize>(&self, values: [f64; N]) -> [f64; N] {
        let mut out = [0.0; N];
        self.world
            .all_reduce_into(&values[..], &mut out[..], SystemOperation::sum());
        out
    }

    /// Makes a panic on any rank end the whole job with a failing exit code: the panic's
    /// message is printed with the rank, then `MPI_Abort` stops every process. Without it the
    /// other ranks would wait in their next collective for ever.
    /// Installed once per process (later calls do nothing); a panic after MPI has been
    /// finalised is reported as usual.
    pub fn abort_on_panic(&self) {
        static INSTALLED: AtomicBool = AtomicBool::new(false);
        if INSTALLED.swap(true, Ordering::SeqCst) {
            return;
        }
        let rank = self.rank();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            eprint!("rank {rank}: ");
            previous(info);
            if mpi::environment::is_initialized() && !mpi::environment::is_finalized() {
                eprintln!("rank {rank}: aborting the job");
                SimpleCommunicator::world().abort(1);
            }
        }));
    }

    /// Checks that every rank passed the same `values` (sizes, counts): `Err` naming `what`
    /// and this rank's values otherwise, on every rank alike.
    pub fn agree(&self, what: &str, values: &[f64]) -> Result<()> {
        let (mut lo, mut hi) = (vec![0.0; values.len()], vec![0.0; values.len()]);
        self.world
            .all_reduce_into(values, &mut lo[..], SystemOperation::min());
        self.world
            .all_reduce_into(values, &mut hi[..], SystemOperation::max());
        if lo == hi {
            Ok(())
        } else {
            Err(Error::Distributed(format!(
                "the ranks disagree on {what}: rank {} has {values:?}, the ranks range from \
                 {lo:?} to {hi:?}",
                self.rank()
            )))
        }
    }

    /// Copies rank 0's parameters and buffers into every rank's `module` (an identical start
    /// whatever each rank drew). Fails, on every rank and before anything is sent, when the
    /// ranks' modules differ in the number of parameters or of elements of each dtype.
    pub fn broadcast<M: Module + ?Sized>(&self, module: &M) -> Result<()> {
        let mut all = module.params();
        all.extend(module.buffers());
        let mut sizes = vec![all.len() as f64];
        for dtype in [DType::F32, DType::F64, DType::I64] {
            let of_dtype = all.iter().filter(|(_, p)| p.dtype() == dtype);
            sizes.push(of_dtype.map(|(_, p)| p.tensor().numel() as f64).sum());
        }
        self.agree(
            "the module's parameters and buffers (count, f32, f64, i64 elements)",
            &sizes,
        )?;
        for dtype in [DType::F32, DType::F64, DType::I64] {
            let group: Vec<&Param> = all
                .iter()
                .map(|(_, p)| p)
                .filter(|p| p.dtype() == dtype)
                .collect();
            if group.is_empty() {
                continue;
            }
            let values: Vec<Tensor> = group.iter().map(|p| p.tensor()).collect();
            let received = match dtype {
                DType::F32 => self.broadcast_flat::<f32>(&values),
                DType::F64 => self.broadcast_flat::<f64>(&values),
                DType::I64 => self.broadcast_flat::<i64>(&values),
            };
            for (p, t) in group.iter().zip(received) {
                p.set(&t);
            }
        }
        Ok(())
    }

    /// `values` flattened into one buffer, broadcast from rank 0 in buckets, and cut back.
    fn broadcast_flat<T>(&self, values: &[Tensor]) -> Vec<Tensor>
    where
        T: crate::tensor::Element + Equivalence + Copy,
    {
        let mut flat: Vec<T> = values.iter().flat_map(|t| t.to_vec::<T>()).collect();
        let root = self.world.process_at_rank(0);
        for bucket in flat.chunks_mut(bucket_len::<T>()) {
            root.broadcast_into(bucket);
        }
        unflatten(&flat, values)
    }

    /// The gradient of the whole global batch from each rank's gradient of its `samples`
    /// samples: `Σ samples·gradient / Σ samples` over the ranks (a rank with no samples
    /// contributes nothing), which is the mean over the global batch when each rank's gradient
    /// is the mean over its own samples, shards of unequal size included. Summed in buckets of
    /// [`BUCKET_BYTES`]. A parameter no rank has a gradient for gets none, as in one process.
    /// Every rank must pass the same parameters in the same order (the same model).
    pub fn all_reduce_mean(
        &self,
        params: &[(String, Param)],
        grads: &Gradients,
        samples: usize,
    ) -> Gradients {
        if self.size() == 1 {
            return grads.clone();
        }
        // Fed last parameter first, the order the buckets start in.
        self.reduce_in_buckets(params, samples, &mut |arrive| {
            for (_, p) in params.iter().rev() {
                if let Some(g) = grads.get_param(p) {
                    arrive(p.id(), &g);
                }
            }
        })
    }
}

/// Elements of `T` per bucket.
fn bucket_len<T>() -> usize {
    (BUCKET_BYTES / std::mem::size_of::<T>()).max(1)
}

/// `flat` cut into tensors shaped as `like`, in order.
fn unflatten<T: crate::tensor::Element + Copy>(flat: &[T], like: &[Tensor]) -> Vec<Tensor> {
    let mut at = 0;
    like.iter()
        .map(|t| {
            let n = t.numel();
            let piece = Tensor::from_data(flat[at..at + n].to_vec(), t.shape());
            at += n;
            piece
        })
        .collect()
}
