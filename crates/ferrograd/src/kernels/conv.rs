//! Convolution by im2col/col2im around the matrix product, and the window kernels of pooling.
//!
//! `im2col` lays the receptive fields of a chunk of images out as the columns of one
//! `[C·kh·kw, images·Ho·Wo]` matrix (the images side by side), so that a convolution is one
//! wide product with the `[O, C·kh·kw]` weight; `col2im` is its adjoint (it adds each column
//! back where it came from), which is what the transposed convolution and the input gradient
//! need.

use std::ops::Range;

use ferrograd_derive::isa_dispatch;

use super::parallel::{for_each_chunk, run_tasks};
use super::Float;

/// The geometry of a 2-D convolution: input `h × w`, kernel `kh × kw`, strides, padding,
/// dilation, output `ho × wo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geom {
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub ph: usize,
    pub pw: usize,
    pub dh: usize,
    pub dw: usize,
    pub ho: usize,
    pub wo: usize,
}

impl Geom {
    /// Rows of the column matrix per input channel.
    pub fn taps(&self) -> usize {
        self.kh * self.kw
    }

    /// The output positions `o` whose input coordinate `o·stride + offset` lies in `0..size`.
    /// In `i128`: strides, paddings and dilations near `usize::MAX` must not wrap.
    fn valid(out: usize, stride: usize, offset: i128, size: usize) -> std::ops::Range<usize> {
        let (size, stride) = (size as i128, stride as i128);
        // o·stride + offset ≥ 0 and o·stride + offset ≤ size − 1.
        let lo = if offset >= 0 {
            0
        } else {
            (-offset + stride - 1) / stride
        };
        let hi = if size - 1 - offset < 0 {
            0
        } else {
            (size - 1 - offset) / stride + 1
        };
        let clamp = |v: i128| usize::try_from(v.min(out as i128)).unwrap_or(out);
        let (lo, hi) = (clamp(lo), clamp(hi));
        lo.min(hi)..hi
    }

    /// For kernel tap `(i, j)`: the output rows whose input row is inside the image, the
    /// output columns likewise, and the input offsets of output (0, 0).
    fn tap(&self, i: usize, j: usize) -> Tap {
        let oy_off = (i as i128) * (self.dh as i128) - self.ph as i128;
        let ox_off = (j as i128) * (self.dw as i128) - self.pw as i128;
        Tap {
            rows: Self::valid(self.ho, self.sh, oy_off, self.h),
            cols: Self::valid(self.wo, self.sw, ox_off, self.w),
            oy_off,
            ox_off,
        }
    }
}

/// Where one kernel tap reads: the output rows and columns that see the image, and the
/// input offset of output (0, 0) (negative inside the padding).
struct Tap {
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    oy_off: i128,
    ox_off: i128,
}

impl Tap {
    /// Input index (in an `h × w` plane) of output row `oy`'s first valid column (`oy` among
    /// `rows`, so the index lies inside the plane).
    fn src(&self, g: &Geom, oy: usize) -> usize {
        let iy = oy as i128 * g.sh as i128 + self.oy_off;
        let ix = self.cols.start as i128 * g.sw as i128 + self.ox_off;
        usize::try_from(iy * g.w as i128 + ix).expect("a valid tap reads inside the plane")
    }
}

/// One row of a column matrix: what kernel tap `(i, j)` sees of one `h × w` plane at every
/// output position (`dst` is `ho · wo` long; padding reads as zero).
fn tap_row<T: Float>(plane: &[T], g: &Geom, i: usize, j: usize, dst: &mut [T]) {
    let t = g.tap(i, j);
    for (oy, out_row) in dst.chunks_exact_mut(g.wo).enumerate() {
        // A tap that sees only padding on this row (a kernel wider than the padded image).
        if !t.rows.contains(&oy) || t.cols.is_empty() {
            out_row.iter_mut().for_each(|v| *v = T::zero());
            continue;
        }
        out_row[..t.cols.start]
            .iter_mut()
            .for_each(|v| *v = T::zero());
        out_row[t.cols.end..]
            .iter_mut()
            .for_each(|v| *v = T::zero());
        let src = t.src(g, oy);
        let run = &mut out_row[t.cols.clone()];
        if g.sw == 1 {
            run.copy_from_slice(&plane[src..src + run.len()]);
        } else {
            for (k, d) in run.iter_mut().enumerate() {
                *d = plane[src + k * g.sw];
            }
        }
    }
}

