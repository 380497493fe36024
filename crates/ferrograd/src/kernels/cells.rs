//! Recurrent cells, fused: the gate activations and state update of one step in one pass over
//! the `[N, G·H]` gate pre-activations, and whole sequences with one matrix product per step.
//!
//! A sequence runs as cuDNN and PyTorch's CPU kernels run it: the input projections of every
//! step are one product before the loop, the loop does only `h·W_hhᵀ` and the cell, and the
//! derivative runs the loop backwards, leaving the weight gradients and the input gradient to
//! three products after it. Buffers are time-major (`[T, N, ·]`) so that every step's rows are
//! one block.

use std::ops::Range;

use multiversion::multiversion;
use rayon::prelude::*;

use super::matmul::{gemm_batch, MatRef};
use super::Float;

/// `s·(1 − s)`: the sigmoid's derivative from its value.
fn dsigmoid<T: Float>(s: T) -> T {
    s * (T::one() - s)
}

/// `1 − t²`: tanh's derivative from its value.
fn dtanh<T: Float>(t: T) -> T {
    T::one() - t * t
}

/// Each cell of `[N, H]` with its offset in `[N, G·H]` gates: (gate offset, state offset).
fn cells(len: usize, h: usize, gates: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len / h.max(1)).flat_map(move |r| (0..h).map(move |j| (r * gates * h + j, r * h + j)))
}

/// Row `r` of a row-major matrix `width` wide.
fn row<T>(x: &[T], r: usize, width: usize) -> &[T] {
    &x[r * width..][..width]
}

/// `out = a + b`.
fn sum_into<T: Float>(out: &mut [T], a: &[T], b: &[T]) {
    for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
        *o = a + b;
    }
}

/// Plane `k` of `[P, len]`.
fn plane<T>(x: &[T], k: usize, len: usize) -> &[T] {
    &x[k * len..][..len]
}

/// `P` disjoint planes of `[P, len]`, mutable.
fn planes_mut<T, const P: usize>(x: &mut [T], len: usize) -> [&mut [T]; P] {
    let mut it = x.chunks_mut(len.max(1));
    std::array::from_fn(|_| it.next().unwrap_or_default())
}

/// One step's inputs: the gate pre-activations `gi`, `gh` (`[N, G·H]`, biases included) and
/// the previous state `h`, `c` (`[N, H]`; `c` empty for cells without one, `h` for cells that
/// do not read it), `len` = N·H.
#[derive(Clone, Copy)]
pub struct StepIn<'a, T> {
    pub len: usize,
    pub gi: &'a [T],
    pub gh: &'a [T],
    pub h: &'a [T],
    pub c: &'a [T],
}

/// One step's gradients, written by [`Cell::backward`]: of `gi` and `gh` (`[N, G·H]`; `dgh`
/// not written for cells that sum their gates), and of the previous state by every path but
/// `gh` (`[N, H]`; `dc` only for cells with one).
pub struct StepGrads<'a, T> {
    pub dgi: &'a mut [T],
    pub dgh: &'a mut [T],
    pub dh: &'a mut [T],
    pub dc: &'a mut [T],
}

/// What a recurrent cell computes per step, in PyTorch's gate order.
pub trait Cell {
    /// Gate blocks in each projection (PyTorch's `G` in `weight_ih [G·H, in]`).
    const GATES: usize;
    /// `[N, H]` planes kept per step for the derivative.
    const SAVED: usize;
    /// Whether the cell carries a second state (the LSTM's `c`).
    const HAS_C: bool;
    /// Whether the cell reads only `gi + gh`, so that their gradients are equal: `backward`
    /// then writes `dgi` alone and leaves `dgh` (which may be empty) to the caller.
    const SUMS_GATES: bool;
    /// The new state `h'` (and `c'`) and the saved planes.
    fn forward<T: Float>(x: StepIn<'_, T>, hid: usize, out: [&mut [T]; 2], saved: &mut [T]);
    /// The gradients from the upstream `dh'` (and `dc'`) and what `forward` saved.
    fn backward<T: Float>(
        x: StepIn<'_, T>,
        hid: usize,
        saved: &[T],
        up: [&[T]; 2],
        g: StepGrads<'_, T>,
    );
}

/// Elman RNN: `h' = tanh(gi + gh)`.
pub struct TanhCell;

impl Cell for TanhCell {
    const GATES: usize = 1;
    const SAVED: usize = 1;
    const HAS_C: bool = false;
    const SUMS_GATES: bool = true;

