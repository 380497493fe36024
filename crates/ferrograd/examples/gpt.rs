//! A character-level GPT trained on Shakespeare's plays: the model, optimizer, schedule and data
//! split of the PyTorch GPT `crates/ferrograd-py/examples/gpt.py --framework torch` (nanoGPT's
//! configuration for a CPU), so that the two can be
//! run side by side.
//!
//! Pre-norm blocks `x + proj(causal_attention(LayerNorm(x)))`, `x + fc_proj(GELU(fc(LayerNorm(x))))`,
//! learned token and position embeddings, a final LayerNorm and an output layer tied to the
//! token embedding; weights N(0, 0.02), the residual projections N(0, 0.02/√(2·layers)).
//! AdamW with weight decay on matrices only, gradient norm clipped, linear warm-up then cosine.
//!
//! ```text
//! scripts/fetch-data.sh
//! cargo run --release --features ferrograd/pictures --example gpt -- --out-dir target
//! ```
//!
//! Prints the train and validation loss at intervals, the median time per step and the peak
//! memory, draws the loss curves (`gpt_loss.svg`), saves a checkpoint that `--resume` continues
//! bit for bit, and samples text (temperature, top-k) with a key/value cache.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use ferrograd::init;
use ferrograd::io::{load_tensors, save_tensors};
use ferrograd::prelude::*;
use ferrograd::profiler::{profile, record_function, Profile, SortBy};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

#[derive(Parser)]
#[command(about = "Trains a character-level GPT on Shakespeare and samples from it")]
struct Args {
    /// The text to learn (one file; the first 90% trains, the rest validates).
    #[arg(long, default_value = "data/shakespeare/shakespeare.txt")]
    text: PathBuf,
    /// Training steps.
    #[arg(long, default_value_t = 2000)]
    iters: u64,
    /// Sequences per step.
    #[arg(long, default_value_t = 12)]
    batch: usize,
    /// Characters of context.
    #[arg(long, default_value_t = 64)]
    context: usize,
    /// Width of the residual stream.
    #[arg(long, default_value_t = 128)]
    width: usize,
    /// Attention heads per block.
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Peak learning rate (AdamW).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Learning rate at the last step, reached along a half cosine.
    #[arg(long, default_value_t = 1e-4)]
    min_lr: f64,
    /// Steps of linear warm-up.
    #[arg(long, default_value_t = 100)]
    warmup: u64,
    /// AdamW's β₂ (β₁ is 0.9).
    #[arg(long, default_value_t = 0.99)]
    beta2: f64,
    /// Decoupled weight decay, on matrices only.
    #[arg(long, default_value_t = 0.1)]
    weight_decay: f64,
    /// Largest global gradient norm; larger gradients are scaled down to it.
    #[arg(long, default_value_t = 1.0)]
    clip: f64,
    /// Steps between loss evaluations.
    #[arg(long, default_value_t = 250)]
    eval_interval: u64,
    /// Batches per loss evaluation.
    #[arg(long, default_value_t = 20)]
    eval_iters: usize,
    /// Seed of the weights, the batches and the sampling.
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// Characters to generate at the end.
    #[arg(long, default_value_t = 300)]
    sample: usize,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample among the `top_k` likeliest characters only (0: all).
    #[arg(long, default_value_t = 20)]
    top_k: usize,
    /// Save a checkpoint (weights, optimizer state, step) here at every evaluation.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Continue from `--checkpoint` where it stopped.
    #[arg(long)]
    resume: bool,
    /// Stop before this step (saving the checkpoint), as an interrupted run would; `--resume`
    /// continues it.
    #[arg(long)]
    stop_at: Option<u64>,
    /// Keep only each block's input for backward and compute the block again there
    /// (gradient checkpointing): less memory, one more forward pass of the blocks.
    #[arg(long)]
    grad_checkpoint: bool,
    /// Profile this training step: print the time of every op and derivative rule in it, and
    /// write its Chrome trace (`gpt_step.json` in `--out-dir`, for Perfetto).
    #[arg(long)]
    profile_step: Option<u64>,
    /// Run each step's forward, loss and gradients as a compiled plan (`ferrograd::compile`):
    /// the same losses.
    #[arg(long)]
    compile: bool,
    /// Where to write the loss curves.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// Write the trained model as an ONNX model to this file (feature `onnx`): the logits of
    /// `[batch, context]` ids, the batch free.
    #[cfg(feature = "onnx")]
    #[arg(long)]
    export_onnx: Option<PathBuf>,
}

