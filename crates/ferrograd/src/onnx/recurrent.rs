//! Recurrent layers as ONNX's `LSTM`, `GRU` and `RNN`, time-major (the `layout=0` that every
//! runtime implements) between transposes of ferrograd's batch-first values. ferrograd
//! keeps PyTorch's weight layouts and gate orders (LSTM i, f, g, o; GRU r, z, n); ONNX orders
//! them i, o, f, c and z, r, h, and stacks the two biases. The weights stay initializers under
//! their own names; the reordering is nodes of the exported graph.

use super::emit::{int, Emitter};
use crate::graph::Op;

/// The gate blocks of a `[G·H, ..]` weight (or `[G·H]` bias) put in ONNX's order, with a
/// leading direction axis.
fn reorder(e: &mut Emitter<'_>, w: &str, hidden: usize, order: &[usize]) -> String {
    let sizes = e.ints(&vec![hidden as i64; order.len()]);
    let parts = e.node_n("Split", &[w, &sizes], vec![int("axis", 0)], order.len());
    let ordered: Vec<&str> = order.iter().map(|&k| parts[k].as_str()).collect();
    let joined = e.node("Concat", &ordered, vec![int("axis", 0)]);
    let zero = e.ints(&[0]);
    e.node("Unsqueeze", &[&joined, &zero], vec![])
}

/// A state `[N, H]` as ONNX's `[1, N, H]` (one direction).
fn state_in(e: &mut Emitter<'_>, h: &str) -> String {
    let zero = e.ints(&[0]);
    e.node("Unsqueeze", &[h, &zero], vec![])
}

/// `[N, T, ..]` and `[T, N, ..]` into each other.
fn swap_batch_and_time(e: &mut Emitter<'_>, x: &str) -> String {
    e.node(
        "Transpose",
        &[x],
        vec![super::emit::ints("perm", &[1, 0, 2])],
    )
}

/// Drops ONNX's direction axis from an output.
fn squeeze(e: &mut Emitter<'_>, y: &str, axis: i64) -> String {
    let a = e.ints(&[axis]);
    e.node("Squeeze", &[y, &a], vec![])
}

/// The layer's ONNX node; `x` holds the input, the states, then `w_ih, w_hh, b_ih, b_hh`.
fn layer(
    e: &mut Emitter<'_>,
    i: usize,
    op: &str,
    x: &[&str],
    states: usize,
    order: &[usize],
) -> Vec<String> {
    let h0 = e.nodes[i].inputs[1];
    let hidden = *e.shape(h0).last().expect("a state has a hidden axis");
    let w = &x[1 + states..];
    let (wi, wh) = (
        reorder(e, w[0], hidden, order),
        reorder(e, w[1], hidden, order),
    );
    let (bi, bh) = (
        reorder(e, w[2], hidden, order),
        reorder(e, w[3], hidden, order),
    );
    let b = e.node("Concat", &[&bi, &bh], vec![int("axis", 1)]);
    let time_major = swap_batch_and_time(e, x[0]);
    let mut inputs: Vec<String> = vec![time_major, wi, wh, b, String::new()];
    for (k, s) in x[1..1 + states].iter().enumerate() {
        // A zero state is ONNX's default: leaving it out keeps the batch size free.
        let zero = match &e.nodes[e.nodes[i].inputs[1 + k]].op {
            Op::Constant(t) => t.to_vec::<f64>().iter().all(|&v| v == 0.0),
            _ => false,
        };
        inputs.push(if zero { String::new() } else { state_in(e, s) });
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let mut attrs = vec![int("hidden_size", hidden as i64)];
    if op == "GRU" {
        // PyTorch applies the reset gate after the hidden projection.
        attrs.push(int("linear_before_reset", 1));
    }
    let outs = e.node_n(op, &refs, attrs, 1 + states);
    // Y is [T, 1, N, H]; the states [1, N, H].
    let y = squeeze(e, &outs[0], 1);
    let mut named = vec![swap_batch_and_time(e, &y)];
    for s in &outs[1..] {
        named.push(squeeze(e, s, 0));
    }
    named
}

/// `Lstm`: the outputs, the last state and the last cell.
pub(super) fn lstm(e: &mut Emitter<'_>, i: usize, x: &[&str]) -> Vec<String> {
    layer(e, i, "LSTM", x, 2, &[0, 3, 1, 2])
}

/// `Gru`: the outputs and the last state.
pub(super) fn gru(e: &mut Emitter<'_>, i: usize, x: &[&str]) -> Vec<String> {
    layer(e, i, "GRU", x, 1, &[1, 0, 2])
}

/// `RnnTanh`: the outputs and the last state.
pub(super) fn rnn(e: &mut Emitter<'_>, i: usize, x: &[&str]) -> Vec<String> {
    layer(e, i, "RNN", x, 1, &[0])
}
