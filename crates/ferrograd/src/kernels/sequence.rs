//! Whole recurrent layers over a sequence: one matrix product and one fused cell
//! (`kernels::cells`) per step, and the derivative running the steps backwards.
//!
//! The rows of a batch are independent, so each thread carries its own part of the batch
//! through the whole sequence: no synchronisation per step. Inputs and outputs stay
//! batch-major; the states and what the cells save are time-major, so that a step's rows are
//! one block.
//!
//! How a step's gate pre-activations are formed depends on the cell ([`StepWeights`]): a cell
//! that reads only `gi + gh` (the LSTM, the Elman RNN) gets one product per step,
//! `[x_t | h | 1]` by the stacked `[W_ihᵀ; W_hhᵀ; b_ih + b_hh]`; going back, one product by
//! `[W_ih | W_hh]` gives `dx_t` with `dh`, and after the loop one product of the gate
//! gradients by the kept rows `[x_t | h]` gives both weight gradients. The GRU, which reads
//! `gh` apart, projects every step's input in one product before the loop and
//! multiplies by `W_hh` at each step, as PyTorch and cuDNN do.

use std::borrow::Cow;
use std::ops::Range;

use super::cells::{row, Cell, StepGrads, StepIn};
use super::lined::Lined;
use super::matmul::{gemm_batch, MatRef};
use super::parallel::run_tasks;
use super::Float;

/// The sizes of a sequence: batch, steps, input width, hidden width.
#[derive(Clone, Copy, Debug)]
pub struct SeqSizes {
    pub n: usize,
    pub t: usize,
    pub input: usize,
    pub hidden: usize,
}

/// A layer's weights: `w_ih [G·H, in]`, `w_hh [G·H, H]`, `b_ih`, `b_hh [G·H]`.
#[derive(Clone, Copy)]
pub struct Weights<'a, T> {
    pub w_ih: &'a [T],
    pub w_hh: &'a [T],
    pub b_ih: &'a [T],
    pub b_hh: &'a [T],
}

/// A row-major `[rows, cols]` block of `data` at `offset`, or its transpose.
fn mat<T>(data: &[T], offset: usize, rows: usize, cols: usize, transposed: bool) -> MatRef<'_, T> {
    let (rs, cs) = if transposed { (1, cols) } else { (cols, 1) };
    let (rows, cols) = if transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    MatRef {
        data,
        offset,
        rows,
        cols,
        rs,
        cs,
    }
}

/// `a @ b`.
fn product<T: Float>(a: MatRef<'_, T>, b: MatRef<'_, T>) -> Vec<T> {
    let (m, n) = (a.rows, b.cols);
    gemm_batch(&[(a, b)], m, n)
}

/// `out[r, :] += bias` for every row.
fn add_rows<T: Float>(out: &mut [T], bias: &[T]) {
    for row in out.chunks_mut(bias.len().max(1)) {
        row.iter_mut().zip(bias).for_each(|(o, &b)| *o += b);
    }
}

/// Column sums of `[rows, cols]`.
fn column_sums<T: Float>(x: &[T], cols: usize) -> Vec<T> {
    let mut acc = vec![T::zero(); cols];
    accumulate_rows(&mut acc, x);
    acc
}

/// `acc += row` for every `acc.len()`-long row of `x` (one row: an element-wise sum).
fn accumulate_rows<T: Float>(acc: &mut [T], x: &[T]) {
    for row in x.chunks(acc.len().max(1)) {
        acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
    }
}

/// The weights of each step's products, copied once per sequence onto cache lines so that
/// every step reads them in place ([`StepWeights::copy`]).
#[derive(Clone, Copy)]
enum StepWeights<'a, T> {
    /// For cells that read `gi` and `gh` apart (the GRU): the input projection of every step
    /// is one product before the loop, and `w_hh` is `W_hhᵀ` (`[H, G·H]`) going forward,
    /// `W_hh` (`[G·H, H]`) going back.
    Apart {
        w: Weights<'a, T>,
        w_hh: &'a Lined<T>,
    },
    /// For cells that read only `gi + gh`: `[W_ihᵀ; W_hhᵀ; b_ih + b_hh]` (`[in + H + 1, G·H]`)
    /// going forward, `[W_ih | W_hh]` (`[G·H, in + H]`) going back.
    Stacked(&'a Lined<T>),
}