/// The adjoint of [`tap_row`]: adds each output position's value back onto the pixel tap
/// `(i, j)` read it from.
fn tap_row_add<T: Float>(src: &[T], g: &Geom, i: usize, j: usize, plane: &mut [T]) {
    let t = g.tap(i, j);
    if t.cols.is_empty() {
        return;
    }
    for oy in t.rows.clone() {
        let at = t.src(g, oy);
        let run = &src[oy * g.wo..][t.cols.clone()];
        if g.sw == 1 {
            for (d, &v) in plane[at..at + run.len()].iter_mut().zip(run) {
                *d += v;
            }
        } else {
            for (d, &v) in plane[at..].iter_mut().step_by(g.sw).zip(run) {
                *d += v;
            }
        }
    }
}

/// The column matrix of a chunk of images side by side: row `(c, i, j)` holds, for each image
/// in turn, what tap `(i, j)` sees of its channel `c` (`cols` is
/// `[channels·kh·kw, images·ho·wo]`). `plane_of(image, c)` gives that channel's `h × w`
/// values. Rows are filled in parallel.
pub(crate) fn im2col<'a, T: Float + 'a>(
    plane_of: impl Fn(usize, usize) -> &'a [T] + Sync,
    images: usize,
    g: &Geom,
    cols: &mut [T],
) {
    let out = g.ho * g.wo;
    for_each_chunk(cols, images * out, |row, dst| {
        let (c, tap) = (row / g.taps(), row % g.taps());
        for (n, seg) in dst.chunks_exact_mut(out.max(1)).enumerate() {
            tap_row(plane_of(n, c), g, tap / g.kw, tap % g.kw, seg);
        }
    });
}

/// The adjoint of [`im2col`] for one image (`img` is its `[channels, h, w]`, accumulated
/// into): `cols` is the whole side-by-side matrix of `images` images, this one `image`.
pub(crate) fn col2im<T: Float>(cols: &[T], images: usize, image: usize, g: &Geom, img: &mut [T]) {
    let out = g.ho * g.wo;
    let row_len = images * out;
    for (c, plane) in img.chunks_exact_mut((g.h * g.w).max(1)).enumerate() {
        for tap in 0..g.taps() {
            let src = &cols[(c * g.taps() + tap) * row_len + image * out..][..out];
            tap_row_add(src, g, tap / g.kw, tap % g.kw, plane);
        }
    }
}

/// Output channels per block of the direct kernel for `o` outputs: one AVX-512 register of
/// f32 (16), or half of one when there are at most 8 outputs (a block of 16 would compute
/// zeros in half its lanes).
pub(crate) fn direct_lanes(o: usize) -> usize {
    if o <= 8 {
        8
    } else {
        16
    }
}

/// `o` rounded up to whole blocks of [`direct_lanes`]: the row length of the direct
/// kernel's weight layout.
pub(crate) fn direct_width(o: usize) -> usize {
    o.div_ceil(direct_lanes(o)) * direct_lanes(o)
}

/// Direct convolution (no column matrix) of every image: `x` is `[N, C, h, w]`, `wt` the weight
/// laid out `[C, kh, kw, O']` with `O'` the output channels rounded up to [`direct_lanes`]
/// (zeros beyond `o`), so that each tap is one vector operation over a block of outputs; `y`
/// `[N, O, ho, wo]` (overwritten). Where the channels are few the column matrix is mostly
/// copies of the input, and this reads the input in place instead.
pub(crate) fn direct_conv<T: Float>(x: &[T], c: usize, g: &Geom, wt: &[T], o: usize, y: &mut [T]) {
    let (image, out) = (c * g.h * g.w, o * g.ho * g.wo);
    for_each_chunk(y, out, |i, y| {
        direct_conv_image(&x[i * image..][..image], c, g, wt, o, y);
    });
}

