//! The MNIST training job shared by `mnist` (the seed's MLP) and `mnist_cnn`: flags, data,
//! a progress bar, the seed's per-epoch lines, checkpoints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::common::{peak_rss_mib, predict_in_batches};
use ferrograd::data::{BatchIterator, Mnist};
use ferrograd::io::{load_checkpoint, save_checkpoint};
use ferrograd::metrics::accuracy;
use ferrograd::prelude::*;
use indicatif::{ProgressBar, ProgressStyle};

// The flags every MNIST job takes; the default epoch count is the example's.
#[derive(clap::Parser)]
#[command(
    about = "Trains a classifier on MNIST (or Fashion-MNIST) and prints the seed's \
                   per-epoch lines"
)]
struct Args {
    /// Passes over the training set (default: the example's).
    #[arg(long)]
    epochs: Option<u64>,
    #[command(flatten)]
    training: crate::common::Training,
    /// Threads of the pool the kernels run on (default: one per core).
    #[arg(long, value_parser = crate::common::count)]
    threads: Option<usize>,
    /// Save a checkpoint to this file after every epoch.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Resume from a checkpoint written by --save.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Train with compiled steps (`Model::compile`): the same losses and accuracy.
    #[arg(long)]
    compile: bool,
    /// Write the trained network as an ONNX model to this file (feature `onnx`), for any ONNX
    /// runtime (`crates/ferrograd-py/examples/onnx_mnist.py` runs it in onnxruntime).
    #[cfg(feature = "onnx")]
    #[arg(long)]
    export_onnx: Option<PathBuf>,
}

/// What one epoch ends with: the mean training loss and the test accuracy (read by the
/// examples' tests; the command line prints them).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct EpochResult {
    /// Mean loss over the epoch's training samples.
    pub loss: f64,
    /// Fraction of test images classified right after the epoch.
    pub accuracy: f64,
}

fn run(args: Args, epochs: u64, build: fn(f64) -> Model) -> Result<Vec<EpochResult>, String> {
    let t = &args.training;
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| e.to_string())?;
    }
    let load = |train| {
        Mnist::load(&t.data, train)
            .map_err(|e| format!("{e}\n(fetch the data with: scripts/fetch-data.sh)"))
    };
    let (train, test) = (load(true)?, load(false)?);
    println!(
        "data: {} ({} train, {} test images)",
        t.data.display(),
        train.labels.len(),
        test.labels.len()
    );

    manual_seed(t.seed);
    let mut model = build(t.lr);
    let mut first_epoch = 0;
    if let Some(path) = &args.resume {
        let ck = load_checkpoint(path).map_err(|e| e.to_string())?;
        ck.restore(&mut model).map_err(|e| e.to_string())?;
        first_epoch = ck.epoch;
        println!("resumed from {} after epoch {}", path.display(), ck.epoch);
    }

    if args.compile {
        model = model.compile();
    }
    let mut results = Vec::new();
    for epoch in first_epoch..args.epochs.unwrap_or(epochs) {
        let start = Instant::now();
        let batches = BatchIterator::epoch(&train, t.batch_size, true, t.seed, epoch, false);
        let bar = ProgressBar::new(batches.batches() as u64);
        bar.set_style(
            ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(epoch.to_string());
        let (mut loss_sum, mut seen) = (0.0f64, 0usize);
        for (i, batch) in batches.enumerate() {
            let loss = model.train_step(&batch.inputs, &batch.targets);
            loss_sum += loss as f64 * batch.indices.len() as f64;
            seen += batch.indices.len();
            if i % 20 == 0 {
                let rate = seen as f64 / start.elapsed().as_secs_f64();
                bar.set_message(format!(
                    "loss {:.4}  {:.0} samples/s",
                    loss_sum / seen as f64,
                    rate
                ));
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let train_secs = start.elapsed().as_secs_f64();
        let scores = predict_in_batches(&model, &test.images, 1000);
        let acc = accuracy(&scores, &test.labels);
        println!(
            "Epoch {epoch} {acc}  loss {:.4}  {:.2} s ({:.0} samples/s)",
            loss_sum / seen as f64,
            train_secs,
            seen as f64 / train_secs
        );
        if let Some(path) = &args.save {
            save_checkpoint(path, &model, epoch + 1).map_err(|e| e.to_string())?;
        }
        results.push(EpochResult {
            loss: loss_sum / seen as f64,
            accuracy: acc.accuracy,
        });
    }
    #[cfg(feature = "onnx")]
    if let Some(path) = &args.export_onnx {
        let example = test.images.narrow(0, 0, 1);
        let opts = ferrograd::onnx::ExportOptions::default();
        ferrograd::onnx::export(model.net(), &[("input", &example)], path, &opts)
            .map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak memory (RSS): {mib:.0} MiB");
    }
    Ok(results)
}

/// Panics unless training learned: the loss fell from the first epoch to the last, and the
/// last accuracy is at least three times chance (0.1) on `tiny_mnist`'s learnable data.
#[cfg(test)]
pub fn assert_learned(results: &[EpochResult]) {
    let (first, last) = (results[0], results[results.len() - 1]);
    assert!(
        results.len() > 1 && last.loss < first.loss && last.accuracy >= 0.3,
        "no learning: {results:?}"
    );
}

/// Parses the flags (`epochs` by default) and trains the model `build` makes for a learning
/// rate; errors go to stderr with a failing exit code.
pub fn main(name: &'static str, epochs: u64, build: fn(f64) -> Model) -> ExitCode {
    let args = parse(name, std::env::args_os()).unwrap_or_else(|e| e.exit());
    match run(args, epochs, build) {
        Ok(_) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// The job as `main` runs it, with the command line given (program name first).
#[cfg(test)]
pub fn run_with(
    name: &'static str,
    epochs: u64,
    build: fn(f64) -> Model,
    argv: &[&str],
) -> Result<Vec<EpochResult>, String> {
    let args = parse(name, argv).map_err(|e| e.to_string())?;
    run(args, epochs, build)
}

fn parse<I, T>(name: &'static str, argv: I) -> Result<Args, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let matches = Args::command().name(name).try_get_matches_from(argv)?;
    Args::from_arg_matches(&matches)
}