/// One pre-norm transformer block, with PyTorch the PyTorch script's names.
#[derive(Module)]
struct Block {
    ln_1: LayerNorm,
    attn: Dense,
    attn_proj: Dense,
    ln_2: LayerNorm,
    fc: Dense,
    fc_proj: Dense,
    #[module(skip)]
    heads: usize,
}

/// Keys and values of the positions seen so far, `[N, heads, S, width/heads]` each.
#[derive(Default)]
struct KvCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
}

impl Block {
    fn new(width: usize, heads: usize) -> Block {
        Block {
            ln_1: LayerNorm::new(width),
            attn: Dense::new(width, 3 * width),
            attn_proj: Dense::new(width, width),
            ln_2: LayerNorm::new(width),
            fc: Dense::new(width, 4 * width),
            fc_proj: Dense::new(4 * width, width),
            heads,
        }
    }

    /// `x` `[N, T, width]`. With a cache, the new positions' keys and values join those
    /// already there: either the cache is empty (causal attention over `x`) or `T` is 1 (one
    /// new position, which sees every cached one).
    fn forward(&self, x: &Tensor, cache: Option<&mut KvCache>) -> Tensor {
        let (n, t, c) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let h = self.heads;
        let qkv = self
            .attn
            .forward(&self.ln_1.forward(x, Mode::Train), Mode::Train);
        let split = |i: usize| {
            qkv.narrow(2, i * c, c)
                .reshape(&[n, t, h, c / h])
                .transpose(1, 2)
        };
        let (q, mut k, mut v) = (split(0), split(1), split(2));
        let mut causal = true;
        if let Some(cache) = cache {
            if let (Some(ck), Some(cv)) = (&cache.k, &cache.v) {
                assert_eq!(t, 1, "a cache takes one new position at a time");
                k = Tensor::cat(&[ck, &k], 2);
                v = Tensor::cat(&[cv, &v], 2);
                causal = false;
            }
            cache.k = Some(k.clone());
            cache.v = Some(v.clone());
        }
        let y = q.scaled_dot_product_attention(&k, &v, &Attention::new().causal(causal));
        let y = y.transpose(1, 2).reshape(&[n, t, c]);
        let x = x + &self.attn_proj.forward(&y, Mode::Train);
        let hidden = self
            .fc
            .forward(&self.ln_2.forward(&x, Mode::Train), Mode::Train);
        &x + &self.fc_proj.forward(&hidden.gelu(), Mode::Train)
    }
}

/// The GPT of the PyTorch script: its parameter names are PyTorch's (`head.weight` is
/// `tok.weight`, listed once).
#[derive(Module)]
struct Gpt {
    tok: Embedding,
    pos: Embedding,
    blocks: Vec<Arc<Block>>,
    ln_f: LayerNorm,
    head: Dense,
    #[module(skip)]
    context: usize,
    #[module(skip)]
    grad_checkpoint: bool,
}

impl Gpt {
    fn new(vocab: usize, args: &Args) -> Gpt {
        let tok = Embedding::new(vocab, args.width);
        let head = Dense::tied(tok.weight());
        let gpt = Gpt {
            tok,
            pos: Embedding::new(args.context, args.width),
            blocks: (0..args.layers)
                .map(|_| Arc::new(Block::new(args.width, args.heads)))
                .collect(),
            ln_f: LayerNorm::new(args.width),
            head,
            context: args.context,
            grad_checkpoint: args.grad_checkpoint,
        };
        // The PyTorch script's initialisation: residual projections narrower, other matrices
        // N(0, 0.02), norms' scales 1, everything else 0.
        let mut rng = StdRng::seed_from_u64(args.seed);
        let proj_std = 0.02 / (2.0 * args.layers as f64).sqrt();
        for (name, p) in gpt.params() {
            let shape = p.shape();
            let value = if name.ends_with("proj.weight") {
                init::normal(&shape, 0.0, proj_std, DType::F32, &mut rng)
            } else if shape.len() == 2 {
                init::normal(&shape, 0.0, 0.02, DType::F32, &mut rng)
            } else if name.contains("ln_") && name.ends_with(".weight") {
                Tensor::ones(&shape, DType::F32)
            } else {
                Tensor::zeros(&shape, DType::F32)
            };
            p.set(&value);
        }
        gpt
    }