/// [`direct_conv`] of one image, compiled for each instruction set.
#[isa_dispatch]
fn direct_conv_image<T: Float>(x: &[T], c: usize, g: &Geom, wt: &[T], o: usize, y: &mut [T]) {
    let (padded, hp, wp) = padded_image(x, c, g);
    let d = Direct {
        padded: &padded,
        wp,
        hp,
        c,
        g,
        wt,
        o,
    };
    if direct_lanes(o) == 8 {
        d.rows::<8, 8>(y);
    } else {
        d.rows::<4, 16>(y);
    }
}

/// A zero-padded copy of one image `[C, h, w]`, so that every tap reads inside it, and its
/// padded height and width.
fn padded_image<T: Float>(x: &[T], c: usize, g: &Geom) -> (Vec<T>, usize, usize) {
    let (hp, wp) = (g.h + 2 * g.ph, g.w + 2 * g.pw);
    let mut padded = vec![T::zero(); c * hp * wp];
    for (ci, plane) in x.chunks_exact((g.h * g.w).max(1)).enumerate() {
        for (r, row) in plane.chunks_exact(g.w.max(1)).enumerate() {
            padded[(ci * hp + r + g.ph) * wp + g.pw..][..g.w].copy_from_slice(row);
        }
    }
    (padded, hp, wp)
}

/// The weight gradient of [`direct_conv`] summed over the images: `x` `[N, C, h, w]`, `dy`
/// `[N, O, ho, wo]`; the result has the layout of `direct_conv`'s weight, `[C, kh, kw, O']`.
/// Threads take fixed runs of images and their sums are added in order, so the result does
/// not depend on how the work was scheduled (a run gives the same weights every time).
pub(crate) fn direct_conv_weight<T: Float>(
    x: &[T],
    dy: &[T],
    c: usize,
    g: &Geom,
    o: usize,
) -> Vec<T> {
    let (image, out) = (c * g.h * g.w, o * g.ho * g.wo);
    let len = c * g.taps() * direct_width(o);
    let per_run = images_per_run(x.len().checked_div(image).unwrap_or(0));
    sum_over_runs(x, dy, (image, out, len), per_run, |xs, dys, acc| {
        for (x, dy) in xs.chunks(image.max(1)).zip(dys.chunks(out.max(1))) {
            direct_weight_image(x, dy, c, g, o, acc);
        }
    })
}

/// Images per run of [`sum_over_runs`] for a batch of `n`: enough runs for the threads (a
/// kernel whose runs cost more to sum may take longer ones).
pub(super) fn images_per_run(n: usize) -> usize {
    n.div_ceil(WEIGHT_RUNS).max(1)
}

/// A weight gradient's sum over the images of `x` (`image` elements each) and `dy` (`out`
/// each): `add_run` adds each fixed run of `per_run` images (at least one) into its own `len`
/// sums, on any thread, and the runs' sums are added in order, so the result does not depend
/// on how the work was scheduled (a run gives the same weights every time).
pub(super) fn sum_over_runs<T: Float>(
    x: &[T],
    dy: &[T],
    (image, out, len): (usize, usize, usize),
    per_run: usize,
    add_run: impl Fn(&[T], &[T], &mut [T]) + Sync,
) -> Vec<T> {
    let per_run = per_run.max(1);
    let runs = x
        .chunks((image * per_run).max(1))
        .zip(dy.chunks((out * per_run).max(1)));
    let partials: Vec<Vec<T>> = run_tasks(runs.collect(), |(xs, dys)| {
        let mut acc = vec![T::zero(); len];
        add_run(xs, dys, &mut acc);
        acc
    });
    let mut parts = partials.into_iter();
    let mut total = parts.next().unwrap_or_else(|| vec![T::zero(); len]);
    let rest: Vec<Vec<T>> = parts.collect();
    // Each element adds the runs in order, whichever thread takes its block.
    for_each_chunk(&mut total, SUM_BLOCK, |b, block| {
        for part in &rest {
            let part = &part[b * SUM_BLOCK..][..block.len()];
            block.iter_mut().zip(part).for_each(|(t, &p)| *t += p);
        }
    });
    total
}

