//! A whole recurrent layer over a batch-first sequence as one op: the step loop runs inside the
//! kernel (`kernels::sequence::sequence_forward`), and the rule runs it backwards.

use crate::tensor::trace::{self, attrs};
use std::borrow::Cow;

use super::*;
use crate::kernels::sequence::{self as ks, SeqForward, SeqSizes, Weights};
use crate::tensor::numel_or_panic;

/// Panics naming `op` unless `x` is `[N, T, in]`, the states `[N, H]` and the weights have
/// PyTorch's layouts for `gates` gate blocks, all of one dtype; returns the sizes.
fn sizes(
    op: &str,
    gates: usize,
    x: &Tensor,
    states: &[&Tensor],
    w: RecurrentWeights<'_>,
) -> SeqSizes {
    let (xs, hs) = (x.shape(), states[0].shape());
    let sz = SeqSizes {
        n: xs.first().copied().unwrap_or(0),
        t: xs.get(1).copied().unwrap_or(0),
        input: xs.get(2).copied().unwrap_or(0),
        hidden: hs.get(1).copied().unwrap_or(0),
    };
    let g = gates.saturating_mul(sz.hidden);
    let ok = xs.len() == 3
        && states.iter().all(|s| s.shape() == [sz.n, sz.hidden])
        && w.w_ih.shape() == [g, sz.input]
        && w.w_hh.shape() == [g, sz.hidden]
        && w.b_ih.shape() == [g]
        && w.b_hh.shape() == [g];
    let all = [x, w.w_ih, w.w_hh, w.b_ih, w.b_hh]
        .into_iter()
        .chain(states.iter().copied());
    let dtypes: Vec<DType> = all.map(|t| t.dtype()).collect();
    assert!(
        ok && dtypes.iter().all(|&d| d == x.dtype()),
        "{op}: expected input [N, T, in], states [N, H], weight_ih [{gates}·H, in], weight_hh \
         [{gates}·H, H], biases [{gates}·H], one dtype; got input {xs:?}, states {:?}, \
         weight_ih {:?}, weight_hh {:?}, biases {:?} and {:?}, dtypes {dtypes:?}",
        states
            .iter()
            .map(|s| s.shape().to_vec())
            .collect::<Vec<_>>(),
        w.w_ih.shape(),
        w.w_hh.shape(),
        w.b_ih.shape(),
        w.b_hh.shape()
    );
    // The buffers of every step's gates: sizes that overflow are refused here, by name.
    numel_or_panic(op, &[sz.t.saturating_add(1), sz.n, g.max(1)]);
    sz
}

/// The packed output: `out [N, T, H]`, then `h_n`, then `c_n` (cells with one), flat.
fn pack<C: Cell, T: FloatElement>(fwd: &SeqForward<T>, sz: SeqSizes) -> Vec<T> {
    let mut packed = Vec::with_capacity((sz.t + 2) * sz.n * sz.hidden);
    for row in 0..sz.n {
        (1..=sz.t).for_each(|step| packed.extend_from_slice(fwd.h(step, row)));
    }
    (0..sz.n).for_each(|row| packed.extend_from_slice(fwd.h(sz.t, row)));
    if C::HAS_C {
        (0..sz.n).for_each(|row| packed.extend_from_slice(fwd.c(sz.t, row)));
    }
    packed
}