    /// Logits `[N, T, vocab]` of ids `[N, T]` at positions `start..start + T`, with one
    /// cache per block when sampling.
    fn logits(&self, ids: &Tensor, start: usize, caches: Option<&mut [KvCache]>) -> Tensor {
        let t = ids.shape()[1];
        let positions: Vec<usize> = (start..start + t).collect();
        let mut x = &self.tok.forward(ids, Mode::Train) + &self.pos.lookup(&positions);
        match caches {
            Some(caches) => {
                for (block, cache) in self.blocks.iter().zip(caches) {
                    x = block.forward(&x, Some(cache));
                }
            }
            None if self.grad_checkpoint => {
                for block in &self.blocks {
                    let block = Arc::clone(block);
                    x = checkpoint(move |xs: &[Tensor]| block.forward(&xs[0], None), &[&x]);
                }
            }
            None => {
                for block in &self.blocks {
                    x = block.forward(&x, None);
                }
            }
        }
        self.head
            .forward(&self.ln_f.forward(&x, Mode::Train), Mode::Train)
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Tensor {
        CrossEntropy::new().loss(&self.logits(x, 0, None), y)
    }

    /// `count` more characters after `prompt`, each drawn from the softmax of the logits
    /// divided by `temperature`, among the `top_k` likeliest (all with 0). Within the context
    /// every new position costs one step through the cache; beyond it the window slides and
    /// the positions are those of the last `context` characters, as the PyTorch script's
    /// `generate` computes them.
    fn generate(
        &self,
        prompt: &[usize],
        count: usize,
        args: &Args,
        rng: &mut StdRng,
    ) -> Vec<usize> {
        no_grad(|| {
            let mut ids = prompt.to_vec();
            let mut caches: Vec<KvCache> = Vec::new();
            let mut cached = 0;
            for _ in 0..count {
                let logits = if cached == 0 || cached == self.context {
                    let window = &ids[ids.len().saturating_sub(self.context)..];
                    caches = self.blocks.iter().map(|_| KvCache::default()).collect();
                    cached = window.len();
                    self.logits(&row(window), 0, Some(&mut caches))
                } else {
                    let last = &ids[ids.len() - 1..];
                    cached += 1;
                    self.logits(&row(last), cached - 1, Some(&mut caches))
                };
                let vocab = logits.shape()[2];
                let last = logits.narrow(1, logits.shape()[1] - 1, 1).reshape(&[vocab]);
                let mut scaled = last.div_scalar(args.temperature);
                if args.top_k > 0 && args.top_k < vocab {
                    let kth = scaled.topk(args.top_k).0.to_vec::<f64>()[args.top_k - 1];
                    scaled = scaled.masked_fill(&scaled.lt_scalar(kth), f64::NEG_INFINITY);
                }
                let next = scaled.softmax(0).multinomial(1, false, rng);
                ids.push(next.to_vec::<i64>()[0] as usize);
            }
            ids
        })
    }
}

/// Ids as a `[1, T]` tensor.
fn row(ids: &[usize]) -> Tensor {
    Tensor::from_vec(ids.iter().map(|&i| i as i64).collect(), &[1, ids.len()])
}

/// The text as character codes, and the sorted characters (the vocabulary).
struct Corpus {
    chars: Vec<char>,
    train: Vec<i64>,
    val: Vec<i64>,
}

impl Corpus {
    fn read(path: &Path) -> Result<Corpus, Box<dyn std::error::Error>> {
        let failed = |e: &dyn std::fmt::Display| {
            format!(
                "{}: {e} (scripts/fetch-data.sh brings Shakespeare's plays)",
                path.display()
            )
        };
        // A regular file of a bounded size: a device such as /dev/zero never ends.
        let meta = std::fs::metadata(path).map_err(|e| failed(&e))?;
        if !meta.is_file() || meta.len() > MAX_TEXT_BYTES {
            return Err(failed(&format!(
                "--text must be a regular file of at most {MAX_TEXT_BYTES} bytes"
            ))
            .into());
        }
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TEXT_BYTES).read_to_string(&mut text))
            .map_err(|e| failed(&e))?;
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let code: HashMap<char, i64> = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as i64))
            .collect();
        let data: Vec<i64> = text.chars().map(|c| code[&c]).collect();
        let split = data.len() * 9 / 10;
        Ok(Corpus {
            chars,
            val: data[split..].to_vec(),
            train: data[..split].to_vec(),
        })
    }

    /// `batch` random windows of `context` characters and the same windows one later, as
    /// `[batch, context]` ids.
    fn batch(&self, val: bool, batch: usize, context: usize, rng: &mut StdRng) -> (Tensor, Tensor) {
        let data = if val { &self.val } else { &self.train };
        assert!(
            data.len() > context + 1,
            "the text is too short for a context of {context}"
        );
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..batch {
            let s = rng.gen_range(0..data.len() - context - 1);
            x.extend_from_slice(&data[s..s + context]);
            y.extend_from_slice(&data[s + 1..s + 1 + context]);
        }
        (
            Tensor::from_vec(x, &[batch, context]),
            Tensor::from_vec(y, &[batch, context]),
        )
    }
}