/// Sums per block of the final addition of [`sum_over_runs`]: a few L1 caches' worth.
const SUM_BLOCK: usize = 1 << 12;

/// Runs of images a weight gradient sums separately ([`sum_over_runs`]): enough for the
/// threads, fixed so that the order of the sums is too.
const WEIGHT_RUNS: usize = 16;

/// One image's share of [`direct_conv_weight`], added into `acc`; compiled for each
/// instruction set.
#[isa_dispatch]
fn direct_weight_image<T: Float>(x: &[T], dy: &[T], c: usize, g: &Geom, o: usize, acc: &mut [T]) {
    let (padded, hp, wp) = padded_image(x, c, g);
    // dy with the output channels innermost (zeros past o): [ho·wo, O'].
    let (plane, lanes, stride) = (g.ho * g.wo, direct_lanes(o), direct_width(o));
    let mut dyt = vec![T::zero(); plane * stride];
    for (oc, channel) in dy.chunks_exact(plane.max(1)).enumerate() {
        for (p, &v) in channel.iter().enumerate() {
            dyt[p * stride + oc] = v;
        }
    }
    let d = Direct {
        padded: &padded,
        wp,
        hp,
        c,
        g,
        wt: &dyt,
        o,
    };
    if lanes == 8 {
        d.weight_taps::<8, 8>(acc);
    } else {
        d.weight_taps::<4, 16>(acc);
    }
}

/// One image's operands for the direct kernel.
struct Direct<'a, T> {
    padded: &'a [T],
    wp: usize,
    hp: usize,
    c: usize,
    g: &'a Geom,
    wt: &'a [T],
    o: usize,
}

