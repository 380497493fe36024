//! Graphs traced from eager code: layers and a transformer run once eagerly, recorded as a
//! graph, give eager's values to the bit when the graph runs on other inputs; what cannot be
//! recorded is named.

use ferrograd::graph::{trace, Feed, Session, Trace};
use ferrograd::prelude::*;

use crate::common::{panic_message, randn_f32, turn};

/// Runs a traced graph on `inputs`.
fn run(t: &Trace, inputs: &[&Tensor]) -> Vec<Tensor> {
    let mut feed = Feed::new();
    for (node, x) in t.inputs.iter().zip(inputs) {
        feed = feed.with(node, (*x).clone());
    }
    let mut sess = Session::new(&t.graph);
    t.outputs
        .iter()
        .map(|o| sess.run(o, &feed).unwrap())
        .collect()
}

/// Traces `layer` on `x`, then checks the graph against eager on another input.
fn traced_layer_matches_eager(layer: &dyn Layer, x: &Tensor, other: &Tensor) -> Trace {
    let t = trace(&[("x", x)], &layer.state_params(), |xs| {
        vec![layer.forward(&xs[0], Mode::Eval)]
    })
    .unwrap();
    let want = layer.forward(other, Mode::Eval);
    assert_eq!(run(&t, &[other])[0].to_vec::<f32>(), want.to_vec::<f32>());
    t
}

#[test]
fn a_traced_mlp_gives_eagers_values_on_new_inputs() {
    let _turn = turn();
    manual_seed(1);
    let net = Net::new(vec![
        Box::new(Dense::new(4, 8)),
        Box::new(ReLU::new()),
        Box::new(Dense::new(8, 3)),
        Box::new(Softmax::new(1)),
    ]);
    let t = traced_layer_matches_eager(&net, &randn_f32(&[5, 4], 2), &randn_f32(&[5, 4], 3));
    let listing = t.graph.to_string();
    // The layers' parameters are variables under their state_dict names.
    for name in ["0.weight", "0.bias", "2.weight", "2.bias"] {
        assert!(
            listing.contains(&format!("variable \"{name}\"")),
            "{listing}"
        );
    }
}

#[test]
fn a_traced_cnn_and_a_transformer_layer_give_eagers_values() {
    let _turn = turn();
    manual_seed(4);
    let cnn = Net::new(vec![
        Box::new(Conv2D::new(1, 4, 3).padding(1)),
        Box::new(BatchNorm2d::new(4)),
        Box::new(ReLU::new()),
        Box::new(MaxPool2D::new(2, 2)),
        Box::new(Flatten::new()),
        Box::new(Dense::new(4 * 4 * 4, 10)),
    ]);
    traced_layer_matches_eager(
        &cnn,
        &randn_f32(&[2, 1, 8, 8], 5),
        &randn_f32(&[2, 1, 8, 8], 6),
    );

    let enc = TransformerEncoderLayer::new(8, 2)
        .dim_feedforward(16)
        .dropout(0.0)
        .gelu()
        .norm_first(true);
    traced_layer_matches_eager(&enc, &randn_f32(&[2, 5, 8], 7), &randn_f32(&[2, 5, 8], 8));
}

#[test]
fn a_traced_embedding_keeps_its_ids_an_input() {
    let _turn = turn();
    manual_seed(9);
    // With a padding row too, traced on ids that hold it.
    for emb in [Embedding::new(10, 4), Embedding::new(10, 4).padding_idx(3)] {
        let ids = Tensor::from_vec(vec![1i64, 7, 3], &[3]);
        let other = Tensor::from_vec(vec![9i64, 0, 0], &[3]);
        let t = trace(&[("ids", &ids)], &emb.state_params(), |xs| {
            vec![emb.forward(&xs[0], Mode::Eval)]
        })
        .unwrap();
        let want = emb.forward(&other, Mode::Eval);
        assert_eq!(run(&t, &[&other])[0].to_vec::<f32>(), want.to_vec::<f32>());
    }
}