impl<'a, T: Float> StepWeights<'a, T> {
    /// The copy that cell `C`'s steps read, going forward or back: the rows `[W_ih | W_hh]`
    /// stacked (`W_hh` alone apart, as if the input had no columns) going back, their
    /// transpose going forward, with the biases' sum as one more row when stacked.
    fn copy<C: Cell>(w: Weights<'_, T>, sz: SeqSizes, forward: bool) -> Lined<T> {
        let input = if C::SUMS_GATES { sz.input } else { 0 };
        let (width, gates) = (input + sz.hidden, C::GATES * sz.hidden);
        let row_of = |r: usize| [row(w.w_ih, r, input), row(w.w_hh, r, sz.hidden)];
        if !forward {
            let mut m = Lined::with_rows(gates, width);
            (0..gates).for_each(|r| m.push(&row_of(r)));
            return m;
        }
        let mut m = Lined::zeros(width + usize::from(C::SUMS_GATES), gates);
        // Eight gate rows at a time, so that each row of the copy takes 8 adjacent values.
        for r0 in (0..gates).step_by(8) {
            let rows: Vec<[&[T]; 2]> = (r0..(r0 + 8).min(gates)).map(row_of).collect();
            for c in 0..width {
                let dst = &mut m.row_mut(c)[r0..r0 + rows.len()];
                for (d, [ih, hh]) in dst.iter_mut().zip(&rows) {
                    *d = if c < input { ih[c] } else { hh[c - input] };
                }
            }
        }
        if C::SUMS_GATES {
            for (r, d) in m.row_mut(width)[..gates].iter_mut().enumerate() {
                *d = w.b_ih[r] + w.b_hh[r];
            }
        }
        m
    }

    /// The view of `copy` (from [`StepWeights::copy`]) for cell `C`.
    fn of<C: Cell>(w: Weights<'a, T>, copy: &'a Lined<T>) -> Self {
        if C::SUMS_GATES {
            StepWeights::Stacked(copy)
        } else {
            StepWeights::Apart { w, w_hh: copy }
        }
    }
}

/// What the forward pass leaves for one part of the batch: the states of every step,
/// time-major and with the initial one first (`[T + 1, n, H]`; `cs` empty without a second
/// state), the saved planes (`[T, SAVED, n, H]`) and, with stacked weights, each step's
/// product rows `[x_t | h | 1]` (`[T·n, in + H + 1]`: the weight gradients read `[x_t | h]`;
/// no rows otherwise).
struct PartForward<T> {
    hs: Vec<T>,
    cs: Vec<T>,
    saved: Vec<T>,
    xh: Lined<T>,
}

/// What the forward pass of a sequence leaves, per part of the batch.
pub struct SeqForward<T> {
    /// The rows of each part, in order.
    rows: Vec<Range<usize>>,
    parts: Vec<PartForward<T>>,
    hidden: usize,
}

impl<T: Float> SeqForward<T> {
    /// Row `row`'s `h` after `step` steps (the initial state at 0).
    pub fn h(&self, step: usize, row: usize) -> &[T] {
        self.state(|part| &part.hs, step, row)
    }

    /// Row `row`'s `c` after `step` steps (cells with a second state).
    pub fn c(&self, step: usize, row: usize) -> &[T] {
        self.state(|part| &part.cs, step, row)
    }

    /// Row `row` after `step` steps of the states `of` picks from the part holding it.
    fn state(&self, of: impl Fn(&PartForward<T>) -> &[T], step: usize, row: usize) -> &[T] {
        let p = self.rows.partition_point(|r| r.end <= row);
        let (n, local) = (self.rows[p].len(), row - self.rows[p].start);
        &of(&self.parts[p])[(step * n + local) * self.hidden..][..self.hidden]
    }
}