    fn forward<T: Float>(x: StepIn<'_, T>, hid: usize, [h_new, _]: [&mut [T]; 2], saved: &mut [T]) {
        for (r, out) in h_new.chunks_mut(hid.max(1)).enumerate() {
            sum_into(out, row(x.gi, r, hid), row(x.gh, r, hid));
            T::tanh_in_place(out);
        }
        saved.copy_from_slice(h_new);
    }

    fn backward<T: Float>(
        x: StepIn<'_, T>,
        hid: usize,
        saved: &[T],
        [up, _]: [&[T]; 2],
        g: StepGrads<'_, T>,
    ) {
        for (gate, s) in cells(x.len, hid, 1) {
            (g.dgi[gate], g.dh[s]) = (up[s] * dtanh(saved[s]), T::zero());
        }
    }
}

/// LSTM, gates i, f, g, o: `c' = σ(f)·c + σ(i)·tanh(g)`, `h' = σ(o)·tanh(c')`.
pub struct LstmCell;

impl Cell for LstmCell {
    const GATES: usize = 4;
    /// i, f, g, o activated, and tanh c'.
    const SAVED: usize = 5;
    const HAS_C: bool = true;
    const SUMS_GATES: bool = true;

    fn forward<T: Float>(
        x: StepIn<'_, T>,
        hid: usize,
        [h_new, c_new]: [&mut [T]; 2],
        saved: &mut [T],
    ) {
        let len = x.len;
        let [si, sf, sg, so, stc] = planes_mut::<T, 5>(saved, len);
        for r in 0..len / hid.max(1) {
            let s = r * hid..(r + 1) * hid;
            let (gi, gh) = (row(x.gi, r, 4 * hid), row(x.gh, r, 4 * hid));
            // Each gate activated straight into its saved plane.
            for (k, (dst, act)) in [
                (&mut si[s.clone()], T::sigmoid_in_place as fn(&mut [T])),
                (&mut sf[s.clone()], T::sigmoid_in_place),
                (&mut sg[s.clone()], T::tanh_in_place),
                (&mut so[s.clone()], T::sigmoid_in_place),
            ]
            .into_iter()
            .enumerate()
            {
                sum_into(dst, &gi[k * hid..][..hid], &gh[k * hid..][..hid]);
                act(dst);
            }
            let [i, f, cand, o, c_prev] = [&si, &sf, &sg, &so, x.c].map(|p| &p[s.clone()]);
            let (c, tc, h) = (&mut c_new[s.clone()], &mut stc[s.clone()], &mut h_new[s]);
            for j in 0..hid {
                c[j] = f[j] * c_prev[j] + i[j] * cand[j];
            }
            tc.copy_from_slice(c);
            T::tanh_in_place(tc);
            for j in 0..hid {
                h[j] = o[j] * tc[j];
            }
        }
    }

    fn backward<T: Float>(
        x: StepIn<'_, T>,
        hid: usize,
        saved: &[T],
        [up_h, up_c]: [&[T]; 2],
        g: StepGrads<'_, T>,
    ) {
        let len = x.len;
        let [i, f, cand, o, tc] = [0, 1, 2, 3, 4].map(|k| plane(saved, k, len));
        // Row by row over slices of equal length, so that the loop is vectorised.
        for (r, dgi) in g.dgi.chunks_exact_mut(4 * hid.max(1)).enumerate() {
            let s = r * hid..(r + 1) * hid;
            let ins = [i, f, cand, o, tc, x.c, up_h, up_c].map(|p| &p[s.clone()]);
            let [di, df, dg, d_o] = planes_mut::<T, 4>(dgi, hid);
            g.dh[s.clone()].fill(T::zero());
            lstm_grads(ins, [di, df, dg, d_o, &mut g.dc[s]]);
        }
    }
}

/// The LSTM's gate gradients and `dc` of one row from its saved activations (`i`, `f`, `g`,
/// `o`, `tanh c'`), the previous `c` and the upstream `dh'`, `dc'`: an element-wise loop,
/// compiled for each instruction set.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn lstm_grads<T: Float>(ins: [&[T]; 8], outs: [&mut [T]; 5]) {
    let len = outs[0].len();
    // Every slice cut to one length, so that the loop runs without bounds checks.
    let [i, f, cand, o, tc, c, up_h, up_c] = ins.map(|x| &x[..len]);
    let [di, df, dg, d_o, dc] = outs.map(|x| &mut x[..len]);
    for j in 0..len {
        let dct = up_c[j] + up_h[j] * o[j] * dtanh(tc[j]);
        di[j] = dct * cand[j] * dsigmoid(i[j]);
        df[j] = dct * c[j] * dsigmoid(f[j]);
        dg[j] = dct * i[j] * dtanh(cand[j]);
        d_o[j] = up_h[j] * tc[j] * dsigmoid(o[j]);
        dc[j] = dct * f[j];
    }
}