impl<T: Float> Direct<'_, T> {
    /// For the weight gradient (`wt` holding dy transposed, `[ho·wo, O']`): adds to `acc`
    /// (`[C, kh, kw, O']`) each tap's sum over the positions, `P` positions at a time.
    #[inline(always)]
    fn weight_taps<const P: usize, const L: usize>(&self, acc: &mut [T]) {
        let Direct {
            padded,
            wp,
            hp,
            c,
            g,
            wt: dyt,
            o,
        } = *self;
        let stride = o.div_ceil(L) * L;
        for ci in 0..c {
            for (i, j) in (0..g.kh).flat_map(|i| (0..g.kw).map(move |j| (i, j))) {
                let tap = (ci * g.kh + i) * g.kw + j;
                for b in 0..stride / L {
                    let mut sums = [[T::zero(); L]; P];
                    for oy in 0..g.ho {
                        let row = (ci * hp + oy * g.sh + i * g.dh) * wp + j * g.dw;
                        let at = |ox: usize| (oy * g.wo + ox) * stride + b * L;
                        let mut ox = 0;
                        while ox + P <= g.wo {
                            for (q, s) in sums.iter_mut().enumerate() {
                                let v = padded[row + (ox + q) * g.sw];
                                let d: &[T; L] = dyt[at(ox + q)..][..L].try_into().expect("L");
                                for l in 0..L {
                                    s[l] = d[l].mul_add(v, s[l]);
                                }
                            }
                            ox += P;
                        }
                        // The rest of the row spread over the P sums: independent chains.
                        for (q, ox) in (ox..g.wo).enumerate() {
                            let v = padded[row + ox * g.sw];
                            let d: &[T; L] = dyt[at(ox)..][..L].try_into().expect("L");
                            let s = &mut sums[q % P];
                            for l in 0..L {
                                s[l] = d[l].mul_add(v, s[l]);
                            }
                        }
                    }
                    let out = &mut acc[tap * stride + b * L..][..L];
                    for s in &sums {
                        for l in 0..L {
                            out[l] += s[l];
                        }
                    }
                }
            }
        }
    }

    /// Every output, `P` positions at a time (`P` independent sums per tap instead of one
    /// chain of dependent multiply-adds) and `L` output channels at a time.
    #[inline(always)]
    fn rows<const P: usize, const L: usize>(&self, y: &mut [T]) {
        let wo = self.g.wo;
        for oy in 0..self.g.ho {
            let mut ox = 0;
            while ox + P <= wo {
                self.pixels::<P, L>(oy, ox, y);
                ox += P;
            }
            if ox < wo && wo >= P {
                // The row's last P outputs again, overlapping the block before: outputs are
                // written, not added, and one more block of P independent sums is much faster
                // than the remaining outputs one by one (each a single chain of dependent
                // multiply-adds).
                self.pixels::<P, L>(oy, wo - P, y);
            } else {
                for ox in ox..wo {
                    self.pixels::<1, L>(oy, ox, y);
                }
            }
        }
    }

    /// Outputs `(oy, ox..ox + P)` of every output channel into `y` (`[O, ho, wo]`).
    #[inline(always)]
    fn pixels<const P: usize, const L: usize>(&self, oy: usize, ox: usize, y: &mut [T]) {
        let Direct {
            padded,
            wp,
            hp,
            c,
            g,
            wt,
            o,
        } = *self;
        let (plane, blocks) = (g.ho * g.wo, o.div_ceil(L));
        let stride = blocks * L;
        for b in 0..blocks {
            let mut acc = [[T::zero(); L]; P];
            for ci in 0..c {
                for i in 0..g.kh {
                    let row = (ci * hp + oy * g.sh + i * g.dh) * wp + ox * g.sw;
                    let taps = ((ci * g.kh + i) * g.kw) * stride + b * L;
                    for j in 0..g.kw {
                        let w: &[T; L] = wt[taps + j * stride..][..L]
                            .try_into()
                            .expect("a block of L weights");
                        for (p, acc) in acc.iter_mut().enumerate() {
                            let v = padded[row + p * g.sw + j * g.dw];
                            for l in 0..L {
                                acc[l] = w[l].mul_add(v, acc[l]);
                            }
                        }
                    }
                }
            }
            for (p, acc) in acc.iter().enumerate() {
                for (l, &a) in acc.iter().enumerate().take(o - b * L) {
                    y[(b * L + l) * plane + oy * g.wo + ox + p] = a;
                }
            }
        }
    }
}

/// Max pooling of one `[h, w]` plane: each output's maximum (NaN wins, as in PyTorch) and the
/// flat input index it came from (the first at ties). Padding never wins (it is −∞).
pub(crate) fn max_pool_plane<T: Float>(x: &[T], g: &Geom, out: &mut [T], arg: &mut [usize]) {
    let plain = (g.sh, g.sw, g.ph, g.pw, g.dh, g.dw) == (2, 2, 0, 0, 1, 1);
    if plain && (g.kh, g.kw) == (2, 2) {
        return max_pool_2x2(x, g, out, arg);
    }
    for oy in 0..g.ho {
        // Only the taps that land inside the plane: the kernel may be far larger than it.
        let rows = inside_taps(oy * g.sh, g.ph, g.dh, g.kh, g.h);
        for ox in 0..g.wo {
            let mut best = T::neg_infinity();
            let mut at = usize::MAX;
            for i in rows.clone() {
                let iy = oy * g.sh + i * g.dh - g.ph;
                for j in inside_taps(ox * g.sw, g.pw, g.dw, g.kw, g.w) {
                    let ix = ox * g.sw + j * g.dw - g.pw;
                    let idx = iy * g.w + ix;
                    let v = x[idx];
                    if at == usize::MAX || v > best || (v.is_nan() && !best.is_nan()) {
                        best = v;
                        at = idx;
                    }
                }
            }
            out[oy * g.wo + ox] = best;
            arg[oy * g.wo + ox] = at;
        }
    }
}

