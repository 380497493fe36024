//! The seed's MNIST MLP (784-400-100-10, ReLU, softmax cross-entropy, Adam 1e-3, batch 128)
//! built as a static graph and trained through a Session. It starts from the weights the eager
//! `mnist` example draws for the same seed and sees the same batches, so its per-epoch lines
//! match eager mode's.
//!
//! `scripts/fetch-data.sh && cargo run --release --example mnist_graph -- --epochs 2`

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ferrograd::data::Mnist;
use ferrograd::graph::{Feed, Graph, GraphOptimizer, Node, Session};
use ferrograd::prelude::*;

mod common;

#[derive(Parser)]
#[command(about = "The seed's MNIST MLP as a static graph")]
struct Args {
    /// Epochs to train.
    #[arg(long, default_value_t = 2)]
    epochs: u64,
    #[command(flatten)]
    training: common::Training,
}

/// The graph's inputs, its scores, and its training op.
struct MlpGraph {
    graph: Graph,
    x: Node,
    y: Node,
    scores: Node,
    train: Node,
}

/// The MLP on placeholders `x` `[?, 784]` and one-hot `y` `[?, 10]`, its variables set to the
/// eager network's `(weight [out, in], bias)` pairs, with the eager layers' very ops.
fn build(layers: &[(Tensor, Tensor)], lr: f64) -> MlpGraph {
    let graph = Graph::new();
    let x = graph.placeholder_with("x", &[None, Some(784)], DType::F32);
    let y = graph.placeholder_with("y", &[None, Some(10)], DType::F32);
    let mut h = x.clone();
    for (i, (w, b)) in layers.iter().enumerate() {
        let w = graph.variable(&format!("{}.weight", 2 * i), w.clone());
        let b = graph.variable(&format!("{}.bias", 2 * i), b.clone());
        h = &h.matmul(&w.transpose(0, 1)) + &b;
        if i + 1 < layers.len() {
            h = h.relu();
        }
    }
    let per_sample = (&h.log_softmax(1) * &y).sum_axes(&[1], false);
    let loss = -per_sample.mean();
    let train = GraphOptimizer::new(Adam::new(lr)).minimize(&loss);
    MlpGraph {
        graph,
        x,
        y,
        scores: h,
        train,
    }
}

/// Trains as the flags say; each epoch's mean training loss and test accuracy.
fn run(args: Args) -> Result<Vec<(f64, f64)>, Box<dyn std::error::Error>> {
    let (epochs, args) = (args.epochs, args.training);
    let load = |train| {
        Mnist::load(&args.data, train)
            .map_err(|e| format!("{e}\n(fetch the data with: scripts/fetch-data.sh)"))
    };
    let (train, test) = (load(true)?, load(false)?);
    manual_seed(args.seed);
    let eager = common::seed_mlp(args.lr);
    let params: Vec<Tensor> = eager
        .net()
        .params()
        .iter()
        .map(|(_, p)| p.tensor())
        .collect();
    let layers: Vec<(Tensor, Tensor)> = params
        .chunks(2)
        .map(|wb| (wb[0].detach(), wb[1].detach()))
        .collect();
    let g = build(&layers, args.lr);
    println!("{} nodes:\n{}", g.graph.len(), g.graph);
    let mut sess = Session::new(&g.graph);
    let mut results = Vec::new();
    for epoch in 0..epochs {
        let start = Instant::now();
        let (mut loss_sum, mut seen) = (0.0f64, 0usize);
        for batch in BatchIterator::epoch(&train, args.batch_size, true, args.seed, epoch, false) {
            let feed = Feed::new()
                .with(&g.x, batch.inputs)
                .with(&g.y, batch.targets);
            let loss = sess.run(&g.train, &feed)?.item();
            loss_sum += loss * batch.indices.len() as f64;
            seen += batch.indices.len();
        }
        let secs = start.elapsed().as_secs_f64();
        let n = test.images.shape()[0];
        let parts = (0..n)
            .step_by(1000)
            .map(|i| {
                let feed = Feed::new().with(&g.x, test.images.narrow(0, i, 1000.min(n - i)));
                sess.run(&g.scores, &feed)
            })
            .collect::<Result<Vec<Tensor>, _>>()?;
        let scores = Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0);
        let acc = accuracy(&scores, &test.labels);
        let loss = loss_sum / seen as f64;
        println!(
            "Epoch {epoch} {acc}  loss {loss:.4}  {secs:.2} s ({:.0} samples/s)",
            seen as f64 / secs
        );
        results.push((loss, acc.accuracy));
    }
    Ok(results)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_on_tiny_data() {
        let data = common::tiny_mnist("mnist_graph-example", 200, 40);
        let argv = [
            "mnist_graph",
            "--data",
            data.to_str().unwrap(),
            "--epochs",
            "3",
        ];
        let results = run(Args::try_parse_from(argv).unwrap()).unwrap();
        let ((first, _), (last, accuracy)) = (results[0], results[2]);
        assert!(last < first && accuracy >= 0.3, "no learning: {results:?}");
    }
}