/// GRU, gates r, z, n: `n = tanh(gi_n + σ(r)·gh_n)`, `h' = n + σ(z)·(h − n)`.
pub struct GruCell;

impl Cell for GruCell {
    const GATES: usize = 3;
    /// r, z, n activated, and gh_n.
    const SAVED: usize = 4;
    const HAS_C: bool = false;
    const SUMS_GATES: bool = false;

    fn forward<T: Float>(x: StepIn<'_, T>, hid: usize, [h_new, _]: [&mut [T]; 2], saved: &mut [T]) {
        let len = x.len;
        let [sr, sz, sn, sghn] = planes_mut::<T, 4>(saved, len);
        let mut rz = vec![T::zero(); 2 * hid];
        for r in 0..len / hid.max(1) {
            let (gi, gh) = (row(x.gi, r, 3 * hid), row(x.gh, r, 3 * hid));
            sum_into(&mut rz, &gi[..2 * hid], &gh[..2 * hid]);
            T::sigmoid_in_place(&mut rz);
            let at = r * hid;
            let (reset, update) = rz.split_at(hid);
            let n = &mut sn[at..at + hid];
            for j in 0..hid {
                n[j] = gi[2 * hid + j] + reset[j] * gh[2 * hid + j];
            }
            T::tanh_in_place(n);
            for j in 0..hid {
                h_new[at + j] = n[j] + update[j] * (x.h[at + j] - n[j]);
            }
            sr[at..at + hid].copy_from_slice(reset);
            sz[at..at + hid].copy_from_slice(update);
            sghn[at..at + hid].copy_from_slice(&gh[2 * hid..]);
        }
    }

    fn backward<T: Float>(
        x: StepIn<'_, T>,
        hid: usize,
        saved: &[T],
        [up, _]: [&[T]; 2],
        g: StepGrads<'_, T>,
    ) {
        let len = x.len;
        let [r, z, n, gh_n] = [0, 1, 2, 3].map(|k| plane(saved, k, len));
        let one = T::one();
        for (gate, s) in cells(len, hid, 3) {
            let dn = up[s] * (one - z[s]) * dtanh(n[s]);
            let dr = dn * gh_n[s] * dsigmoid(r[s]);
            let dz = up[s] * (x.h[s] - n[s]) * dsigmoid(z[s]);
            (g.dgi[gate], g.dgi[gate + hid], g.dgi[gate + 2 * hid]) = (dr, dz, dn);
            (g.dgh[gate], g.dgh[gate + hid], g.dgh[gate + 2 * hid]) = (dr, dz, dn * r[s]);
            g.dh[s] = up[s] * z[s];
        }
    }
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

/// A copy of the `[rows, cols]` row-major `src` (transposed first when `transposed`) whose
/// first element sits on a cache line: its offset into the returned buffer. Every step of a
/// sequence multiplies by the same `W_hh`; a copy the matrix product can read in place (it
/// needs its rows on cache lines) saves packing it again at each step.
fn aligned<T: Float>(src: &[T], rows: usize, cols: usize, transposed: bool) -> (Vec<T>, usize) {
    let pad = 64 / std::mem::size_of::<T>();
    let mut buf = vec![T::zero(); rows * cols + pad];
    let misalign = (buf.as_ptr() as usize % 64) / std::mem::size_of::<T>();
    let offset = (pad - misalign) % pad;
    let dst = &mut buf[offset..offset + rows * cols];
    if transposed {
        for (r, row) in src.chunks_exact(cols.max(1)).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                dst[c * rows + r] = v;
            }
        }
    } else {
        dst.copy_from_slice(&src[..rows * cols]);
    }
    (buf, offset)
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