/// the PyTorch script's schedule: linear warm-up to `lr`, then a half cosine to `min_lr` at the
/// last step.
fn lr_at(it: u64, args: &Args) -> f64 {
    if it < args.warmup {
        return args.lr * (it + 1) as f64 / (args.warmup + 1) as f64;
    }
    let ratio = (it - args.warmup) as f64 / args.iters.saturating_sub(args.warmup).max(1) as f64;
    let cos = 0.5 * (1.0 + (std::f64::consts::PI * ratio.min(1.0)).cos());
    args.min_lr + cos * (args.lr - args.min_lr)
}

/// AdamW for the matrices (decayed) and for the rest (not decayed), as the PyTorch script's two
/// parameter groups.
struct Optimizers {
    groups: Vec<(AdamW, Vec<(String, Param)>)>,
}

impl Optimizers {
    fn new(gpt: &Gpt, args: &Args) -> Optimizers {
        let (matrices, rest): (Vec<_>, Vec<_>) = gpt
            .params()
            .into_iter()
            .partition(|(_, p)| p.shape().len() >= 2);
        let adamw = |wd: f64| AdamW::new(args.lr).betas(0.9, args.beta2).weight_decay(wd);
        Optimizers {
            groups: vec![(adamw(args.weight_decay), matrices), (adamw(0.0), rest)],
        }
    }

    fn step(&mut self, lr: f64, grads: &Gradients) {
        for (opt, params) in &mut self.groups {
            opt.set_lr(lr);
            opt.step(params, grads);
        }
    }
}

/// Saves weights, optimizer state and the step reached.
fn save(path: &Path, gpt: &Gpt, opts: &Optimizers, step: u64) -> ferrograd::Result<()> {
    let mut tensors: Vec<(String, Tensor)> = gpt
        .state()
        .into_iter()
        .map(|(n, t)| (format!("model.{n}"), t))
        .collect();
    let mut metadata = HashMap::from([("step".to_string(), step.to_string())]);
    for (i, (opt, params)) in opts.groups.iter().enumerate() {
        let (steps, state) = opt.state(params)?;
        metadata.insert(format!("optim{i}.steps"), steps.to_string());
        tensors.extend(state.into_iter().map(|(n, t)| (format!("optim{i}.{n}"), t)));
    }
    save_tensors(path, &tensors, metadata)
}

/// Restores what [`save`] wrote; returns the step to continue from.
fn restore(
    path: &Path,
    gpt: &Gpt,
    opts: &mut Optimizers,
) -> Result<u64, Box<dyn std::error::Error>> {
    let (mut tensors, metadata) = load_tensors(path)?;
    let number = |key: &str| -> Result<u64, String> {
        metadata
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{}: no {key} in the checkpoint", path.display()))
    };
    let mut take = |prefix: &str| -> Vec<(String, Tensor)> {
        let keys: Vec<String> = tensors
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.into_iter()
            .map(|k| (k[prefix.len()..].to_string(), tensors.remove(&k).unwrap()))
            .collect()
    };
    let model: HashMap<String, Tensor> = take("model.").into_iter().collect();
    gpt.check_state(&model)?;
    let mut states = Vec::new();
    for (i, (opt, params)) in opts.groups.iter().enumerate() {
        let state = take(&format!("optim{i}."));
        opt.check_state(params, &state)?;
        states.push((number(&format!("optim{i}.steps"))?, state));
    }
    let step = number("step")?;
    gpt.load_state(&model)?;
    for ((opt, params), (steps, state)) in opts.groups.iter_mut().zip(states) {
        opt.load_state(params, steps, state)?;
    }
    Ok(step)
}

