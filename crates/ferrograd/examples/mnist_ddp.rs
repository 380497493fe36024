//! The seed's MNIST MLP (or, with `--cnn`, the CNN of `mnist_cnn`) trained data-parallel over
//! MPI: every rank holds the network, takes
//! its share of each batch and averages the gradients with the others before Adam steps, so
//! `N` ranks × batch `B` train as one process with batch `N·B`. Rank 0 prints the seed's
//! per-epoch lines and writes the checkpoints; a run resumes on any number of ranks (every
//! rank reads the checkpoint, so it must be readable by all of them, on a shared file system
//! across machines; the global batch is then the new rank count × `B`).
//!
//! `scripts/setup-mpi.sh && cargo build --release --features mpi --example mnist_ddp`, then
//! `mpirun --allow-run-as-root --oversubscribe -np 2 target/release/examples/mnist_ddp`
//! (`--allow-run-as-root` only as root; `--oversubscribe` when ranks outnumber cores).
//!
//! `--check-steps K` runs the job's correctness check instead of training: the broadcast leaves
//! every rank with rank 0's parameters, and after K steps the
//! parameters of `N` ranks × batch `B` equal those of one process with batch `N·B` (which
//! every rank also trains, alone). `--fail-rank R` makes rank R panic after its first step,
//! in training as in the check (the job must end with that rank's message and a failing exit
//! code).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ferrograd::data::{Batch, Batches, Mnist, TensorDataset};
use ferrograd::distributed::ProcessGroup;
use ferrograd::io::{load_checkpoint, save_checkpoint};
use ferrograd::metrics::accuracy;
use ferrograd::prelude::*;

mod common;

#[derive(Parser)]
#[command(about = "The seed's MNIST MLP or a small CNN, data-parallel over MPI")]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 2)]
    epochs: u64,
    /// Per-rank flags: --batch-size is each rank's share of a step.
    #[command(flatten)]
    training: common::Training,
    /// The CNN of `mnist_cnn` instead of the seed's MLP.
    #[arg(long)]
    cnn: bool,
    /// Save a checkpoint here after every epoch (rank 0).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Resume from a checkpoint written by --save (read by every rank).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Check K steps against one process with the whole batch, instead of training.
    #[arg(long)]
    check_steps: Option<usize>,
    /// Make this rank panic after its first step, in training or in the check (to see that
    /// the whole job ends).
    #[arg(long)]
    fail_rank: Option<usize>,
    /// Overlap the all-reduce with backward: each bucket of gradients is summed over the
    /// ranks while backward computes the next (ProcessGroup::backward_all_reduce_mean).
    #[arg(long)]
    overlap: bool,
}

/// One data-parallel step's loss (this rank's mean) and averaged gradients, with the
/// all-reduce after backward or overlapped with it.
fn ddp_step(
    group: &ProcessGroup,
    model: &Model,
    params: &[(String, Param)],
    batch: &Batch,
    overlap: bool,
) -> (f32, Gradients) {
    let samples = batch.indices.len();
    // The last global batch may leave a rank fewer samples than the others, or none: it still
    // joins the all-reduce, weighted by what it has.
    let loss = (samples > 0).then(|| model.loss(&model.forward(&batch.inputs), &batch.targets));
    let value = loss.as_ref().map_or(0.0, |l| l.item() as f32);
    let grads = if overlap {
        group.backward_all_reduce_mean(loss.as_ref(), params, samples)
    } else {
        let local = loss.as_ref().map(Tensor::backward).unwrap_or_default();
        group.all_reduce_mean(params, &local, samples)
    };
    (value, grads)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let group = match ProcessGroup::init() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    group.abort_on_panic();
    if let Some(r) = args.fail_rank.filter(|&r| r >= group.size()) {
        // Refused up front, on every rank: a rank that does not exist would never fail.
        panic!(
            "--fail-rank {r}: the job has ranks 0 to {}",
            group.size() - 1
        );
    }
    let result = match args.check_steps {
        Some(steps) => check(&group, &args, steps),
        None => train(&group, &args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One rank's error ends every rank, as a panic does.
            panic!("{e}");
        }
    }
}

/// The network the flags ask for.
fn build(args: &Args) -> fn(f64) -> Model {
    if args.cnn {
        common::small_cnn
    } else {
        common::seed_mlp
    }
}

fn load(t: &common::Training) -> Result<(Mnist, Mnist), String> {
    let load = |train| {
        Mnist::load(&t.data, train)
            .map_err(|e| format!("{e}\n(fetch the data with: scripts/fetch-data.sh)"))
    };
    Ok((load(true)?, load(false)?))
}