/// The rows of the batch that each thread carries through the whole sequence: the rows of a
/// recurrent layer are independent, so that the steps need no synchronisation between threads
/// (a product split across threads at every step would wake them twice per step).
fn batch_parts(n: usize) -> Vec<Range<usize>> {
    let parts = super::parallel::threads().min(n / MIN_PART_ROWS).max(1);
    (0..parts)
        .map(|p| p * n / parts..(p + 1) * n / parts)
        .collect()
}

/// Fewer rows than this per thread make products too thin to be worth a thread.
const MIN_PART_ROWS: usize = 8;

/// Rows `rows` of a `[N, width]` buffer (nothing of an empty one: a cell without `c`).
fn rows_in<'a, T>(s: &'a [T], rows: &Range<usize>, width: usize) -> &'a [T] {
    if s.is_empty() {
        s
    } else {
        &s[rows.start * width..rows.end * width]
    }
}

/// `[A, B, rest]` → `[B, A, rest]`, copied: a part's batch-major rows to time-major and back.
fn swap_leading<T: Float>(x: &[T], a: usize, b: usize) -> Vec<T> {
    let rest = x.len() / (a * b).max(1);
    let mut out = Vec::with_capacity(x.len());
    for j in 0..b {
        for i in 0..a {
            out.extend_from_slice(&x[(i * b + j) * rest..][..rest]);
        }
    }
    out
}

/// Runs cell `C` over the batch-first input `x` (`[N, T, in]`) from the states `h0`, `c0`,
/// each part of the batch on its own thread.
pub fn sequence_forward<C: Cell, T: Float>(
    x: &[T],
    [h0, c0]: [&[T]; 2],
    w: Weights<'_, T>,
    sz: SeqSizes,
) -> SeqForward<T> {
    assert!(sz.hidden > 0, "sequence_forward: no hidden units");
    let rows = batch_parts(sz.n);
    let hid = sz.hidden;
    let copy = StepWeights::copy::<C>(w, sz, true);
    let step_w = StepWeights::of::<C>(w, &copy);
    let parts = run_tasks(rows.iter().collect(), |r| {
        let x = rows_in(x, r, sz.t * sz.input);
        let states = [rows_in(h0, r, hid), rows_in(c0, r, hid)];
        forward_part::<C, T>(x, states, step_w, SeqSizes { n: r.len(), ..sz })
    });
    SeqForward {
        rows,
        parts,
        hidden: hid,
    }
}

/// [`sequence_forward`] of one part of the batch (`sz.n` its rows of `x`, batch-major).
fn forward_part<C: Cell, T: Float>(
    x: &[T],
    [h0, c0]: [&[T]; 2],
    step_w: StepWeights<'_, T>,
    sz: SeqSizes,
) -> PartForward<T> {
    let SeqSizes {
        n,
        t,
        input,
        hidden,
    } = sz;
    let (state, saved_len) = (n * hidden, C::SAVED * n * hidden);
    let gi = step_w.input_projections(x, sz);
    let mut hs = Vec::with_capacity((t + 1) * state);
    let mut cs = Vec::with_capacity(if C::HAS_C { (t + 1) * state } else { 0 });
    let mut saved = Vec::with_capacity(t * saved_len);
    hs.extend_from_slice(h0);
    cs.extend_from_slice(c0);
    let kept = if matches!(step_w, StepWeights::Stacked(_)) {
        t * n
    } else {
        0
    };
    let mut xh = Lined::with_rows(kept, input + hidden + 1);
    for step in 0..t {
        // This step's buffers, zeroed just before the cell writes them (while in cache).
        hs.resize((step + 2) * state, T::zero());
        cs.resize(if C::HAS_C { (step + 2) * state } else { 0 }, T::zero());
        saved.resize((step + 1) * saved_len, T::zero());
        let (h_prev, h_next) = hs[step * state..].split_at_mut(state);
        let (gi, gh) = step_w.gates(&gi, (x, h_prev), &mut xh, step, sz);
        let (c_prev, c_next): (&[T], &mut [T]) = if C::HAS_C {
            let (p, q) = cs[step * state..].split_at_mut(state);
            (p, q)
        } else {
            (&[], &mut [])
        };
        let x = StepIn {
            len: state,
            gi: &gi,
            gh: &gh,
            h: h_prev,
            c: c_prev,
        };
        C::forward(x, hidden, [h_next, c_next], &mut saved[step * saved_len..]);
    }
    PartForward { hs, cs, saved, xh }
}

