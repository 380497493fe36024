//! ONNX export (feature `onnx`): the examples' kinds of network written as ONNX models. Each
//! model is written with its input and ferrograd's output at two batch sizes (the traced one
//! and another) to `target/onnx-models`, where `scripts/check-onnx.py` runs them in
//! onnxruntime and compares; here the files are read back and checked for what they must hold.

use std::collections::HashMap;
use std::path::PathBuf;

use ferrograd::graph::trace;
use ferrograd::io::save_tensors;
use ferrograd::onnx::proto::{AttributeProto, ModelProto};
use ferrograd::onnx::{model_of, ExportOptions};
use ferrograd::prelude::*;

use crate::common::{randn_f32, turn};
use prost::Message;

fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx-models");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Exports `f` traced on `x`, and writes the model with `x`, `other` (another batch size)
/// and ferrograd's outputs for both; returns the model's op types.
fn write_case(
    name: &str,
    params: &[(String, Param)],
    x: &Tensor,
    other: &Tensor,
    f: &dyn Fn(&Tensor) -> Tensor,
) -> Vec<String> {
    let t = trace(&[("input", x)], params, |xs| vec![f(&xs[0])]).unwrap();
    let model = model_of(&t, &ExportOptions::default()).unwrap();
    let bytes = model.encode_to_vec();
    std::fs::write(out_dir().join(format!("{name}.onnx")), &bytes).unwrap();
    let io = vec![
        ("input".to_string(), x.clone()),
        ("output".to_string(), f(x)),
        ("input_other".to_string(), other.clone()),
        ("output_other".to_string(), f(other)),
    ];
    save_tensors(
        &out_dir().join(format!("{name}.io.safetensors")),
        &io,
        HashMap::new(),
    )
    .unwrap();
    // Imported again, the model gives ferrograd's outputs at both batch sizes.
    let imported = ferrograd::onnx::from_bytes(&bytes).unwrap();
    for (input, output) in [(0, 1), (2, 3)] {
        let got = imported.run(&[&io[input].1]).unwrap().remove(0);
        let (got, want) = (got.to_vec::<f64>(), io[output].1.to_vec::<f64>());
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{name}: {g} against {w}"
            );
        }
    }
    let back = ModelProto::decode(bytes.as_slice()).unwrap();
    let graph = back.graph.unwrap();
    // Every parameter and buffer is an initializer under its state_dict name (but the count
    // of batches, which evaluation does not read).
    let inits: Vec<String> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.clone())
        .collect();
    for (p, _) in params
        .iter()
        .filter(|(p, _)| !p.ends_with("num_batches_tracked"))
    {
        assert!(
            inits.contains(p),
            "{name}: {p} is not an initializer: {inits:?}"
        );
    }
    graph
        .node
        .iter()
        .filter_map(|n| n.op_type.clone())
        .collect()
}

fn layer_case(name: &str, layer: &dyn Layer, x: &Tensor, other: &Tensor) -> Vec<String> {
    write_case(name, &layer.state_params(), x, other, &|x| {
        layer.forward(x, Mode::Eval)
    })
}

#[test]
fn an_mlp_and_a_cnn_export_with_their_layers_names() {
    let _turn = turn();
    manual_seed(1);
    let mlp = Net::new(vec![
        Box::new(Dense::new(6, 16)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(16, 4)),
        Box::new(Softmax::new(1)),
    ]);
    let ops = layer_case("mlp", &mlp, &randn_f32(&[2, 6], 2), &randn_f32(&[5, 6], 3));
    assert!(ops.contains(&"Gemm".to_string()), "{ops:?}");

    let cnn = Net::new(vec![
        Box::new(Conv2d::new(1, 4, 3).padding(1)),
        Box::new(BatchNorm2d::new(4)),
        Box::new(ReLU::new()),
        Box::new(MaxPool2D::new(2, 2)),
        Box::new(Conv2d::new(4, 8, 3)),
        Box::new(Sigmoid::new()),
        Box::new(Flatten::new()),
        Box::new(Dense::new(8 * 2 * 2, 10)),
    ]);
    let ops = layer_case(
        "cnn",
        &cnn,
        &randn_f32(&[2, 1, 8, 8], 4),
        &randn_f32(&[3, 1, 8, 8], 5),
    );
    for op in ["Conv", "MaxPool", "Flatten"] {
        assert!(ops.contains(&op.to_string()), "{ops:?}");
    }
}