/// The taps `t < taps` of a window starting at `origin` in padded coordinates (taps `step`
/// apart, `pad` before the `size` inputs) that land on an input: `origin + t·step − pad` in
/// `0..size`. Its cost does not depend on the number of taps.
fn inside_taps(origin: usize, pad: usize, step: usize, taps: usize, size: usize) -> Range<usize> {
    let first = pad.saturating_sub(origin).div_ceil(step);
    let end = (size + pad).saturating_sub(origin).div_ceil(step);
    first.min(taps)..end.min(taps)
}

/// [`max_pool_plane`] for the common 2×2 window with stride 2 and no padding: every window
/// inside the plane, so no bounds to test, and its four candidates compared in the same
/// order (row by row) with the same rule.
fn max_pool_2x2<T: Float>(x: &[T], g: &Geom, out: &mut [T], arg: &mut [usize]) {
    for (oy, (out, arg)) in out
        .chunks_exact_mut(g.wo.max(1))
        .zip(arg.chunks_exact_mut(g.wo.max(1)))
        .take(g.ho)
        .enumerate()
    {
        let (top, bottom) = (2 * oy * g.w, (2 * oy + 1) * g.w);
        let rows = (&x[top..top + 2 * g.wo], &x[bottom..bottom + 2 * g.wo]);
        for (ox, (o, a)) in out.iter_mut().zip(arg.iter_mut()).enumerate() {
            let at = [
                top + 2 * ox,
                top + 2 * ox + 1,
                bottom + 2 * ox,
                bottom + 2 * ox + 1,
            ];
            let v = [
                rows.0[2 * ox],
                rows.0[2 * ox + 1],
                rows.1[2 * ox],
                rows.1[2 * ox + 1],
            ];
            let mut best = 0;
            for t in 1..4 {
                if v[t] > v[best] || (v[t].is_nan() && !v[best].is_nan()) {
                    best = t;
                }
            }
            *o = v[best];
            *a = at[best];
        }
    }
}

/// Windows along one axis: output `o` averages input `start[o]..end[o]` and divides by
/// `div[o]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Windows {
    pub start: Vec<usize>,
    pub end: Vec<usize>,
    pub div: Vec<f64>,
}

/// `f(k, rows, div)` for every output `k` of a plane of width `w`: `rows` are the row-major
/// ranges its window covers, `div` what it is divided by.
fn each_window(
    w: usize,
    [wy, wx]: &[Windows; 2],
    mut f: impl FnMut(usize, &mut dyn Iterator<Item = std::ops::Range<usize>>, f64),
) {
    let wo = wx.start.len();
    for (oy, (&y0, &y1)) in wy.start.iter().zip(&wy.end).enumerate() {
        for (ox, (&x0, &x1)) in wx.start.iter().zip(&wx.end).enumerate() {
            let mut rows = (y0..y1).map(|iy| iy * w + x0..iy * w + x1);
            f(oy * wo + ox, &mut rows, wy.div[oy] * wx.div[ox]);
        }
    }
}

/// `out[oy, ox] = Σ x[window] / (div_y[oy] · div_x[ox])` for one plane.
/// `windows` are the rows' and the columns'; `w` is the input's width.
pub(crate) fn window_mean_plane<T: Float>(
    x: &[T],
    w: usize,
    windows: &[Windows; 2],
    out: &mut [T],
) {
    each_window(w, windows, |k, rows, div| {
        let s: T = rows.map(|r| x[r].iter().copied().sum::<T>()).sum();
        out[k] = s / T::from_f64(div);
    });
}

/// The adjoint of [`window_mean_plane`]: each output's value, divided as there, added to every
/// input of its window (`x` is accumulated into).
pub(crate) fn window_mean_plane_t<T: Float>(
    up: &[T],
    w: usize,
    windows: &[Windows; 2],
    x: &mut [T],
) {
    each_window(w, windows, |k, rows, div| {
        let v = up[k] / T::from_f64(div);
        rows.for_each(|r| x[r].iter_mut().for_each(|d| *d += v));
    });
}