/// Mean loss over `args.eval_iters` batches of each part; the batches are drawn from a
/// generator seeded by the step, so an evaluation does not move the training batches.
fn evaluate(gpt: &Gpt, corpus: &Corpus, args: &Args, step: u64) -> (f64, f64) {
    no_grad(|| {
        let mut rng = StdRng::seed_from_u64(args.seed ^ 0x5eed_0000_0000 ^ step);
        let mut mean = |val: bool| {
            (0..args.eval_iters)
                .map(|_| {
                    let (x, y) = corpus.batch(val, args.batch, args.context, &mut rng);
                    gpt.loss(&x, &y).item()
                })
                .sum::<f64>()
                / args.eval_iters.max(1) as f64
        };
        (mean(false), mean(true))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(Args::parse())
}

/// The largest text the example reads (Shakespeare's plays are about 5 MiB).
const MAX_TEXT_BYTES: u64 = 256 << 20;

/// Elements of one step's attention scores (batch × heads × context²) beyond which a run
/// would not fit in memory on a machine that trains this example.
const MAX_SCORES: u128 = 1 << 30;

/// Weights of the blocks beyond which the model and Adam's state would not fit in memory.
const MAX_WEIGHTS: u128 = 1 << 30;

impl Args {
    /// Every flag checked before anything starts: a message naming the flag, never a panic,
    /// a NaN loss or a hang later on.
    fn check(&self) -> Result<(), String> {
        let positive = [
            ("--batch", self.batch),
            ("--context", self.context),
            ("--width", self.width),
            ("--heads", self.heads),
            ("--eval-iters", self.eval_iters),
        ];
        for (flag, v) in positive {
            if v == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        if self.eval_interval == 0 {
            return Err("--eval-interval must be at least 1".into());
        }
        if let Some(step) = self.profile_step.filter(|&s| s >= self.iters) {
            return Err(format!(
                "--profile-step {step} is not a training step (there are {})",
                self.iters
            ));
        }
        if !self.width.is_multiple_of(self.heads) {
            return Err(format!(
                "--width {} must be a multiple of --heads {}",
                self.width, self.heads
            ));
        }
        let scores = self.batch as u128 * self.heads as u128 * (self.context as u128).pow(2);
        if scores > MAX_SCORES {
            return Err(format!(
                "--batch {} × --heads {} × --context {}² is {scores} attention scores per \
                 step, more than {MAX_SCORES} fit in a step here",
                self.batch, self.heads, self.context
            ));
        }
        // A block holds about 12·width² weights (and Adam two more copies of each).
        let weights = 12 * (self.width as u128).pow(2) * self.layers as u128;
        if weights > MAX_WEIGHTS {
            return Err(format!(
                "--width {} and --layers {} make about {weights} weights, more than \
                 {MAX_WEIGHTS} fit here",
                self.width, self.layers
            ));
        }
        let finite = |flag: &str, v: f64, ok: bool| {
            if v.is_finite() && ok {
                Ok(())
            } else {
                Err(format!("{flag} {v} is out of range"))
            }
        };
        finite("--lr", self.lr, self.lr > 0.0)?;
        finite("--min-lr", self.min_lr, self.min_lr >= 0.0)?;
        finite("--beta2", self.beta2, (0.0..1.0).contains(&self.beta2))?;
        finite(
            "--weight-decay",
            self.weight_decay,
            self.weight_decay >= 0.0,
        )?;
        finite("--clip", self.clip, self.clip > 0.0)?;
        finite("--temperature", self.temperature, self.temperature > 0.0)?;
        Ok(())
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    args.check()?;
    let corpus = Corpus::read(&args.text)?;
    let least = args.context + 2;
    if corpus.train.len() < least || corpus.val.len() < least {
        return Err(format!(
            "{}: too short for --context {}: its training and validation parts (90% and 10%) \
             need {least} characters each",
            args.text.display(),
            args.context
        )
        .into());
    }
    let gpt = Gpt::new(corpus.chars.len(), &args);
    let mut opts = Optimizers::new(&gpt, &args);
    println!(
        "ferrograd GPT: {} characters, vocabulary {}, {} parameters, isa {}",
        corpus.train.len() + corpus.val.len(),
        corpus.chars.len(),
        gpt.num_params(),
        ferrograd::Isa::active().name()
    );
    let mut start = 0;
    if args.resume {
        let path = args
            .checkpoint
            .as_ref()
            .ok_or("--resume needs --checkpoint")?;
        start = restore(path, &gpt, &mut opts)?;
        println!("resumed from {} at step {start}", path.display());
    }
    let Some(curves) = train(&gpt, &mut opts, &corpus, &args, start)? else {
        return Ok(());
    };
    if curves.len() > 1 {
        let path = args.out_dir.join("gpt_loss.svg");
        let points: Vec<(f64, f64, f64)> = curves.iter().map(|c| (c.0 as f64, c.1, c.2)).collect();
        common::plot_curves(
            &path,
            "character-level GPT on Shakespeare",
            ["step", "cross-entropy"],
            ["train", "validation"],
            &points,
        )?;
        println!("loss curves: {}", path.display());
    }
    #[cfg(feature = "onnx")]
    if let Some(path) = &args.export_onnx {
        std::fs::write(path, onnx_bytes(&gpt, args.context)?)?;
        println!("ONNX model: {}", path.display());
    }
    let newline = corpus.chars.iter().position(|&c| c == '\n').unwrap_or(0);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let sample = gpt.generate(&[newline], args.sample, &args, &mut rng);
    let text: String = sample.iter().map(|&i| corpus.chars[i]).collect();
    println!("sample:\n{text}");
    Ok(())
}

/// The model as ONNX bytes: its logits for `[batch, context]` ids, traced on one row of zeros,
/// with the batch axis free (checked on one more row).
#[cfg(feature = "onnx")]
fn onnx_bytes(gpt: &Gpt, context: usize) -> ferrograd::Result<Vec<u8>> {
    use ferrograd::onnx::{bytes_of, check_free_batch, ExportOptions};
    let ids = Tensor::zeros(&[1, context], DType::I64);
    let logits = |xs: &[Tensor]| vec![gpt.logits(&xs[0], 0, None)];
    let traced = ferrograd::graph::trace(&[("ids", &ids)], &gpt.state_params(), logits)?;
    let bytes = bytes_of(&traced, &ExportOptions::default())?;
    check_free_batch(&bytes, &[&ids], logits)?;
    Ok(bytes)
}

/// The step, train loss and validation loss of one evaluation.
type Losses = (u64, f64, f64);

/// Trains from step `start` to `args.iters`, evaluating (and saving the checkpoint) every
/// `eval_interval` steps; the losses at each evaluation, or `None` when `--stop-at` ended the
/// run early.
fn train(
    gpt: &Gpt,
    opts: &mut Optimizers,
    corpus: &Corpus,
    args: &Args,
    start: u64,
) -> Result<Option<Vec<Losses>>, Box<dyn std::error::Error>> {
    let bar = ProgressBar::new(args.iters);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?);
    bar.set_position(start);
    let (mut curves, mut times) = (Vec::new(), Vec::new());
    let mut grad = if args.compile {
        compiled(gpt)
    } else {
        eager(gpt)
    };
    let clock = Instant::now();
    for it in start..=args.iters {
        if it % args.eval_interval.max(1) == 0 || it == args.iters {
            let (train, val) = evaluate(gpt, corpus, args, it);
            let secs = clock.elapsed().as_secs_f64();
            bar.suspend(|| {
                println!("iter {it}: train loss {train:.4}, val loss {val:.4}, {secs:.1} s")
            });
            curves.push((it, train, val));
            if let Some(path) = &args.checkpoint {
                save(path, gpt, opts, it)?;
            }
        }
        if it == args.iters {
            break;
        }
        if Some(it) == args.stop_at {
            if let Some(path) = &args.checkpoint {
                save(path, gpt, opts, it)?;
            }
            println!("stopped at step {it}");
            return Ok(None);
        }
        // Each step's batch comes from a generator seeded by the step: a resumed run draws
        // the batches the uninterrupted one would have.
        let mut rng = StdRng::seed_from_u64(args.seed.wrapping_add(it));
        let (x, y) = corpus.batch(false, args.batch, args.context, &mut rng);
        let t0 = Instant::now();
        let loss = if args.profile_step == Some(it) {
            let (loss, report) =
                profile(|| step(&mut grad, opts, &x, &y, lr_at(it, args), args.clip));
            bar.suspend(|| print_profile(&report, &args.out_dir))?;
            loss
        } else {
            step(&mut grad, opts, &x, &y, lr_at(it, args), args.clip)
        };
        times.push(t0.elapsed().as_secs_f64());
        bar.inc(1);
        bar.set_message(format!("loss {loss:.3}"));
    }
    bar.finish_and_clear();
    report(&times, clock.elapsed().as_secs_f64());
    Ok(Some(curves))
}

/// One training step at learning rate `lr`: the loss before it.
/// One batch's loss and gradients: eagerly, or by the compiled plan of `--compile`.
type Gradient<'a> = Box<dyn FnMut(&Tensor, &Tensor) -> (f64, Gradients) + 'a>;

/// Eager forward and backward.
fn eager(gpt: &Gpt) -> Gradient<'_> {
    Box::new(|x, y| {
        let loss = gpt.loss(x, y);
        let grads = {
            let _backward = record_function("backward");
            loss.backward()
        };
        // The graph goes before the update: while it holds the parameters' values (a second
        // backward could need them), the optimizer must copy each parameter to update it.
        let value = loss.item();
        drop(loss);
        (value, grads)
    })
}

/// The forward, the loss and every gradient as one compiled plan (`ferrograd::compile`).
fn compiled(gpt: &Gpt) -> Gradient<'_> {
    let params = gpt.params();
    let f = move |xs: &[Tensor]| {
        let loss = gpt.loss(&xs[0], &xs[1]);
        let values: Vec<Tensor> = gpt.params().iter().map(|(_, p)| p.tensor()).collect();
        let refs: Vec<&Tensor> = values.iter().collect();
        let mut out = vec![loss.clone()];
        out.extend(ferrograd::autograd::grad(&loss, &refs));
        out
    };
    let mut plans = ferrograd::compile(f).params(params.clone());
    Box::new(move |x, y| {
        let out = plans.call(&[x.clone(), y.clone()]).expect("a traced step");
        let mut grads = Gradients::default();
        for ((_, p), g) in params.iter().zip(&out[1..]) {
            grads.insert(p, g.clone());
        }
        (out[0].item(), grads)
    })
}

fn step(
    grad: &mut Gradient<'_>,
    opts: &mut Optimizers,
    x: &Tensor,
    y: &Tensor,
    lr: f64,
    clip: f64,
) -> f64 {
    let _step = record_function("training step");
    let (loss, grads) = grad(x, y);
    let _update = record_function("clip and update");
    // The global norm clipped as torch.nn.utils.clip_grad_norm_ does.
    let norm = grads.norm();
    let grads = if norm > clip {
        grads.scale(clip / (norm + 1e-6))
    } else {
        grads
    };
    opts.step(lr, &grads);
    loss
}

/// The profiled step's table, by time outside nested scopes, and its trace in `dir`.
fn print_profile(report: &Profile, dir: &Path) -> ferrograd::Result<()> {
    println!("{}", report.table_sorted(SortBy::SelfTime, 25));
    let path = dir.join("gpt_step.json");
    report.export_chrome_trace(&path)?;
    println!("trace: {}", path.display());
    Ok(())
}

/// Median step time (the first 10 excluded, as the PyTorch script does) and peak memory.
fn report(times: &[f64], total: f64) {
    let mut timed: Vec<f64> = times.iter().skip(10).copied().collect();
    timed.sort_by(f64::total_cmp);
    if let Some(median) = timed.get(timed.len() / 2) {
        println!(
            "ms per iteration (median): {:.2}; total {total:.1} s",
            1000.0 * median
        );
    }
    if let Some(mib) = common::peak_rss_mib() {
        println!("peak memory: {mib:.0} MiB");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model written as ONNX and read back gives its logits, at another batch size too.
    #[cfg(feature = "onnx")]
    #[test]
    fn exports_to_onnx_with_its_logits() {
        let flags = [
            "gpt",
            "--width",
            "16",
            "--heads",
            "2",
            "--layers",
            "2",
            "--context",
            "8",
        ];
        let args = Args::parse_from(flags);
        manual_seed(3);
        let gpt = Gpt::new(11, &args);
        let model = ferrograd::onnx::from_bytes(&onnx_bytes(&gpt, 8).unwrap()).unwrap();
        let ids = Tensor::from_vec((0..24).map(|i| (i * 7) % 11).collect::<Vec<i64>>(), &[3, 8]);
        let got = model.run(&[&ids]).unwrap().remove(0).to_vec::<f32>();
        let want = no_grad(|| gpt.logits(&ids, 0, None)).to_vec::<f32>();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} against {w}");
        }
    }

    /// Each careless flag is refused before anything starts, with a message naming it.
    #[test]
    fn every_flag_is_checked_before_training() {
        let dir = common::scratch("gpt-flags");
        let short = dir.join("short.txt");
        std::fs::write(&short, "to be or not to be").unwrap();
        let cases: [(&[&str], &str); 16] = [
            (&["--heads", "0"], "--heads must be"),
            (&["--heads", "3", "--width", "128"], "multiple of --heads 3"),
            (&["--context", "0"], "--context must be"),
            (&["--width", "0"], "--width must be"),
            (&["--batch", "0"], "--batch must be"),
            (&["--eval-interval", "0"], "--eval-interval"),
            (
                &["--profile-step", "2000"],
                "--profile-step 2000 is not a training step",
            ),
            (&["--temperature=-1"], "--temperature -1"),
            (&["--temperature", "0"], "--temperature 0"),
            (&["--lr", "NaN"], "--lr NaN"),
            (&["--beta2", "1"], "--beta2 1"),
            (&["--context", "100000000"], "attention scores"),
            (&["--batch", "100000000000"], "attention scores"),
            (
                &["--width", "65536", "--layers", "1024", "--heads", "1"],
                "weights",
            ),
            (&["--text", "/dev/zero"], "regular file"),
            (
                &["--text", short.to_str().unwrap(), "--context", "8"],
                "too short for --context 8",
            ),
        ];
        for (flags, needle) in cases {
            let mut argv = vec!["gpt", "--out-dir", dir.to_str().unwrap()];
            argv.extend(flags);
            let err = run(Args::parse_from(argv)).unwrap_err().to_string();
            assert!(err.contains(needle), "{flags:?}: {err}");
        }
    }

    /// A small model on a short text: trains, samples, and a run stopped half-way and resumed,
    /// or one that recomputes its blocks in backward, ends with the same bits (weights and
    /// optimizer state) as the plain uninterrupted one.
    #[test]
    fn trains_samples_and_resumes_bit_for_bit() {
        let dir = common::scratch("gpt-example");
        let text = dir.join("text.txt");
        let verse =
            "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n";
        std::fs::write(&text, verse.repeat(20)).unwrap();
        let run_with = |extra: &[&str], checkpoint: &Path| {
            let mut argv = vec!["gpt", "--text", text.to_str().unwrap(), "--out-dir"];
            argv.push(dir.to_str().unwrap());
            argv.extend(["--iters", "6", "--eval-interval", "3", "--eval-iters", "2"]);
            argv.extend([
                "--batch",
                "3",
                "--context",
                "8",
                "--width",
                "16",
                "--heads",
                "2",
            ]);
            argv.extend([
                "--layers",
                "2",
                "--warmup",
                "2",
                "--sample",
                "20",
                "--checkpoint",
            ]);
            argv.push(checkpoint.to_str().unwrap());
            argv.extend(extra);
            run(Args::parse_from(argv)).unwrap();
        };
        let whole = dir.join("whole.safetensors");
        run_with(&[], &whole);
        let a = load_tensors(&whole).unwrap();
        // Interrupted and resumed, or with checkpointed blocks: the same bits.
        let (parts, recomputed) = (dir.join("parts.safetensors"), dir.join("ckpt.safetensors"));
        run_with(&["--stop-at", "4"], &parts);
        run_with(&["--resume"], &parts);
        // A profiled step changes nothing either, and leaves its trace.
        run_with(&["--grad-checkpoint", "--profile-step", "1"], &recomputed);
        let trace = std::fs::read_to_string(dir.join("gpt_step.json")).unwrap();
        assert!(trace.contains("\"name\":\"training step\""));
        for other in [&parts, &recomputed] {
            let b = load_tensors(other).unwrap();
            assert_eq!(a.1, b.1, "metadata");
            assert_eq!(a.0.len(), b.0.len());
            for (name, t) in &a.0 {
                assert_eq!(t.to_vec::<f64>(), b.0[name].to_vec::<f64>(), "{name}");
            }
        }
        assert!(a.0.contains_key("model.tok.weight") && !a.0.contains_key("model.head.weight"));
        assert!(dir.join("gpt_loss.svg").exists());
    }
}