#[test]
fn recurrent_layers_export_as_onnx_recurrent_ops() {
    let _turn = turn();
    manual_seed(6);
    let lstm = Lstm::new(3, 5);
    let ops = layer_case(
        "lstm",
        &lstm,
        &randn_f32(&[2, 4, 3], 7),
        &randn_f32(&[3, 4, 3], 8),
    );
    assert!(ops.contains(&"LSTM".to_string()), "{ops:?}");
    let gru = Gru::new(3, 5);
    let ops = layer_case(
        "gru",
        &gru,
        &randn_f32(&[2, 4, 3], 9),
        &randn_f32(&[3, 4, 3], 10),
    );
    assert!(ops.contains(&"GRU".to_string()), "{ops:?}");
}

#[test]
fn a_generator_and_a_small_gpt_export() {
    let _turn = turn();
    manual_seed(11);
    let generator = Net::new(vec![
        Box::new(ConvTranspose2d::new(4, 3, 4).stride(2).padding(1)),
        Box::new(BatchNorm2d::new(3)),
        Box::new(LeakyReLU::new(0.2)),
        Box::new(Tanh::new()),
    ]);
    let ops = layer_case(
        "generator",
        &generator,
        &randn_f32(&[2, 4, 3, 3], 12),
        &randn_f32(&[1, 4, 3, 3], 13),
    );
    assert!(ops.contains(&"ConvTranspose".to_string()), "{ops:?}");
    let discriminator = Net::new(vec![
        Box::new(Conv2d::new(1, 4, 4).stride(2).padding(1)),
        Box::new(LeakyReLU::new(0.2)),
        Box::new(Conv2d::new(4, 8, 4).stride(2).padding(1)),
        Box::new(BatchNorm2d::new(8)),
        Box::new(LeakyReLU::new(0.2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(8 * 2 * 2, 1)),
        Box::new(Sigmoid::new()),
    ]);
    let ops = layer_case(
        "discriminator",
        &discriminator,
        &randn_f32(&[2, 1, 8, 8], 20),
        &randn_f32(&[4, 1, 8, 8], 21),
    );
    assert!(ops.contains(&"LeakyRelu".to_string()), "{ops:?}");

    let emb = Embedding::new(11, 8);
    let block = TransformerEncoderLayer::new(8, 2)
        .dim_feedforward(16)
        .dropout(0.0)
        .gelu()
        .norm_first(true);
    let head = Dense::new(8, 11);
    let mut params = emb
        .state_params()
        .into_iter()
        .map(|(n, p)| (format!("wte.{n}"), p))
        .collect::<Vec<_>>();
    params.extend(
        block
            .state_params()
            .into_iter()
            .map(|(n, p)| (format!("h.{n}"), p)),
    );
    params.extend(
        head.state_params()
            .into_iter()
            .map(|(n, p)| (format!("lm_head.{n}"), p)),
    );
    let gpt = |ids: &Tensor| {
        let x = emb.forward(ids, Mode::Eval);
        let x = block.forward_masked(&x, Mode::Eval, &Attention::new().causal(true));
        head.forward(&x, Mode::Eval).log_softmax(2)
    };
    let ids = Tensor::from_vec((0..10).map(|i| i % 11).collect::<Vec<i64>>(), &[2, 5]);
    let other = Tensor::from_vec((0..15).map(|i| (i * 7) % 11).collect::<Vec<i64>>(), &[3, 5]);
    let ops = write_case("gpt", &params, &ids, &other, &gpt);
    for op in ["Gather", "LayerNormalization", "Softmax", "Erf"] {
        assert!(ops.contains(&op.to_string()), "{ops:?}");
    }
}

#[test]
fn ops_without_an_onnx_form_are_named_together_and_nothing_is_written() {
    let x = randn_f32(&[2, 4, 6], 14);
    let t = trace(&[("input", &x)], &[], |xs| {
        vec![xs[0].rope(0, 10000.0).cumprod(1)]
    })
    .unwrap();
    let err = model_of(&t, &ExportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("rope") && err.contains("cumprod"), "{err}");
    let unsupported_opset = ExportOptions {
        opset: 9,
        ..ExportOptions::default()
    };
    let t = trace(&[("input", &x)], &[], |xs| vec![xs[0].exp()]).unwrap();
    assert!(model_of(&t, &unsupported_opset).is_err());
}

#[test]
fn an_imported_model_fine_tunes_and_keeps_its_weights_names() {
    let _turn = turn();
    manual_seed(15);
    let mlp = Net::new(vec![
        Box::new(Dense::new(4, 8)),
        Box::new(Tanh::new()),
        Box::new(Dense::new(8, 1)),
    ]);
    let x = randn_f32(&[16, 4], 16);
    let bytes =
        ferrograd::onnx::to_bytes(&mlp, &[("input", &x)], &ExportOptions::default()).unwrap();
    let model = ferrograd::onnx::from_bytes(&bytes).unwrap();
    let names: Vec<String> = model.params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
    let target = x.sum_axes(&[1], true).sin();
    let loss = |m: &dyn Layer| (&m.forward(&x, Mode::Train) - &target).square().mean();
    let first = loss(&model).item();
    let mut opt = Adam::new(0.01);
    for _ in 0..20 {
        let l = loss(&model);
        opt.step(&model.params(), &l.backward());
    }
    let last = loss(&model).item();
    assert!(last < 0.5 * first, "the loss went from {first} to {last}");
}

#[test]
fn operators_that_cannot_run_are_named_together_with_their_nodes() {
    use ferrograd::onnx::proto::{GraphProto, NodeProto};
    let node = |op: &str, name: &str| NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        ..Default::default()
    };
    let model = ModelProto {
        graph: Some(GraphProto {
            node: vec![
                node("Relu", "a"),
                node("NonMaxSuppression", "b"),
                node("Loop", "c"),
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = ferrograd::onnx::from_bytes(&model.encode_to_vec())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("NonMaxSuppression (node \"b\")") && err.contains("Loop (node \"c\")"),
        "{err}"
    );
    assert!(!err.contains("Relu"), "{err}");
    // Bytes that are not a model are an error, not a panic.
    assert!(ferrograd::onnx::from_bytes(&[0xff, 0x01, 0x02]).is_err());
}

/// A fixture of `scripts/make-torch-onnx-fixtures.py`: PyTorch's export and PyTorch's outputs.
fn torch_fixture(name: &str) -> (ferrograd::onnx::OnnxModel, HashMap<String, Tensor>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/onnx");
    let model = ferrograd::onnx::load(dir.join(format!("torch_{name}.onnx"))).unwrap();
    let (io, _) =
        ferrograd::io::load_tensors(&dir.join(format!("torch_{name}.io.safetensors"))).unwrap();
    (model, io)
}

#[test]
fn models_exported_by_pytorch_import_with_pytorchs_outputs() {
    for name in ["mlp", "cnn", "gpt", "mnist_cnn"] {
        let (model, io) = torch_fixture(name);
        for suffix in ["", "_other"] {
            let got = model
                .run(&[&io[&format!("input{suffix}")]])
                .unwrap()
                .remove(0);
            let want = &io[&format!("output{suffix}")];
            assert_eq!(got.shape(), want.shape(), "{name}{suffix}");
            for (g, w) in got.to_vec::<f64>().iter().zip(want.to_vec::<f64>()) {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{name}{suffix}: {g} against {w}"
                );
            }
        }
    }
}

#[test]
fn a_gpt_exported_by_pytorch_fine_tunes() {
    let (model, io) = torch_fixture("gpt");
    let ids = &io["input_other"];
    let names: Vec<String> = model.params().into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"wte.weight".to_string()), "{names:?}");
    // Next-token targets: each position predicts the id after it (the last its own).
    let next = Tensor::cat(&[&ids.narrow(1, 1, 7), &ids.narrow(1, 7, 1)], 1);
    let loss = || {
        let logits = model.run(&[ids]).unwrap().remove(0);
        let logp = logits.log_softmax(2).reshape(&[24, 20]);
        -&logp.gather(1, &next.reshape(&[24, 1])).mean()
    };
    let first = loss().item();
    let mut opt = Adam::new(0.01);
    for _ in 0..5 {
        let l = loss();
        opt.step(&model.params(), &l.backward());
    }
    let last = loss().item();
    assert!(last < first, "the loss went from {first} to {last}");
}

