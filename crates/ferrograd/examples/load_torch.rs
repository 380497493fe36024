//! Loads models that PyTorch saved (`scripts/export_torch.py`) and compares ferrograd's
//! outputs with PyTorch's on the same inputs.
//!
//! `cargo run --release --example load_torch -- DIR`

use std::path::Path;

use ferrograd::io::load_tensors;
use ferrograd::prelude::*;

/// The seed's MLP, as `nn.Sequential(Linear, Relu, Linear, Relu, Linear)`.
fn mlp() -> Net {
    Net::new(vec![
        Box::new(Dense::new(784, 400)),
        Box::new(Relu::new()),
        Box::new(Dense::new(400, 100)),
        Box::new(Relu::new()),
        Box::new(Dense::new(100, 10)),
    ])
}

/// `bench/torch_train.py --model cnn`'s CNN, layer for layer.
fn cnn() -> Net {
    Net::new(vec![
        Box::new(Conv2d::new(1, 8, 5).padding(2)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Conv2d::new(8, 16, 5).padding(2)),
        Box::new(Relu::new()),
        Box::new(MaxPool2d::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(16 * 7 * 7, 10)),
    ])
}

fn compare(dir: &Path, name: &str, net: Net) -> Result<f64> {
    net.load_safetensors(dir.join(format!("{name}.safetensors")))?;
    let (io, _) = load_tensors(&dir.join(format!("{name}.io.safetensors")))?;
    let got = no_grad(|| Layer::forward(&net, &io["input"], Mode::Eval)).to_vec::<f64>();
    let want = io["output"].to_vec::<f64>();
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let same_class = io["output"].argmax(1).to_vec::<f64>()
        == Layer::forward(&net, &io["input"], Mode::Eval)
            .argmax(1)
            .to_vec::<f64>();
    println!(
        "{name}: {} outputs, largest difference from PyTorch {worst:.2e}, same predicted classes: {same_class}",
        got.len()
    );
    Ok(worst)
}

/// Runs PyTorch's saved models here and compares the outputs.
#[derive(clap::Parser)]
struct Args {
    /// The directory `scripts/export_torch.py` wrote.
    #[arg(default_value = "torch_models")]
    dir: std::path::PathBuf,
}

fn main() -> Result<()> {
    let args = <Args as clap::Parser>::parse();
    let dir = args.dir.as_path();
    compare(dir, "mlp", mlp())?;
    compare(dir, "cnn", cnn())?;
    Ok(())
}
