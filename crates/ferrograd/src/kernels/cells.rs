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
use std::borrow::Cow;

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

/// `out = a + b`, or `a` when `b` is empty (gates given summed).
fn sum_into<T: Float>(out: &mut [T], a: &[T], b: &[T]) {
    if b.is_empty() {
        out.copy_from_slice(a);
        return;
    }
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

/// One step's inputs: the gate pre-activations `gi`, `gh` (`[N, G·H]`, biases included; `gh`
/// may be empty for cells that sum their gates, `gi` then holding the sum) and the previous
/// state `h`, `c` (`[N, H]`; `c` empty for cells without one, `h` for cells that do not read
/// it), `len` = N·H.
#[derive(Clone, Copy)]
pub struct StepIn<'a, T> {
    pub len: usize,
    pub gi: &'a [T],
    pub gh: &'a [T],
    pub h: &'a [T],
    pub c: &'a [T],
}

impl<'a, T> StepIn<'a, T> {
    /// Row `r` of `gi` and of `gh` (empty when the gates come summed), `width` wide.
    fn gate_rows(&self, r: usize, width: usize) -> (&'a [T], &'a [T]) {
        let gh = if self.gh.is_empty() {
            self.gh
        } else {
            row(self.gh, r, width)
        };
        (row(self.gi, r, width), gh)
    }
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
            let (gi, gh) = x.gate_rows(r, hid);
            sum_into(out, gi, gh);
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
            let (gi, gh) = x.gate_rows(r, 4 * hid);
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
                let gh = gh.get(k * hid..(k + 1) * hid).unwrap_or_default();
                sum_into(dst, &gi[k * hid..][..hid], gh);
                act(dst);
            }
            let [i, f, cand, o, c_prev] = [&*si, &*sf, &*sg, &*so, x.c].map(|p| &p[s.clone()]);
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
            let (gi, gh) = x.gate_rows(r, 3 * hid);
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
    let (mut buf, offset) = line_buffer(rows * cols);
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
/// state), the saved planes (`[T, SAVED, n, H]`) and, with stacked weights, each step's
/// product rows `[x_t | h | 1]` (`[T, n, in + H + 1]`; empty otherwise).
struct PartForward<T> {
    hs: Vec<T>,
    cs: Vec<T>,
    saved: Vec<T>,
    xh: StepRows<T>,
}

/// The rows `[x_t | h | 1]` of every step's stacked product, in order. Each row starts on a
/// cache line (rows are padded to whole lines), so that the weight gradient's product reads
/// them in place instead of packing them.
struct StepRows<T> {
    buf: Vec<T>,
    /// Where the first row starts in `buf`.
    at: usize,
    /// Floats per row: in + H + 1.
    width: usize,
    /// Floats between rows: `width` rounded up to a cache line.
    stride: usize,
}

impl<T: Float> StepRows<T> {
    /// Room for `rows` rows of `width`, none pushed yet.
    fn new(rows: usize, width: usize) -> Self {
        let line = 64 / std::mem::size_of::<T>();
        let stride = width.div_ceil(line) * line;
        // Reserved in full up front: the buffer never moves, so the rows stay on lines.
        let mut buf = Vec::with_capacity(rows * stride + line);
        let misalign = (buf.as_ptr() as usize % 64) / std::mem::size_of::<T>();
        let at = (line - misalign) % line;
        buf.resize(at, T::zero());
        StepRows {
            buf,
            at,
            width,
            stride,
        }
    }

    /// Appends the row `[x | h | 1]`.
    fn push(&mut self, x: &[T], h: &[T]) {
        self.buf.extend_from_slice(x);
        self.buf.extend_from_slice(h);
        self.buf.push(T::one());
        let end = self.buf.len() + self.stride - self.width;
        self.buf.resize(end, T::zero());
    }

    /// Rows `first..first + rows` as a `[rows, in + H + 1]` matrix.
    fn rows(&self, first: usize, rows: usize) -> MatRef<'_, T> {
        MatRef {
            data: &self.buf,
            offset: self.at + first * self.stride,
            rows,
            cols: self.width,
            rs: self.stride,
            cs: 1,
        }
    }
}

/// The weights of each step's products, copied once per sequence so that every step reads
/// them in place (on cache lines).
#[derive(Clone, Copy)]
enum StepWeights<'a, T> {
    /// The projections apart, for cells that read `gi` and `gh` apart (the GRU): the input
    /// projection of every step is one product before the loop, and `w_hh` is `W_hhᵀ`
    /// (`[H, G·H]`) going forward, `W_hh` (`[G·H, H]`) going back.
    Apart { w: Weights<'a, T>, w_hh: &'a [T] },
    /// The projections stacked, for cells that read only `gi + gh`: one product per step,
    /// `[x_t | h | 1]·[W_ihᵀ; W_hhᵀ; b_ih + b_hh]` going forward (`[in + H + 1, G·H]`), and
    /// `dgates·[W_ih | W_hh]` (`[G·H, in + H]`) going back, which gives `dx_t` with `dh`.
    Stacked(&'a [T]),
}