/// A one-node ONNX model of `opset`: inputs `x` (and the initializers given), output `y`.
fn one_node(
    op: &str,
    inputs: &[&str],
    outputs: usize,
    attrs: Vec<AttributeProto>,
    inits: &[(&str, Tensor)],
    opset: i64,
) -> Vec<u8> {
    use ferrograd::onnx::proto::{GraphProto, NodeProto, OperatorSetIdProto, ValueInfoProto};
    let tensor = |name: &str, t: &Tensor| ferrograd::onnx::proto::TensorProto {
        name: Some(name.into()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(if t.dtype() == DType::I64 { 7 } else { 1 }),
        int64_data: if t.dtype() == DType::I64 {
            t.to_vec::<i64>()
        } else {
            vec![]
        },
        float_data: if t.dtype() == DType::I64 {
            vec![]
        } else {
            t.to_vec::<f32>()
        },
        ..Default::default()
    };
    let outs: Vec<String> = (0..outputs).map(|k| format!("y{k}")).collect();
    let graph = GraphProto {
        node: vec![NodeProto {
            op_type: Some(op.into()),
            name: Some("n".into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outs.clone(),
            attribute: attrs,
            ..Default::default()
        }],
        initializer: inits.iter().map(|(n, t)| tensor(n, t)).collect(),
        input: vec![ValueInfoProto {
            name: Some("x".into()),
            ..Default::default()
        }],
        output: outs
            .iter()
            .map(|o| ValueInfoProto {
                name: Some(o.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    ModelProto {
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        ..Default::default()
    }
    .encode_to_vec()
}

fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(2),
        i: Some(v),
        ..Default::default()
    }
}

fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(1),
        f: Some(v),
        ..Default::default()
    }
}

fn run_one(bytes: &[u8], x: &Tensor) -> ferrograd::Result<Vec<Tensor>> {
    ferrograd::onnx::from_bytes(bytes)?.run(&[x])
}

#[test]
fn imported_operators_follow_their_opsets_and_onnxs_rules() {
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0], &[5]);
    // Split without sizes: as many equal parts as the node has outputs (opset 13).
    let y = run_one(&one_node("Split", &["x"], 2, vec![], &[], 13), &x).unwrap();
    assert_eq!(
        (y[0].to_vec::<f32>(), y[1].to_vec::<f32>()),
        (vec![0.0, 1.0, 2.0], vec![3.0, 4.0])
    );
    // Backwards, a start before the first entry is clamped to it.
    let ints = |v: Vec<i64>| Tensor::from_vec(v, &[1]);
    let slice = one_node(
        "Slice",
        &["x", "s", "e", "a", "t"],
        1,
        vec![],
        &[
            ("s", ints(vec![-100])),
            ("e", ints(vec![i64::MIN])),
            ("a", ints(vec![0])),
            ("t", ints(vec![-1])),
        ],
        13,
    );
    assert_eq!(run_one(&slice, &x).unwrap()[0].to_vec::<f32>(), vec![0.0]);
    // Clip's bounds are attributes before opset 11.
    let clip = one_node(
        "Clip",
        &["x"],
        1,
        vec![attr_f("min", 1.0), attr_f("max", 3.0)],
        &[],
        6,
    );
    assert_eq!(
        run_one(&clip, &x).unwrap()[0].to_vec::<f32>(),
        vec![1.0, 1.0, 2.0, 3.0, 3.0]
    );
    // Softmax before opset 13 flattens at axis 1: the rows of [2, 2, 2] sum to 1 over 4.
    let sm = one_node("Softmax", &["x"], 1, vec![], &[], 11);
    let y = run_one(&sm, &Tensor::zeros(&[2, 2, 2], DType::F32))
        .unwrap()
        .remove(0);
    assert_eq!(y.to_vec::<f32>(), vec![0.25; 8]);
    // Integer division truncates toward zero.
    let div = one_node("Div", &["x", "d"], 1, vec![], &[("d", ints(vec![2]))], 13);
    let y = run_one(&div, &Tensor::from_vec(vec![-7i64, 7], &[2]))
        .unwrap()
        .remove(0);
    assert_eq!(y.to_vec::<i64>(), vec![-3, 3]);
    // A setting the operator does not read is refused, not ignored.
    let argmax = one_node(
        "ArgMax",
        &["x"],
        1,
        vec![attr_i("select_last_index", 1)],
        &[],
        13,
    );
    let err = run_one(&argmax, &x).unwrap_err().to_string();
    assert!(err.contains("select_last_index"), "{err}");
}