#[test]
fn ops_with_several_outputs_and_causal_attention_trace() {
    let _turn = turn();
    manual_seed(10);
    let (q, k, v) = (
        randn_f32(&[2, 4, 3], 11),
        randn_f32(&[2, 4, 3], 12),
        randn_f32(&[2, 4, 3], 13),
    );
    let f = |xs: &[Tensor]| {
        let a = xs[0].scaled_dot_product_attention(&xs[1], &xs[2], &Attention::new().causal(true));
        let (top, at) = a.topk_along(2, 2, true);
        vec![top, at, a.cumsum(1).narrow(2, 1, 2)]
    };
    let t = trace(&[("q", &q), ("k", &k), ("v", &v)], &[], f).unwrap();
    let (q2, k2, v2) = (
        randn_f32(&[2, 4, 3], 14),
        randn_f32(&[2, 4, 3], 15),
        randn_f32(&[2, 4, 3], 16),
    );
    let got = run(&t, &[&q2, &k2, &v2]);
    let want = f(&[q2, k2, v2]);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.to_vec::<f64>(), w.to_vec::<f64>());
    }
}

#[test]
fn an_op_the_trace_cannot_record_is_named() {
    let x = randn_f32(&[3], 17);
    let err = trace(&[("x", &x)], &[], |xs| {
        let y = custom_gradient_named("clipped_identity", &[&xs[0]], |a| {
            (a[0].clone(), |up: &Tensor| vec![up.clamp(-1.0, 1.0)])
        });
        vec![y.exp()]
    })
    .err()
    .expect("a custom function has no graph form");
    assert!(err.to_string().contains("clipped_identity"), "{err}");
}

#[test]
fn a_trace_inside_a_trace_is_seen_by_both_and_tracing_ends_after_a_panic() {
    let x = randn_f32(&[2], 18);
    let outer = trace(&[("x", &x)], &[], |xs| {
        let inner = trace(&[("y", &xs[0])], &[], |ys| vec![ys[0].exp()]).unwrap();
        assert_eq!(inner.graph.len(), 2, "{}", inner.graph); // y, exp
        vec![xs[0].sin()]
    })
    .unwrap();
    // The outer trace noted the inner's ops as well as its own.
    let ops: Vec<String> = (0..outer.graph.len())
        .map(|i| outer.graph.node_data(i).op.name())
        .collect();
    assert!(
        ops.contains(&"exp".to_string()) && ops.contains(&"sin".to_string()),
        "{ops:?}"
    );
    let message = panic_message(|| {
        trace(&[("x", &x)], &[], |_| panic!("on purpose")).ok();
    });
    assert_eq!(message, "on purpose");
    // The thread traces again afterwards.
    assert!(trace(&[("x", &x)], &[], |xs| vec![xs[0].exp()]).is_ok());
}

/// The Rust sources of a folder and its subfolders, one string.
fn sources_in(dir: &std::path::Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources_in(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            *out += &std::fs::read_to_string(&path).unwrap();
        }
    }
}

#[test]
fn every_declared_op_is_noted_by_its_eager_method() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let table = std::fs::read_to_string(src.join("graph/table.rs")).unwrap();
    // The variants: lines `    Name "name" {` of the declarations.
    let variants: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()) && l.contains(" \""))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(variants.len() > 60, "the scan found only {variants:?}");
    let mut eager = String::new();
    sources_in(&src.join("ops"), &mut eager);
    sources_in(&src.join("tensor"), &mut eager);
    // Read without whitespace: a call may be wrapped over lines.
    let eager: String = eager.split_whitespace().collect();
    // Declared ops that eager code never calls as one op, and why; the element-wise tables
    // note theirs as "Unary" and "Binary".
    let outside = [(
        "CompareScalar",
        "an eager comparison with a number is a binary op against a constant",
    )];
    let missing: Vec<&&str> = variants
        .iter()
        .filter(|v| !outside.iter().any(|(name, _)| name == *v))
        .filter(|v| !eager.contains(&format!("trace::op(\"{v}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "declared ops no eager method notes for a trace: {missing:?}"
    );
}