impl<T: Float> StepWeights<'_, T> {
    /// Apart: every step's input projection `x_t·W_ihᵀ + b_ih` (time-major `[T·n, G·H]`), in
    /// one product. Stacked: nothing (each step's product has its input in it).
    fn input_projections(&self, x: &[T], sz: SeqSizes) -> Vec<T> {
        let StepWeights::Apart { w, .. } = self else {
            return Vec::new();
        };
        let (rows, gates) = (sz.t * sz.n, w.b_ih.len());
        let x_tm = swap_leading(x, sz.n, sz.t);
        let mut gi = product(
            mat(&x_tm, 0, rows, sz.input, false),
            mat(w.w_ih, 0, gates, sz.input, true),
        );
        add_rows(&mut gi, w.b_ih);
        gi
    }

    /// Step `step`'s gate pre-activations `(gi, gh)` from the part's input `x` (batch-major)
    /// and previous state: apart, this step's rows of `gi_all` and `h·W_hhᵀ + b_hh`; stacked,
    /// their sum and no `gh`, the step's rows `[x_t | h | 1]` pushed onto `xh`.
    fn gates<'g>(
        &self,
        gi_all: &'g [T],
        (x, h_prev): (&[T], &[T]),
        xh: &mut Lined<T>,
        step: usize,
        sz: SeqSizes,
    ) -> (Cow<'g, [T]>, Vec<T>) {
        let (n, t) = (sz.n, sz.t);
        match *self {
            StepWeights::Apart { w, w_hh } => {
                let gates = w.b_hh.len();
                let mut gh = product(mat(h_prev, 0, n, sz.hidden, false), w_hh.rows(0, sz.hidden));
                add_rows(&mut gh, w.b_hh);
                (Cow::Borrowed(&gi_all[step * n * gates..][..n * gates]), gh)
            }
            StepWeights::Stacked(w_t) => {
                for r in 0..n {
                    let (x_r, h_r) = (row(x, r * t + step, sz.input), row(h_prev, r, sz.hidden));
                    xh.push(&[x_r, h_r, &[T::one()]]);
                }
                let width = sz.input + sz.hidden + 1;
                let gates = product(xh.rows(step * n, n), w_t.rows(0, width));
                (Cow::Owned(gates), Vec::new())
            }
        }
    }

    /// Going back, the previous state's gradient through the gates (`dgates·W_hh`) and,
    /// stacked, this step's input gradient with it (written to `dx`, batch-major).
    fn back(&self, dgates: MatRef<'_, T>, dx: &mut [T], step: usize, sz: SeqSizes) -> Vec<T> {
        let gates = dgates.cols;
        match *self {
            StepWeights::Apart { w_hh, .. } => product(dgates, w_hh.rows(0, gates)),
            StepWeights::Stacked(w) => {
                // [dx_t | dh] row by row: dx_t to its place, dh to the next step.
                let (input, width) = (sz.input, sz.input + sz.hidden);
                let both = product(dgates, w.rows(0, gates));
                let mut dh = Vec::with_capacity(sz.n * sz.hidden);
                for (r, src) in both.chunks_exact(width).enumerate() {
                    dx[(r * sz.t + step) * input..][..input].copy_from_slice(&src[..input]);
                    dh.extend_from_slice(&src[input..]);
                }
                dh
            }
        }
    }
}