#[test]
fn batch_norms_statistics_are_state_and_a_batch_fixed_export_is_refused() {
    let _turn = turn();
    manual_seed(17);
    let cnn = Net::new(vec![
        Box::new(Conv2d::new(1, 2, 3)),
        Box::new(BatchNorm2d::new(2)),
    ]);
    let x = randn_f32(&[2, 1, 4, 4], 18);
    let t = trace(&[("input", &x)], &cnn.state_params(), |xs| {
        vec![Layer::forward(&cnn, &xs[0], Mode::Eval)]
    })
    .unwrap();
    let mut model = model_of(&t, &ExportOptions::default()).unwrap();
    // As PyTorch writes it: one BatchNormalization node (ferrograd's own export spells it out).
    let graph = model.graph.as_mut().unwrap();
    let conv_out = graph
        .node
        .iter()
        .find(|n| n.op_type() == "Conv")
        .unwrap()
        .output[0]
        .clone();
    graph.node.retain(|n| n.op_type() == "Conv");
    graph.node.push(ferrograd::onnx::proto::NodeProto {
        op_type: Some("BatchNormalization".into()),
        input: ["1.weight", "1.bias", "1.running_mean", "1.running_var"]
            .iter()
            .fold(vec![conv_out], |mut v, s| {
                v.push(s.to_string());
                v
            }),
        output: vec!["output".into()],
        ..Default::default()
    });
    let imported = ferrograd::onnx::from_bytes(&model.encode_to_vec()).unwrap();
    let names: Vec<String> = imported.params().into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"1.weight".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("running")), "{names:?}");

    // A layer that adds a constant of the traced batch size cannot have a free batch axis.
    struct FixedBatch;
    impl Module for FixedBatch {}
    impl Layer for FixedBatch {
        fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
            x + &Tensor::ones(&[2, 1], DType::F32)
        }
    }
    let x = randn_f32(&[2, 3], 19);
    let err = ferrograd::onnx::to_bytes(&FixedBatch, &[("input", &x)], &ExportOptions::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("depend on the batch size"),
        "{err}"
    );
    let fixed = ExportOptions {
        dynamic_batch: false,
        ..ExportOptions::default()
    };
    assert!(ferrograd::onnx::to_bytes(&FixedBatch, &[("input", &x)], &fixed).is_ok());
}

#[test]
fn a_graph_with_a_comparison_to_a_number_exports() {
    let g = ferrograd::graph::Graph::new();
    let x = g.placeholder_with("input", &[Some(3)], DType::F32);
    let y = x.gt_scalar(0.5);
    let t = ferrograd::graph::Trace {
        graph: g,
        inputs: vec![x],
        outputs: vec![y],
    };
    let bytes = ferrograd::onnx::bytes_of(&t, &ExportOptions::default()).unwrap();
    let v = Tensor::from_vec(vec![0.0f32, 1.0, 0.4], &[3]);
    assert_eq!(
        run_one(&bytes, &v).unwrap()[0].to_vec::<f32>(),
        vec![0.0, 1.0, 0.0]
    );
}
