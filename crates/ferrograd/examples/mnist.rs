//! The seed's MNIST classifier: MLP 784-400-100-10, ReLU, softmax cross-entropy, Adam 1e-3,
//! batch 128, on real MNIST (or Fashion-MNIST: same format).
//!
//! `scripts/fetch-data.sh && cargo run --release --example mnist -- [--data DIR] [--epochs N]
//!  [--batch-size N] [--lr X] [--seed N] [--threads N] [--save PATH] [--resume PATH]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod common;

use common::{peak_rss_mib, seed_mlp};
use ferrograd::data::{BatchIterator, Mnist};
use ferrograd::io::{load_checkpoint, save_checkpoint};
use ferrograd::metrics::accuracy;
use ferrograd::prelude::*;
use indicatif::{ProgressBar, ProgressStyle};

struct Args {
    data: PathBuf,
    epochs: u64,
    batch_size: usize,
    lr: f64,
    seed: u64,
    threads: Option<usize>,
    save: Option<PathBuf>,
    resume: Option<PathBuf>,
}

const USAGE: &str = "usage: mnist [--data DIR] [--epochs N] [--batch-size N] [--lr X] [--seed N] \
                     [--threads N] [--save PATH] [--resume PATH]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        data: PathBuf::from("data/mnist"),
        epochs: 20,
        batch_size: 128,
        lr: 1e-3,
        seed: 0,
        threads: None,
        save: None,
        resume: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--data" => a.data = PathBuf::from(&value),
            "--epochs" => a.epochs = value.parse().map_err(|e| bad(&e))?,
            "--batch-size" => a.batch_size = value.parse().map_err(|e| bad(&e))?,
            "--lr" => a.lr = value.parse().map_err(|e| bad(&e))?,
            "--seed" => a.seed = value.parse().map_err(|e| bad(&e))?,
            "--threads" => a.threads = Some(value.parse().map_err(|e| bad(&e))?),
            "--save" => a.save = Some(PathBuf::from(&value)),
            "--resume" => a.resume = Some(PathBuf::from(&value)),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if a.batch_size == 0 {
        return Err("--batch-size must be positive".into());
    }
    Ok(a)
}

fn run(args: Args) -> Result<(), String> {
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| e.to_string())?;
    }
    let load = |train| {
        Mnist::load(&args.data, train)
            .map_err(|e| format!("{e}\n(fetch the data with: scripts/fetch-data.sh)"))
    };
    let (train, test) = (load(true)?, load(false)?);
    println!(
        "data: {} ({} train, {} test images)",
        args.data.display(),
        train.labels.len(),
        test.labels.len()
    );

    manual_seed(args.seed);
    let mut model = seed_mlp(args.lr);
    let mut first_epoch = 0;
    if let Some(path) = &args.resume {
        let ck = load_checkpoint(path).map_err(|e| e.to_string())?;
        ck.restore(&mut model).map_err(|e| e.to_string())?;
        first_epoch = ck.epoch;
        println!("resumed from {} after epoch {}", path.display(), ck.epoch);
    }

    for epoch in first_epoch..args.epochs {
        let start = Instant::now();
        let batches = BatchIterator::epoch(&train, args.batch_size, true, args.seed, epoch, false);
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
        let scores = model.predict(&test.images);
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
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak memory (RSS): {mib:.0} MiB");
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}
