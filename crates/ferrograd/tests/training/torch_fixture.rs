//! A CNN trained and saved by PyTorch 2.11 (`scripts/export_torch.py`: Conv2d, ReLU,
//! MaxPool2d, Conv2d, ReLU, MaxPool2d, Flatten, Linear, `safetensors.torch.save_file` of its
//! state_dict, with eight inputs and PyTorch's outputs for them) loads into the same structure
//! and computes PyTorch's outputs.

use std::path::Path;

use ferrograd::io::load_tensors;
use ferrograd::prelude::*;

#[test]
fn a_cnn_saved_by_pytorch_computes_pytorchs_outputs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let net = Net::new(vec![
        Box::new(Conv2D::new(1, 8, 5).padding(2)),
        Box::new(ReLU::new()),
        Box::new(MaxPool2D::new(2, 2)),
        Box::new(Conv2D::new(8, 16, 5).padding(2)),
        Box::new(ReLU::new()),
        Box::new(MaxPool2D::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(16 * 7 * 7, 10)),
    ]);
    net.load_safetensors(dir.join("torch_cnn.safetensors"))
        .unwrap();
    let (io, _) = load_tensors(&dir.join("torch_cnn.io.safetensors")).unwrap();
    assert_eq!(io["input"].shape(), &[8, 1, 28, 28]);
    let got = no_grad(|| Layer::forward(&net, &io["input"], Mode::Eval));
    assert_eq!(got.shape(), &[8, 10]);
    for (a, b) in got.to_vec::<f32>().iter().zip(io["output"].to_vec::<f32>()) {
        assert!((a - b).abs() < 1e-5, "{a} vs PyTorch's {b}");
    }
}