/// What the forward pass leaves for one part of the batch: the states of every step,
/// time-major and with the initial one first (`[T + 1, n, H]`; `cs` empty without a second
/// state), and the saved planes (`[T, SAVED, n, H]`).
struct PartForward<T> {
    hs: Vec<T>,
    cs: Vec<T>,
    saved: Vec<T>,
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
        let (p, local) = self.locate(row);
        let n = self.rows[p].len();
        &self.parts[p].hs[(step * n + local) * self.hidden..][..self.hidden]
    }

    /// Row `row`'s `c` after `step` steps (cells with a second state).
    pub fn c(&self, step: usize, row: usize) -> &[T] {
        let (p, local) = self.locate(row);
        let n = self.rows[p].len();
        &self.parts[p].cs[(step * n + local) * self.hidden..][..self.hidden]
    }

    /// The part holding `row`, and the row's index in it.
    fn locate(&self, row: usize) -> (usize, usize) {
        let p = self.rows.partition_point(|r| r.end <= row);
        (p, row - self.rows[p].start)
    }
}

/// The rows of the batch that each thread carries through the whole sequence: the rows of a
/// recurrent layer are independent, so that the steps need no synchronisation between threads
/// (a product split across threads at every step would wake them twice per step).
fn batch_parts(n: usize) -> Vec<Range<usize>> {
    let parts = rayon::current_num_threads().min(n / MIN_PART_ROWS).max(1);
    (0..parts)
        .map(|p| p * n / parts..(p + 1) * n / parts)
        .collect()
}

/// Fewer rows than this per thread make products too thin to be worth a thread.
const MIN_PART_ROWS: usize = 8;

/// Rows `rows` of a `[N, width]` state (nothing of an empty one: a cell without `c`).
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

/// Part `rows` of a batch-major `[N, T, width]` buffer (its rows are contiguous), time-major:
/// `[T, rows, width]`.
fn time_major<T: Float>(x: &[T], sz: SeqSizes, width: usize, rows: &Range<usize>) -> Vec<T> {
    let per_row = sz.t * width;
    swap_leading(
        &x[rows.start * per_row..rows.end * per_row],
        rows.len(),
        sz.t,
    )
}

/// Runs cell `C` over the batch-first input `x` (`[N, T, in]`) from the states `h0`, `c0`,
/// each part of the batch on its own thread.
pub fn sequence_forward<C: Cell, T: Float>(
    x: &[T],
    [h0, c0]: [&[T]; 2],
    w: Weights<'_, T>,
    sz: SeqSizes,
) -> SeqForward<T> {
    let rows = batch_parts(sz.n);
    let hid = sz.hidden;
    let parts = rows
        .par_iter()
        .map(|r| {
            let x = time_major(x, sz, sz.input, r);
            let states = [rows_in(h0, r, hid), rows_in(c0, r, hid)];
            forward_part::<C, T>(&x, states, w, SeqSizes { n: r.len(), ..sz })
        })
        .collect();
    SeqForward {
        rows,
        parts,
        hidden: hid,
    }
}