/// The weights among `[x, h0, (c0,) w_ih, w_hh, b_ih, b_hh]`'s data.
fn weights<'a, T, C: Cell>(d: &'a [Cow<'a, [T]>]) -> Weights<'a, T>
where
    [T]: ToOwned,
{
    let k = usize::from(C::HAS_C);
    Weights {
        w_ih: &d[2 + k],
        w_hh: &d[3 + k],
        b_ih: &d[4 + k],
        b_hh: &d[5 + k],
    }
}

/// Runs the layer and records it; `inputs` are `[x, h0, (c0,) w_ih, w_hh, b_ih, b_hh]`.
fn run<C: CellOps, T: FloatElement>(inputs: &[&Tensor], sz: SeqSizes) -> Tensor {
    let fwd = {
        let data: Vec<_> = inputs.iter().map(|t| t.contiguous_data::<T>()).collect();
        let c0: &[T] = if C::HAS_C { &data[2] } else { &[] };
        ks::sequence_forward::<C, T>(&data[0], [&data[1], c0], weights::<T, C>(&data), sz)
    };
    let k = usize::from(C::HAS_C);
    let packed = Tensor::from_data(pack::<C, T>(&fwd, sz), &[(sz.t + 1 + k) * sz.n * sz.hidden]);
    record(C::NAME, packed, inputs, move |ctx, up| {
        let grads = if is_grad_enabled() {
            composite_backward::<C>(ctx.inputs, up, sz)
        } else {
            let data: Vec<_> = ctx
                .inputs
                .iter()
                .map(|t| t.contiguous_data::<T>())
                .collect();
            fused_backward::<C, T>(&data[0], &fwd, weights::<T, C>(&data), up, sz)
        };
        grads
            .into_iter()
            .enumerate()
            .map(|(i, g)| ctx.needs(i).then_some(g))
            .collect()
    })
}

/// The fused rule: one gradient per input, in the order of `run`'s inputs.
fn fused_backward<C: Cell, T: FloatElement>(
    x: &[T],
    fwd: &SeqForward<T>,
    w: Weights<'_, T>,
    up: &Tensor,
    sz: SeqSizes,
) -> Vec<Tensor> {
    let SeqSizes {
        n,
        t,
        input,
        hidden,
    } = sz;
    let (state, outs) = (n * hidden, n * t * hidden);
    let up = up.contiguous_data::<T>();
    let dc_n: &[T] = if C::HAS_C {
        &up[outs + state..][..state]
    } else {
        &[]
    };
    let g = ks::sequence_backward::<C, T>(x, fwd, w, sz, [&up[..outs], &up[outs..][..state], dc_n]);
    let gates = C::GATES * hidden;
    let mut grads = vec![
        Tensor::from_data(g.dx, &[n, t, input]),
        Tensor::from_data(g.dh0, &[n, hidden]),
    ];
    if C::HAS_C {
        grads.push(Tensor::from_data(g.dc0, &[n, hidden]));
    }
    grads.extend([
        Tensor::from_data(g.dw_ih, &[gates, input]),
        Tensor::from_data(g.dw_hh, &[gates, hidden]),
        Tensor::from_data(g.db_ih, &[gates]),
        Tensor::from_data(g.db_hh, &[gates]),
    ]);
    grads
}

/// The same derivative in tensor ops on the (tracked) inputs, differentiable again: the steps
/// are recomputed with the step ops and the loop runs backwards through time.
fn composite_backward<C: CellOps>(inputs: &[Tensor], up: &Tensor, sz: SeqSizes) -> Vec<Tensor> {
    let SeqSizes { n, t, hidden, .. } = sz;
    let k = usize::from(C::HAS_C);
    let (x, h0) = (&inputs[0], &inputs[1]);
    let [w_ih, w_hh, b_ih, b_hh] = [2, 3, 4, 5].map(|i| &inputs[i + k]);
    let c0 = if C::HAS_C {
        inputs[2].clone()
    } else {
        h0.clone()
    };
    let (state, outs) = (n * hidden, n * t * hidden);
    let up_out = up.narrow(0, 0, outs).reshape(&[n, t, hidden]);
    let mut dh = up.narrow(0, outs, state).reshape(&[n, hidden]);
    let mut dc = up.narrow(0, outs + k * state, state).reshape(&[n, hidden]);
    // The forward pass again, keeping each step's projections and previous states.
    let (mut steps, mut h, mut c) = (Vec::with_capacity(t), h0.clone(), c0.clone());
    for s in 0..t {
        let x_t = x.narrow(1, s, 1).squeeze(1);
        let gi = &x_t.matmul(&w_ih.t()) + b_ih;
        let gh = &h.matmul(&w_hh.t()) + b_hh;
        let packed = step_op::<C>(C::NAME, &gi, &gh, if C::HAS_C { &c } else { &h });
        steps.push((x_t, gi, gh, h, c.clone()));
        h = packed.plane(0);
        if C::HAS_C {
            c = packed.plane(1);
        }
    }
    let zeros = |shape: &[usize]| Tensor::zeros(shape, x.dtype());
    let (mut dw_ih, mut dw_hh) = (zeros(w_ih.shape()), zeros(w_hh.shape()));
    let (mut db_ih, mut db_hh) = (zeros(b_ih.shape()), zeros(b_hh.shape()));
    let mut dxs = Vec::with_capacity(t);
    for (s, (x_t, gi, gh, h_prev, c_prev)) in steps.iter().enumerate().rev() {
        dh = &dh + &up_out.narrow(1, s, 1).squeeze(1);
        let state_prev = if C::HAS_C { c_prev } else { h_prev };
        let [dgi, dgh, direct, dc_prev] = (C::COMPOSITE)(gi, gh, [h_prev, state_prev], [&dh, &dc]);
        let (dgi, dgh) = (
            dgi.expect("every cell has dgi"),
            dgh.expect("every cell has dgh"),
        );
        dxs.push(dgi.matmul(w_ih));
        dw_ih = &dw_ih + &dgi.t().matmul(x_t);
        db_ih = &db_ih + &dgi.sum_axes(&[0], false);
        dw_hh = &dw_hh + &dgh.t().matmul(h_prev);
        db_hh = &db_hh + &dgh.sum_axes(&[0], false);
        dh = dgh.matmul(w_hh);
        if let Some(direct) = direct {
            dh = &dh + &direct;
        }
        if let Some(d) = dc_prev {
            dc = d;
        }
    }
    dxs.reverse();
    let dx = if t == 0 {
        zeros(x.shape())
    } else {
        Tensor::stack(&dxs.iter().collect::<Vec<_>>(), 1)
    };
    let mut grads = vec![dx, dh];
    if C::HAS_C {
        grads.push(dc);
    }
    grads.extend([dw_ih, dw_hh, db_ih, db_hh]);
    grads
}

/// The output `[N, T, H]` and final states of a packed result.
fn unpack(packed: &Tensor, sz: SeqSizes, has_c: bool) -> (Tensor, Tensor, Option<Tensor>) {
    let (state, outs) = (sz.n * sz.hidden, sz.n * sz.t * sz.hidden);
    let piece = |at: usize| packed.narrow(0, at, state).reshape(&[sz.n, sz.hidden]);
    (
        packed.narrow(0, 0, outs).reshape(&[sz.n, sz.t, sz.hidden]),
        piece(outs),
        has_c.then(|| piece(outs + state)),
    )
}

/// Checks, runs and unpacks a layer of cell `C`.
fn layer<C: CellOps>(
    x: &Tensor,
    states: &[&Tensor],
    w: RecurrentWeights<'_>,
) -> (Tensor, Tensor, Option<Tensor>) {
    let sz = sizes(C::NAME, C::GATES, x, states, w);
    let mut inputs: Vec<&Tensor> = std::iter::once(x).chain(states.iter().copied()).collect();
    inputs.extend([w.w_ih, w.w_hh, w.b_ih, w.b_hh]);
    if sz.n * sz.hidden == 0 {
        // No state to carry (an empty batch or no hidden units): every output is empty, and
        // the loop over the steps would have nothing to do, however many steps there are.
        // The empty result is still recorded on the inputs, with zero gradients, so that a
        // backward through it works as through any other batch (a data-parallel rank can
        // get an empty shard).
        let empty = Tensor::zeros(&[0], x.dtype());
        let packed = record(C::NAME, empty, &inputs, |ctx, _| {
            (0..ctx.inputs.len())
                .map(|i| ctx.needs(i).then(|| ctx.inputs[i].zeros_like()))
                .collect()
        });
        return unpack(&packed, sz, C::HAS_C);
    }
    let packed = with_dtype!(x.dtype(), T => run::<C, T>(&inputs, sz));
    unpack(&packed, sz, C::HAS_C)
}

impl Tensor {
    /// One LSTM layer over this batch-first sequence `[N, T, in]` from the states `h0`, `c0`
    /// (`[N, H]`), with PyTorch's weight layouts and gate order (i, f, g, o): the outputs
    /// `[N, T, H]` and the last states `h_n`, `c_n`. One op: the steps run inside a fused
    /// kernel, one matrix product each.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// use ferrograd::RecurrentWeights;
    /// let (n, t, input, h) = (2, 5, 3, 4);
    /// let w = |shape: &[usize]| Tensor::full(shape, 0.1, DType::F32);
    /// let (w_ih, w_hh, b) = (w(&[4 * h, input]), w(&[4 * h, h]), w(&[4 * h]));
    /// let weights = RecurrentWeights { w_ih: &w_ih, w_hh: &w_hh, b_ih: &b, b_hh: &b };
    /// let x = Tensor::ones(&[n, t, input], DType::F32);
    /// let zeros = Tensor::zeros(&[n, h], DType::F32);
    /// let (out, h_n, c_n) = x.lstm(&zeros, &zeros, weights);
    /// assert_eq!((out.shape(), h_n.shape(), c_n.shape()), (&[2, 5, 4][..], &[2, 4][..], &[2, 4][..]));
    /// ```
    pub fn lstm(
        &self,
        h0: &Tensor,
        c0: &Tensor,
        w: RecurrentWeights<'_>,
    ) -> (Tensor, Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("lstm");
        let inputs = [self, h0, c0, w.w_ih, w.w_hh, w.b_ih, w.b_hh];
        trace::op("Lstm", attrs![], &inputs, || {
            let (out, h, c) = layer::<LstmCell>(self, &[h0, c0], w);
            (out, h, c.expect("the LSTM has a cell state"))
        })
    }

    /// One GRU layer over this batch-first sequence `[N, T, in]` from the state `h0` (`[N, H]`),
    /// with PyTorch's weight layouts and gate order (r, z, n): the outputs `[N, T, H]` and the
    /// last state. One op, as [`Tensor::lstm`].
    pub fn gru(&self, h0: &Tensor, w: RecurrentWeights<'_>) -> (Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("gru");
        let inputs = [self, h0, w.w_ih, w.w_hh, w.b_ih, w.b_hh];
        trace::op("Gru", attrs![], &inputs, || {
            let (out, h, _) = layer::<GruCell>(self, &[h0], w);
            (out, h)
        })
    }

    /// One Elman RNN layer (`h' = tanh(x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh)`) over this
    /// batch-first sequence `[N, T, in]` from `h0` (`[N, H]`): the outputs `[N, T, H]` and the
    /// last state. One op, as [`Tensor::lstm`].
    pub fn rnn_tanh(&self, h0: &Tensor, w: RecurrentWeights<'_>) -> (Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("rnn_tanh");
        let inputs = [self, h0, w.w_ih, w.w_hh, w.b_ih, w.b_hh];
        trace::op("RnnTanh", attrs![], &inputs, || {
            let (out, h, _) = layer::<TanhCell>(self, &[h0], w);
            (out, h)
        })
    }
}