/// The gradients of a sequence: input (`[N, T, in]`), initial states, weights.
pub struct SeqGrads<T> {
    pub dx: Vec<T>,
    pub dh0: Vec<T>,
    pub dc0: Vec<T>,
    pub dw_ih: Vec<T>,
    pub dw_hh: Vec<T>,
    pub db_ih: Vec<T>,
    pub db_hh: Vec<T>,
}

/// The derivative of [`sequence_forward`] from the upstream of every step's output
/// (`dout`, `[N, T, H]`) and of the last states (`dh_n`, `dc_n`), each part of the batch
/// on its own thread; the parts' weight gradients are added at the end.
pub fn sequence_backward<C: Cell, T: Float>(
    x: &[T],
    fwd: &SeqForward<T>,
    w: Weights<'_, T>,
    sz: SeqSizes,
    [dout, dh_n, dc_n]: [&[T]; 3],
) -> SeqGrads<T> {
    let hid = sz.hidden;
    let copy = StepWeights::copy::<C>(w, sz, false);
    let step_w = StepWeights::of::<C>(w, &copy);
    let parts = fwd.rows.iter().zip(&fwd.parts);
    let grads: Vec<SeqGrads<T>> = run_tasks(parts.collect(), |(r, part)| {
        let x = rows_in(x, r, sz.t * sz.input);
        let dout = rows_in(dout, r, sz.t * hid);
        let ups = [dout, rows_in(dh_n, r, hid), rows_in(dc_n, r, hid)];
        backward_part::<C, T>(x, part, step_w, SeqSizes { n: r.len(), ..sz }, ups)
    });
    merge(grads)
}

/// The gradients of the whole batch from its parts' (in the batch's order): rows joined,
/// weights summed.
fn merge<T: Float>(parts: Vec<SeqGrads<T>>) -> SeqGrads<T> {
    let mut it = parts.into_iter();
    let mut total = it.next().expect("a batch has at least one part");
    let add = |a: &mut Vec<T>, b: Vec<T>| a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
    for g in it {
        total.dx.extend(g.dx);
        total.dh0.extend(g.dh0);
        total.dc0.extend(g.dc0);
        add(&mut total.dw_ih, g.dw_ih);
        add(&mut total.dw_hh, g.dw_hh);
        add(&mut total.db_ih, g.db_ih);
        add(&mut total.db_hh, g.db_hh);
    }
    total
}

/// [`sequence_backward`] of one part of the batch (`sz.n` its rows of `x` and `dout`,
/// batch-major; `x` is only read with the projections apart: stacked, the forward pass kept
/// it).
fn backward_part<C: Cell, T: Float>(
    x: &[T],
    fwd: &PartForward<T>,
    step_w: StepWeights<'_, T>,
    sz: SeqSizes,
    [dout, dh_n, dc_n]: [&[T]; 3],
) -> SeqGrads<T> {
    let SeqSizes {
        n,
        t,
        input,
        hidden,
    } = sz;
    let (gates, state, saved_len) = (C::GATES * hidden, n * hidden, C::SAVED * n * hidden);
    // Cells that sum their gates have one gradient for both projections: dgh stays empty.
    let mut dgi = vec![T::zero(); t * n * gates];
    let mut dgh = vec![T::zero(); if C::SUMS_GATES { 0 } else { t * n * gates }];
    // Stacked, each step's product gives its input gradient too.
    let stacked = matches!(step_w, StepWeights::Stacked(_));
    let mut dx = vec![T::zero(); if stacked { t * n * input } else { 0 }];
    let (mut dh, mut dc) = (dh_n.to_vec(), dc_n.to_vec());
    let (mut dh_direct, mut dc_prev) = (vec![T::zero(); state], vec![T::zero(); dc.len()]);
    for step in (0..t).rev() {
        for (r, dh) in dh.chunks_exact_mut(hidden).enumerate() {
            accumulate_rows(dh, row(dout, r * t + step, hidden));
        }
        let x = StepIn {
            len: state,
            gi: &[],
            gh: &[],
            h: &fwd.hs[step * state..][..state],
            c: if C::HAS_C {
                &fwd.cs[step * state..][..state]
            } else {
                &[]
            },
        };
        let at = step * n * gates;
        let grads = StepGrads {
            dgi: &mut dgi[at..][..n * gates],
            dgh: if C::SUMS_GATES {
                &mut []
            } else {
                &mut dgh[at..][..n * gates]
            },
            dh: &mut dh_direct,
            dc: &mut dc_prev,
        };
        let saved = &fwd.saved[step * saved_len..][..saved_len];
        C::backward(x, hidden, saved, [&dh, &dc], grads);
        // The previous state's gradient: through gh, plus any direct path.
        let dgh: &[T] = if C::SUMS_GATES { &dgi } else { &dgh };
        dh = step_w.back(mat(dgh, at, n, gates, false), &mut dx, step, sz);
        accumulate_rows(&mut dh, &dh_direct);
        std::mem::swap(&mut dc, &mut dc_prev);
    }
    let dgh: &[T] = if C::SUMS_GATES { &dgi } else { &dgh };
    let (dx, [dw_ih, dw_hh, db_ih, db_hh]) = match step_w {
        StepWeights::Apart { w, .. } => apart_grads(w, [x, &fwd.hs], [&dgi, dgh], sz),
        StepWeights::Stacked(_) => (dx, stacked_grads(&fwd.xh, &dgi, sz, gates)),
    };
    SeqGrads {
        dx,
        dh0: dh,
        dc0: dc,
        dw_ih,
        dw_hh,
        db_ih,
        db_hh,
    }
}