/// A zeroed buffer of `len` elements and more, with the offset of its first element on a
/// cache line.
fn line_buffer<T: Float>(len: usize) -> (Vec<T>, usize) {
    let pad = 64 / std::mem::size_of::<T>();
    let buf = vec![T::zero(); len + pad];
    let misalign = (buf.as_ptr() as usize % 64) / std::mem::size_of::<T>();
    (buf, (pad - misalign) % pad)
}

/// `[W_ihᵀ; W_hhᵀ; b_ih + b_hh]` (`[in + H + 1, G·H]`) when `forward`, `[W_ih | W_hh]`
/// (`[G·H, in + H]`) otherwise, on a cache line: the stacked weights of [`StepWeights`].
fn stacked<T: Float>(
    w: Weights<'_, T>,
    sz: SeqSizes,
    gates: usize,
    forward: bool,
) -> (Vec<T>, usize) {
    let (input, hidden) = (sz.input, sz.hidden);
    let width = input + hidden;
    let rows = |r: usize| {
        w.w_ih[r * input..][..input]
            .iter()
            .chain(&w.w_hh[r * hidden..][..hidden])
    };
    if forward {
        let (mut buf, at) = line_buffer((width + 1) * gates);
        let dst = &mut buf[at..];
        for r in 0..gates {
            for (c, &v) in rows(r).enumerate() {
                dst[c * gates + r] = v;
            }
            dst[width * gates + r] = w.b_ih[r] + w.b_hh[r];
        }
        (buf, at)
    } else {
        let (mut buf, at) = line_buffer(gates * width);
        for (r, dst) in buf[at..]
            .chunks_exact_mut(width.max(1))
            .take(gates)
            .enumerate()
        {
            dst.iter_mut().zip(rows(r)).for_each(|(d, &v)| *d = v);
        }
        (buf, at)
    }
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

/// Runs cell `C` over the batch-first input `x` (`[N, T, in]`) from the states `h0`, `c0`,
/// each part of the batch on its own thread.
pub fn sequence_forward<C: Cell, T: Float>(
    x: &[T],
    [h0, c0]: [&[T]; 2],
    w: Weights<'_, T>,
    sz: SeqSizes,
) -> SeqForward<T> {
    let rows = batch_parts(sz.n);
    let (hid, gates) = (sz.hidden, C::GATES * sz.hidden);
    let (copy, at) = if C::SUMS_GATES {
        stacked(w, sz, gates, true)
    } else {
        aligned(w.w_hh, gates, hid, true)
    };
    let step_w = if C::SUMS_GATES {
        StepWeights::Stacked(&copy[at..])
    } else {
        StepWeights::Apart {
            w,
            w_hh: &copy[at..],
        }
    };
    let parts = rows
        .par_iter()
        .map(|r| {
            let x = rows_in(x, r, sz.t * sz.input);
            let states = [rows_in(h0, r, hid), rows_in(c0, r, hid)];
            forward_part::<C, T>(x, states, step_w, SeqSizes { n: r.len(), ..sz })
        })
        .collect();
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
    let (gates, state, saved_len) = (C::GATES * hidden, n * hidden, C::SAVED * n * hidden);
    // Apart: every step's input projection in one product.
    let gi = match step_w {
        StepWeights::Apart { w, .. } => {
            let mut gi = product(
                mat(&swap_leading(x, n, t), 0, t * n, input, false),
                mat(w.w_ih, 0, gates, input, true),
            );
            add_rows(&mut gi, w.b_ih);
            gi
        }
        StepWeights::Stacked(_) => Vec::new(),
    };
    let (mut hs, mut cs) = (h0.to_vec(), c0.to_vec());
    let mut saved = Vec::with_capacity(t * saved_len);
    let stacked_rows = match step_w {
        StepWeights::Stacked(_) => t * n,
        StepWeights::Apart { .. } => 0,
    };
    let mut xh = StepRows::new(stacked_rows, input + hidden + 1);
    for step in 0..t {
        // This step's buffers, zeroed just before the cell writes them (while in cache).
        hs.resize((step + 2) * state, T::zero());
        cs.resize(if C::HAS_C { (step + 2) * state } else { 0 }, T::zero());
        saved.resize((step + 1) * saved_len, T::zero());
        let (h_prev, h_next) = hs[step * state..].split_at_mut(state);
        let (gi, gh) = match step_w {
            StepWeights::Apart { w, w_hh } => {
                let mut gh = product(
                    mat(h_prev, 0, n, hidden, false),
                    mat(w_hh, 0, hidden, gates, false),
                );
                add_rows(&mut gh, w.b_hh);
                (Cow::Borrowed(&gi[step * n * gates..][..n * gates]), gh)
            }
            StepWeights::Stacked(w_t) => {
                let width = input + hidden + 1;
                for r in 0..n {
                    xh.push(row(x, r * t + step, input), row(h_prev, r, hidden));
                }
                let rows = xh.rows(step * n, n);
                (
                    Cow::Owned(product(rows, mat(w_t, 0, width, gates, false))),
                    Vec::new(),
                )
            }
        };
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
    let (hid, gates) = (sz.hidden, C::GATES * sz.hidden);
    let (copy, at) = if C::SUMS_GATES {
        stacked(w, sz, gates, false)
    } else {
        aligned(w.w_hh, gates, hid, false)
    };
    let step_w = if C::SUMS_GATES {
        StepWeights::Stacked(&copy[at..])
    } else {
        StepWeights::Apart {
            w,
            w_hh: &copy[at..],
        }
    };
    let grads: Vec<SeqGrads<T>> = fwd
        .rows
        .par_iter()
        .zip(&fwd.parts)
        .map(|(r, part)| {
            let x = rows_in(x, r, sz.t * sz.input);
            let dout = rows_in(dout, r, sz.t * hid);
            let ups = [dout, rows_in(dh_n, r, hid), rows_in(dc_n, r, hid)];
            backward_part::<C, T>(x, part, step_w, SeqSizes { n: r.len(), ..sz }, ups)
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
    let (mut dgi, mut dgh) = (
        vec![T::zero(); t * n * gates],
        vec![T::zero(); if C::SUMS_GATES { 0 } else { t * n * gates }],
    );
    // Stacked, each step's product gives its input gradient too (batch-major).
    let mut dx = match step_w {
        StepWeights::Stacked(_) => vec![T::zero(); t * n * input],
        StepWeights::Apart { .. } => Vec::new(),
    };
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
        let dgates = mat(dgh, at, n, gates, false);
        dh = match step_w {
            StepWeights::Apart { w_hh, .. } => product(dgates, mat(w_hh, 0, gates, hidden, false)),
            StepWeights::Stacked(w) => {
                // [dx_t | dh] row by row: dx_t to its place, dh to the next step.
                let both = product(dgates, mat(w, 0, gates, input + hidden, false));
                let mut dh = Vec::with_capacity(state);
                for (r, src) in both.chunks_exact(input + hidden).enumerate() {
                    dx[(r * t + step) * input..][..input].copy_from_slice(&src[..input]);
                    dh.extend_from_slice(&src[input..]);
                }
                dh
            }
        };
        accumulate_rows(&mut dh, &dh_direct);
        std::mem::swap(&mut dc, &mut dc_prev);
    }
    let dgh: &[T] = if C::SUMS_GATES { &dgi } else { &dgh };
    let (dx, [dw_ih, dw_hh, db_ih, db_hh]) = match step_w {
        StepWeights::Apart { w, .. } => apart_grads(w, [x, &fwd.hs], [&dgi, dgh], sz, gates),
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
    gates: usize,
) -> (Vec<T>, [Vec<T>; 4]) {
    let rows = sz.t * sz.n;
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
    (
        dx,
        [
            dw_ih,
            dw_hh,
            column_sums(dgi, gates),
            column_sums(dgh, gates),
        ],
    )
}

/// With the projections stacked: `dW_ih`, `dW_hh` and the biases' gradient (both biases
/// have the same one) as one product, `dgatesᵀ·[x_t | h | 1]` over every step.
fn stacked_grads<T: Float>(
    xh: &StepRows<T>,
    dgates: &[T],
    sz: SeqSizes,
    gates: usize,
) -> [Vec<T>; 4] {
    let (rows, input, hidden) = (sz.t * sz.n, sz.input, sz.hidden);
    let width = input + hidden + 1;
    let all = product(mat(dgates, 0, rows, gates, true), xh.rows(0, rows));
    let (mut dw_ih, mut dw_hh, mut db) = (
        Vec::with_capacity(gates * input),
        Vec::with_capacity(gates * hidden),
        Vec::with_capacity(gates),
    );
    for r in all.chunks_exact(width) {
        dw_ih.extend_from_slice(&r[..input]);
        dw_hh.extend_from_slice(&r[input..input + hidden]);
        db.push(r[width - 1]);
    }
    [dw_ih, dw_hh, db.clone(), db]
}