/// [`sequence_forward`] of one part of the batch (`sz.n` its rows).
fn forward_part<C: Cell, T: Float>(
    x_tm: &[T],
    [h0, c0]: [&[T]; 2],
    w: Weights<'_, T>,
    sz: SeqSizes,
) -> PartForward<T> {
    let SeqSizes {
        n,
        t,
        input,
        hidden,
    } = sz;
    let (gates, state) = (C::GATES * hidden, n * hidden);
    // Every step's input projection in one product.
    let mut gi = product(
        mat(x_tm, 0, t * n, input, false),
        mat(w.w_ih, 0, gates, input, true),
    );
    add_rows(&mut gi, w.b_ih);
    let mut hs = vec![T::zero(); (t + 1) * state];
    let mut cs = vec![T::zero(); if C::HAS_C { (t + 1) * state } else { 0 }];
    hs[..state].copy_from_slice(h0);
    if C::HAS_C {
        cs[..state].copy_from_slice(c0);
    }
    let mut saved = vec![T::zero(); t * C::SAVED * state];
    let saved_len = C::SAVED * state;
    // W_hhᵀ [H, G·H], read in place by every step's product.
    let (w_hh_t, at) = aligned(w.w_hh, gates, hidden, true);
    for step in 0..t {
        let (h_prev, h_next) = hs[step * state..].split_at_mut(state);
        let mut gh = product(
            mat(h_prev, 0, n, hidden, false),
            mat(&w_hh_t, at, hidden, gates, false),
        );
        add_rows(&mut gh, w.b_hh);
        let (c_prev, c_next): (&[T], &mut [T]) = if C::HAS_C {
            let (p, q) = cs[step * state..].split_at_mut(state);
            (p, &mut q[..state])
        } else {
            (&[], &mut [])
        };
        let x = StepIn {
            len: state,
            gi: &gi[step * n * gates..][..n * gates],
            gh: &gh,
            h: h_prev,
            c: c_prev,
        };
        let out = [&mut h_next[..state], c_next];
        C::forward(x, hidden, out, &mut saved[step * saved_len..][..saved_len]);
    }
    PartForward { hs, cs, saved }
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
    let grads: Vec<SeqGrads<T>> = fwd
        .rows
        .par_iter()
        .zip(&fwd.parts)
        .map(|(r, part)| {
            let (x, dout) = (time_major(x, sz, sz.input, r), time_major(dout, sz, hid, r));
            let ups = [&dout[..], rows_in(dh_n, r, hid), rows_in(dc_n, r, hid)];
            let mut g = backward_part::<C, T>(&x, part, w, SeqSizes { n: r.len(), ..sz }, ups);
            g.dx = swap_leading(&g.dx, sz.t, r.len());
            g
        })
        .collect();
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

/// [`sequence_backward`] of one part of the batch (`sz.n` its rows).
fn backward_part<C: Cell, T: Float>(
    x_tm: &[T],
    fwd: &PartForward<T>,
    w: Weights<'_, T>,
    sz: SeqSizes,
    [dout_tm, dh_n, dc_n]: [&[T]; 3],
) -> SeqGrads<T> {
    let SeqSizes {
        n,
        t,
        input,
        hidden,
    } = sz;
    let (gates, state, saved_len) = (C::GATES * hidden, n * hidden, C::SAVED * n * hidden);
    // Cells that sum their gates have one gradient for both projections: dgh stays empty.
    let (mut dgi, mut dgh) = (
        vec![T::zero(); t * n * gates],
        vec![T::zero(); if C::SUMS_GATES { 0 } else { t * n * gates }],
    );
    let (mut dh, mut dc) = (dh_n.to_vec(), dc_n.to_vec());
    let (mut dh_direct, mut dc_prev) = (vec![T::zero(); state], vec![T::zero(); dc.len()]);
    // W_hh [G·H, H], read in place by every step's product.
    let (w_hh, w_at) = aligned(w.w_hh, gates, hidden, false);
    for step in (0..t).rev() {
        accumulate_rows(&mut dh, &dout_tm[step * state..][..state]);
        let c: &[T] = if C::HAS_C {
            &fwd.cs[step * state..][..state]
        } else {
            &[]
        };
        let x = StepIn {
            len: state,
            gi: &[],
            gh: &[],
            h: &fwd.hs[step * state..][..state],
            c,
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
        dh = product(
            mat(dgh, at, n, gates, false),
            mat(&w_hh, w_at, gates, hidden, false),
        );
        accumulate_rows(&mut dh, &dh_direct);
        std::mem::swap(&mut dc, &mut dc_prev);
    }
    let rows = t * n;
    let dgh: &[T] = if C::SUMS_GATES { &dgi } else { &dgh };
    let db_ih = column_sums(&dgi, gates);
    SeqGrads {
        dx: product(
            mat(&dgi, 0, rows, gates, false),
            mat(w.w_ih, 0, gates, input, false),
        ),
        dh0: dh,
        dc0: dc,
        dw_ih: product(
            mat(&dgi, 0, rows, gates, true),
            mat(x_tm, 0, rows, input, false),
        ),
        dw_hh: product(
            mat(dgh, 0, rows, gates, true),
            mat(&fwd.hs, 0, rows, hidden, false),
        ),
        db_hh: if C::SUMS_GATES {
            db_ih.clone()
        } else {
            column_sums(dgh, gates)
        },
        db_ih,
    }
}