/// With the projections apart: the input gradient (batch-major) and the weight gradients
/// (`dW_ih`, `dW_hh`, `db_ih`, `db_hh`) from every step's `dgi`, `dgh` (time-major), inputs
/// (batch-major) and previous states.
fn apart_grads<T: Float>(
    w: Weights<'_, T>,
    [x, hs]: [&[T]; 2],
    [dgi, dgh]: [&[T]; 2],
    sz: SeqSizes,
) -> (Vec<T>, [Vec<T>; 4]) {
    let (rows, gates) = (sz.t * sz.n, w.b_ih.len());
    let dx_tm = product(
        mat(dgi, 0, rows, gates, false),
        mat(w.w_ih, 0, gates, sz.input, false),
    );
    let x_tm = swap_leading(x, sz.n, sz.t);
    let dw_ih = product(
        mat(dgi, 0, rows, gates, true),
        mat(&x_tm, 0, rows, sz.input, false),
    );
    let dw_hh = product(
        mat(dgh, 0, rows, gates, true),
        mat(hs, 0, rows, sz.hidden, false),
    );
    let dx = swap_leading(&dx_tm, sz.t, sz.n);
    let biases = [column_sums(dgi, gates), column_sums(dgh, gates)];
    let [db_ih, db_hh] = biases;
    (dx, [dw_ih, dw_hh, db_ih, db_hh])
}

/// With the projections stacked: `dW_ih` and `dW_hh` as one product, `dgatesᵀ·[x_t | h]`
/// over every step, and the biases' gradient (both biases have the same one).
fn stacked_grads<T: Float>(xh: &Lined<T>, dgates: &[T], sz: SeqSizes, gates: usize) -> [Vec<T>; 4] {
    let (rows, input, hidden) = (sz.t * sz.n, sz.input, sz.hidden);
    let width = input + hidden;
    // The column of ones left out: a product column of its own would cost half a panel.
    let xh = MatRef {
        cols: width,
        ..xh.rows(0, rows)
    };
    let all = product(mat(dgates, 0, rows, gates, true), xh);
    let (mut dw_ih, mut dw_hh) = (
        Vec::with_capacity(gates * input),
        Vec::with_capacity(gates * hidden),
    );
    for r in all.chunks_exact(width) {
        dw_ih.extend_from_slice(&r[..input]);
        dw_hh.extend_from_slice(&r[input..]);
    }
    let db = column_sums(dgates, gates);
    [dw_ih, dw_hh, db.clone(), db]
}