fn train(group: &ProcessGroup, args: &Args) -> Result<(), String> {
    let t = &args.training;
    let (train, test) = load(t)?;
    let data = TensorDataset::new(train.images.clone(), train.targets.clone());
    manual_seed(t.seed);
    let mut model = build(args)(t.lr);
    let mut first_epoch = 0;
    if let Some(path) = &args.resume {
        let ck = load_checkpoint(path).map_err(|e| e.to_string())?;
        ck.restore(&mut model).map_err(|e| e.to_string())?;
        first_epoch = ck.epoch;
    }
    group.broadcast(model.net()).map_err(|e| e.to_string())?;
    if group.is_root() {
        println!(
            "ranks: {} × batch {} (one step: {} images), from epoch {first_epoch}",
            group.size(),
            t.batch_size,
            group.size() * t.batch_size
        );
    }
    let params = model.net().params();
    for epoch in first_epoch..args.epochs {
        let start = Instant::now();
        let batches = Batches::new(&data, t.batch_size)
            .shuffle(t.seed)
            .shard(group.rank(), group.size());
        let (mut loss_sum, mut seen) = (0.0f64, 0usize);
        for batch in batches.epoch(epoch) {
            let samples = batch.indices.len();
            let (loss, grads) = ddp_step(group, &model, &params, &batch, args.overlap);
            model.apply_grads(&grads);
            fail_if_asked(args, group, seen > 0 || epoch > first_epoch);
            loss_sum += loss as f64 * samples as f64;
            seen += samples;
        }
        let secs = start.elapsed().as_secs_f64();
        let [loss_sum, seen] = group.all_reduce_sum([loss_sum, seen as f64]);
        if group.is_root() {
            let scores = common::predict_in_batches(&model, &test.images, 1000);
            let acc = accuracy(&scores, &test.labels);
            println!(
                "Epoch {epoch} {acc}  loss {:.4}  {secs:.2} s",
                loss_sum / seen
            );
            if let Some(path) = &args.save {
                save_checkpoint(path, &model, epoch + 1).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// Panics on the rank `--fail-rank` names, after its first step (`past_first` is false there).
fn fail_if_asked(args: &Args, group: &ProcessGroup, past_first: bool) {
    if args.fail_rank == Some(group.rank()) && !past_first {
        panic!("failing on purpose after the first step (--fail-rank)");
    }
}

/// How far apart the two may drift (absolute, per parameter): the ranks' average of two
/// half-batch means rounds differently from one mean over the whole batch, and Adam divides
/// by the gradients' own scale; after 20 steps the largest difference is about 1e-6.
const TOLERANCE: f64 = 1e-5;

/// K steps of every rank with its share against one process with the whole batch.
fn check(group: &ProcessGroup, args: &Args, steps: usize) -> Result<(), String> {
    let t = &args.training;
    let (train, _) = load(t)?;
    let data = TensorDataset::new(train.images.clone(), train.targets.clone());
    // Each rank draws its own start; the broadcast makes rank 0's everyone's.
    manual_seed(t.seed + group.rank() as u64);
    let mut model = build(args)(t.lr);
    group.broadcast(model.net()).map_err(|e| e.to_string())?;
    // Every rank now holds rank 0's parameters: the same fingerprint everywhere.
    let fingerprint: f64 = model
        .net()
        .params()
        .iter()
        .flat_map(|(_, p)| p.tensor().to_vec::<f64>())
        .enumerate()
        .map(|(i, v)| v * (1.0 + (i % 7) as f64))
        .sum();
    group
        .agree("the parameters after the broadcast", &[fingerprint])
        .map_err(|e| e.to_string())?;
    let mut alone = build(args)(t.lr);
    alone
        .net()
        .copy_from(model.net())
        .map_err(|e| e.to_string())?;
    let params = model.net().params();
    let shards = Batches::new(&data, t.batch_size)
        .shuffle(t.seed)
        .shard(group.rank(), group.size());
    let whole = Batches::new(&data, t.batch_size * group.size()).shuffle(t.seed);
    for (step, (part, all)) in shards.epoch(0).zip(whole.epoch(0)).take(steps).enumerate() {
        let (_, grads) = ddp_step(group, &model, &params, &part, args.overlap);
        model.apply_grads(&grads);
        alone.train_step(&all.inputs, &all.targets);
        fail_if_asked(args, group, step > 0);
    }
    let mut worst = 0.0f64;
    for ((name, a), (_, b)) in params.iter().zip(alone.net().params()) {
        let (a, b) = (a.tensor().to_vec::<f64>(), b.tensor().to_vec::<f64>());
        let diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        if diff > TOLERANCE {
            return Err(format!("rank {}: {name} differs by {diff:e}", group.rank()));
        }
        worst = worst.max(diff);
    }
    // What one step sends, and what it costs: one all-reduce of the gradients alone, and a
    // whole backward with its all-reduce, after it or overlapped with it.
    let (x, y) = (
        train.images.narrow(0, 0, 64),
        train.targets.narrow(0, 0, 64),
    );
    let grads = model.backward(&model.forward(&x), &y).1;
    let timed = |f: &dyn Fn()| {
        group.barrier();
        let start = Instant::now();
        for _ in 0..50 {
            f();
        }
        start.elapsed().as_secs_f64() / 50.0 * 1e3
    };
    let reduce = timed(&|| drop(group.all_reduce_mean(&params, &grads, 64)));
    let after = timed(&|| {
        let local = model.loss(&model.forward(&x), &y).backward();
        drop(group.all_reduce_mean(&params, &local, 64));
    });
    let overlapped = timed(&|| {
        let loss = model.loss(&model.forward(&x), &y);
        drop(group.backward_all_reduce_mean(Some(&loss), &params, 64));
    });
    if group.is_root() {
        let floats: usize = params.iter().map(|(_, p)| p.tensor().numel()).sum();
        println!(
            "all-reduce of the gradients: {floats} f32 ({:.2} MB) per step, {reduce:.3} ms per \
             call; forward, backward and all-reduce: {after:.3} ms one after the other, \
             {overlapped:.3} ms overlapped",
            floats as f64 * 4.0 / 1e6,
        );
    }
    println!(
        "rank {} of {}: the broadcast made every rank rank 0's copy; after {steps} steps of batch \
         {} the parameters equal one process's with batch {} (largest difference {worst:.1e})",
        group.rank(),
        group.size(),
        t.batch_size,
        t.batch_size * group.size()
    );
    Ok(())
}
