//! Recurrent cells, fused: the gate activations and state update of one step in one pass over
//! the `[N, G·H]` gate pre-activations. Whole sequences run them in `kernels::sequence`.

use ferrograd_derive::isa_dispatch;

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
pub(super) fn row<T>(x: &[T], r: usize, width: usize) -> &[T] {
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
#[isa_dispatch]
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
