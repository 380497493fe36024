//! Convolution of small images over channels-last copies (f32, AVX2 or AVX-512).
//!
//! Where output rows are short (the 7×7 and 14×14 maps of a DCGAN, anything narrower than two
//! vectors), the implicit products of `implicit_conv.rs` leave lanes empty or gather positions
//! into panels.
//! Here the roles turn: each image is copied channels-last and padded (`[hp, wp, C]`), the
//! output positions are the rows of the product and the output channels its vectors. The taps
//! of one kernel row at one position are then a single run of `kw · C` floats (the width's
//! dilation is 1), read in place. A transposed convolution under a stride splits into one
//! such product per output phase (the outputs `oy ≡ ry`, `ox ≡ rx` modulo the stride), each
//! reading only the taps that land on it: no column matrix and no col2im.

use std::ops::Range;

use super::conv::{images_per_run, sum_over_runs, Geom};
use super::lined::Lined;
use super::parallel::run_tasks_with;
use super::sgemm::{self, Gathered};
use super::Float;

/// Whether the channels-last kernels run a convolution of geometry `g` from `c` to `o`
/// channels, its weight gradient, or its transpose (from `o` to `c`): f32 on a CPU with
/// AVX2 or AVX-512, the convolution's output rows narrower than two vectors (for the transpose, its
/// input rows, which are also its output phases' rows), enough channels on both sides to fill
/// the runs and the vectors, no dilation along the width, and padded copies within a few
/// times the images.
pub(crate) fn applies<T: Float>(g: &Geom, c: usize, o: usize) -> bool {
    T::as_f32(&[]).is_some()
        && sgemm::available()
        && g.wo < MAX_WIDTH
        && c >= MIN_CHANNELS
        && o >= MIN_CHANNELS
        && g.dw == 1
        && g.ph <= g.dh * (g.kh - 1)
        && g.pw < g.kw
        && Plan::conv(g, c).is_some()
        && Plan::transposed(g, o).is_some()
}

/// Output widths from which the implicit products, reading whole rows of positions in place,
/// are as fast as these (measured for the convolution and its input gradient; narrower rows
/// leave their vectors partly empty).
const MAX_WIDTH: usize = 32;

/// Channels below which a run (`kw · C` floats) or the vectors of output channels would be
/// mostly empty: the other kernels serve those.
const MIN_CHANNELS: usize = 16;

/// Where a padded copy puts an image: `top` rows and `left` columns of zeros before it, `hp`
/// rows of `wp` pixels of `c` channels in all.
#[derive(Clone, Copy, Debug)]
struct Pad {
    top: usize,
    left: usize,
    hp: usize,
    wp: usize,
    c: usize,
}

impl Pad {
    /// Floats per padded image.
    fn len(&self) -> usize {
        self.hp * self.wp * self.c
    }

    /// Where padded pixel `(row, col)` starts in a padded image.
    fn at(&self, (row, col): (usize, usize)) -> usize {
        (row * self.wp + col) * self.c
    }
}

/// Output coordinates `first + every · a` for `a < count` along one axis.
#[derive(Clone, Copy, Debug)]
struct Line {
    count: usize,
    first: usize,
    every: usize,
}

/// The products over the padded copies that share one weight (laid out in the runs' order),
/// one per group of columns: the output positions they compute and where their runs start.
struct Pass {
    rows: Line,
    cols: Line,
    /// Padded pixels between neighbouring positions, down and across.
    step: (usize, usize),
    /// Where each run starts (padded row and column) for position (0, 0).
    starts: Vec<(usize, usize)>,
    /// The same as float offsets into a padded copy.
    runs: Vec<usize>,
    /// Taps per run along the width.
    width: usize,
    /// The kernel taps (`ky·kw + kx`) whose weights the product's rows hold, run by run, in
    /// the order the runs read them.
    taps: Vec<usize>,
    /// The columns of positions that see the same taps of every run inside the image (the
    /// others only padding), each with those taps: a run's taps are skipped where they
    /// would read only padding columns.
    groups: Vec<Group>,
}

/// Columns `cols` of a pass's positions, whose runs read the image with taps `taps` of
/// each run (and only padding with the others).
#[derive(Clone, Debug)]
struct Group {
    cols: Range<usize>,
    taps: Range<usize>,
}

impl Pass {
    /// Where every position of `images` padded copies starts into `at`, group by group and
    /// within a group row by row across the images (position `(a·images + i)·n + b` of a
    /// group of `n` columns is row `a`, column `cols.start + b` of image `i`, so that the
    /// positions a run reads are one span), and 3 more entries (copies of the first).
    fn positions(&self, pad: &Pad, images: usize, at: &mut Vec<usize>) {
        at.clear();
        for group in &self.groups {
            for a in 0..self.rows.count {
                for i in 0..images {
                    let row = (i * pad.hp + a * self.step.0) * pad.wp;
                    let cols = group.cols.clone();
                    at.extend(cols.map(|b| (row + b * self.step.1) * pad.c));
                }
            }
        }
        let first = at.first().copied().unwrap_or(0);
        at.extend([first; 3]);
    }

    /// Where each position's output channels go in a product laid out `[images, ho, wo, o]`
    /// (the output channels-last), in the order of [`Pass::positions`], into `at`.
    fn outputs(&self, images: usize, (ho, wo, o): (usize, usize, usize), at: &mut Vec<usize>) {
        at.clear();
        let (rows, cols) = (self.rows, self.cols);
        for group in &self.groups {
            for a in 0..rows.count {
                for i in 0..images {
                    let row = i * ho + rows.first + a * rows.every;
                    let pixels = group.cols.clone().map(|b| cols.first + b * cols.every);
                    at.extend(pixels.map(|col| (row * wo + col) * o));
                }
            }
        }
    }

    /// For each output pixel of `images` images (`ho × wo` each), its position in the order
    /// of [`Pass::positions`], into `rows`; pixels of no position follow, in order. The
    /// inverse of [`Pass::outputs`] (one channel a pixel), which goes into `pixels`.
    fn pixel_rows(
        &self,
        images: usize,
        (ho, wo): (usize, usize),
        (rows, pixels): (&mut Vec<usize>, &mut Vec<usize>),
    ) {
        self.outputs(images, (ho, wo, 1), pixels);
        rows.clear();
        rows.resize(images * ho * wo, usize::MAX);
        for (q, &p) in pixels.iter().enumerate() {
            rows[p] = q;
        }
        let unread = rows.iter_mut().filter(|r| **r == usize::MAX);
        for (next, r) in (pixels.len()..).zip(unread) {
            *r = next;
        }
    }

    /// Positions of `images` images in all the groups.
    fn count(&self, images: usize) -> usize {
        let cols: usize = self.groups.iter().map(|g| g.cols.len()).sum();
        images * self.rows.count * cols
    }

    /// `f(first, a)` for each group of the positions of `images` padded copies `padded`
    /// (their offsets `at`, from [`Pass::positions`]): `first` is the group's first position
    /// and `a` its column matrix, whose runs start at the group's first tap and meet the
    /// weight from that tap's rows on (`h` is the image's height).
    fn for_groups(
        &self,
        (pad, h, images): (&Pad, usize, usize),
        (padded, at): (&[f32], &[usize]),
        mut f: impl FnMut(usize, Gathered<'_>),
    ) {
        let mut first = 0;
        for group in &self.groups {
            let n = images * self.rows.count * group.cols.len();
            let skip = group.taps.start * pad.c;
            let shifted: Vec<usize> = self.runs.iter().map(|r| r + skip).collect();
            let b_rows: Vec<usize> = (0..self.runs.len())
                .map(|t| t * self.width * pad.c + skip)
                .collect();
            let spans = self.spans(pad, h, images * group.cols.len());
            let a = Gathered {
                base: padded,
                at: &at[first..first + n + 3],
                positions: n,
                runs: &shifted,
                spans: &spans,
                b_rows: &b_rows,
                run: group.taps.len() * pad.c,
            };
            f(first, a);
            first += n;
        }
    }

    /// For each run, the positions of a group of `per_row` positions a row (ordered as
    /// [`Pass::positions`]) where it reads a row of the image (`h` rows high) rather than
    /// padding.
    fn spans(&self, pad: &Pad, h: usize, per_row: usize) -> Vec<Range<usize>> {
        let step = self.step.0;
        let span = |&(r, _): &(usize, usize)| {
            // The rows a with top ≤ a·step + r < top + h.
            let lo = pad.top.saturating_sub(r).div_ceil(step);
            let hi = (pad.top + h).saturating_sub(r).div_ceil(step);
            let hi = hi.min(self.rows.count);
            lo.min(hi) * per_row..hi * per_row
        };
        self.starts.iter().map(span).collect()
    }
}

/// The columns of `count` positions that see the same taps inside the image: position `b`
/// reads padded columns `start + b·step + j` for the taps `j < width`, the image being
/// columns `before..before + size`. Positions that see only padding are left out.
fn column_groups(
    count: usize,
    (start, step): (usize, usize),
    width: usize,
    (before, size): (usize, usize),
) -> Vec<Group> {
    let taps = |b: usize| {
        let col = start + b * step;
        let lo = before.saturating_sub(col).min(width);
        let hi = (before + size).saturating_sub(col).min(width);
        lo..hi.max(lo)
    };
    let mut groups: Vec<Group> = Vec::new();
    for b in 0..count {
        let t = taps(b);
        match groups.last_mut() {
            Some(g) if g.taps == t => g.cols.end = b + 1,
            _ => groups.push(Group {
                cols: b..b + 1,
                taps: t,
            }),
        }
    }
    groups.retain(|g| !g.taps.is_empty());
    groups
}

/// The padded copy and the products of a convolution or of its transpose.
struct Plan {
    pad: Pad,
    passes: Vec<Pass>,
}

impl Plan {
    /// The convolution of geometry `g` over `c` channels: one pass, a run per kernel row.
    fn conv(g: &Geom, c: usize) -> Option<Plan> {
        let pad = Pad {
            top: g.ph,
            left: g.pw,
            hp: g.h.checked_add(g.ph.checked_mul(2)?)?,
            wp: g.w.checked_add(g.pw.checked_mul(2)?)?,
            c,
        };
        let pass = Pass {
            rows: Line {
                count: g.ho,
                first: 0,
                every: 1,
            },
            cols: Line {
                count: g.wo,
                first: 0,
                every: 1,
            },
            step: (g.sh, g.sw),
            starts: (0..g.kh).map(|i| (i * g.dh, 0)).collect(),
            runs: (0..g.kh).map(|i| pad.at((i * g.dh, 0))).collect(),
            width: g.kw,
            taps: (0..g.taps()).collect(),
            groups: column_groups(g.wo, (0, g.sw), g.kw, (g.pw, g.w)),
        };
        Plan::checked(pad, vec![pass], c.checked_mul(g.h)?.checked_mul(g.w)?)
    }

    /// The transposed convolution of `g` (from `g.ho × g.wo` to `g.h × g.w`) over `c` input
    /// channels: a pass per output phase that some tap reaches along both axes.
    fn transposed(g: &Geom, c: usize) -> Option<Plan> {
        let ys = Phases::new(g.h, g.ho, g.sh, g.ph, (g.kh, g.dh))?;
        let xs = Phases::new(g.w, g.wo, g.sw, g.pw, (g.kw, 1))?;
        let pad = Pad {
            top: ys.before,
            left: xs.before,
            hp: ys.padded,
            wp: xs.padded,
            c,
        };
        let mut passes = Vec::new();
        for (ry, ty) in &ys.phases {
            for (rx, tx) in &xs.phases {
                // The run's columns ascend as its taps descend: it starts at the last tap's.
                let left = tx.last().map_or(0, |&(_, col)| col);
                let taps = ty
                    .iter()
                    .flat_map(|&(ky, _)| tx.iter().rev().map(move |&(kx, _)| ky * g.kw + kx));
                let cols = xs.line(*rx);
                passes.push(Pass {
                    rows: ys.line(*ry),
                    cols,
                    step: (1, 1),
                    starts: ty.iter().map(|&(_, row)| (row, left)).collect(),
                    runs: ty.iter().map(|&(_, row)| pad.at((row, left))).collect(),
                    width: tx.len(),
                    taps: taps.collect(),
                    groups: column_groups(cols.count, (left, 1), tx.len(), (xs.before, g.wo)),
                });
            }
        }
        Plan::checked(pad, passes, c.checked_mul(g.ho)?.checked_mul(g.wo)?)
    }

    /// The plan when its padded copy stays within a few times the `image` floats it holds (a
    /// huge padding or dilation would make it mostly zeros) and its offsets are computable.
    fn checked(pad: Pad, passes: Vec<Pass>, image: usize) -> Option<Plan> {
        let len = pad.hp.checked_mul(pad.wp)?.checked_mul(pad.c)?;
        let bound = image.saturating_mul(16).saturating_add(1 << 16);
        (len <= bound && len.checked_mul(IMAGES_PER_CHUNK).is_some())
            .then_some(Plan { pad, passes })
    }

    /// The convolution weight `w` (`[O, C, kh, kw]`) as the product's `[runs · width · C, O']`
    /// for the one pass of [`Plan::conv`]: rows by kernel row, column and channel.
    fn conv_weight(g: &Geom, w: &[f32], c: usize, o: usize) -> Weight {
        let (taps, k) = (g.taps(), g.taps() * c);
        // Each filter [C, taps] to [taps, C], then the filters [O, k] to [k, O'].
        let mut filters = vec![0.0f32; o * k];
        for (src, dst) in w.chunks_exact(k).zip(filters.chunks_exact_mut(k)) {
            sgemm::transpose(src, (c, taps), taps, dst, c);
        }
        let mut wt = Weight::zeros(k, o);
        let (rows, ld) = wt.data_mut();
        sgemm::transpose(&filters, (o, k), k, rows, ld);
        wt
    }

    /// The transposed convolution's weight `w` (`[C, O, kh, kw]`, `taps` per filter) as each
    /// pass's product weight: rows by the pass's taps, then the channels.
    fn transposed_weights(&self, w: &[f32], taps: usize, o: usize) -> Vec<Weight> {
        let c = self.pad.c;
        // Each input channel's [O, taps] to [taps, O]: every (channel, tap) a row of O.
        let mut rows = vec![0.0f32; c * taps * o];
        for (src, dst) in w
            .chunks_exact(o * taps)
            .zip(rows.chunks_exact_mut(o * taps))
        {
            sgemm::transpose(src, (o, taps), taps, dst, o);
        }
        let weight = |pass: &Pass| {
            let mut wt = Weight::zeros(pass.taps.len() * c, o);
            for (t, &tap) in pass.taps.iter().enumerate() {
                for ci in 0..c {
                    let src = &rows[(ci * taps + tap) * o..][..o];
                    wt.row_mut(t * c + ci).copy_from_slice(src);
                }
            }
            wt
        };
        self.passes.iter().map(weight).collect()
    }
}

/// The output phases of a transposed convolution along one axis: output `r + s·a` (for
/// `a < count(r)`) takes, from each tap `k` with `r + p − k·d ≡ 0 (mod s)`, input
/// `a + (r + p − k·d)/s`.
struct Phases {
    out: usize,
    stride: usize,
    /// The phases some tap reaches, in order: each one's taps (ascending) and the padded
    /// input coordinate each reads for `a = 0`.
    phases: Vec<(usize, Vec<(usize, usize)>)>,
    /// Zeros before the input, and the padded length.
    before: usize,
    padded: usize,
}

impl Phases {
    fn new(out: usize, inp: usize, s: usize, p: usize, (k, d): (usize, usize)) -> Option<Phases> {
        // Built from the taps (a stride may be far larger than the kernel, and an empty batch
        // allows any output size): tap `kk` lands on phase (kk·d − p) mod s. Signed offsets:
        // i128 holds any difference of two usize.
        let mut by_phase: std::collections::BTreeMap<usize, Vec<(usize, i128)>> =
            Default::default();
        let (mut lo, mut hi) = (0i128, inp as i128);
        for kk in 0..k {
            let v = p as i128 - kk as i128 * d as i128;
            let r = (-v).rem_euclid(s as i128) as usize;
            if r >= out {
                continue;
            }
            let delta = (r as i128 + v) / s as i128;
            lo = lo.min(delta);
            hi = hi.max(delta + (out - r).div_ceil(s) as i128);
            by_phase.entry(r).or_default().push((kk, delta));
        }
        let before = usize::try_from(-lo).ok()?;
        let padded = usize::try_from(hi - lo).ok()?;
        let at = |(kk, delta): (usize, i128)| (kk, (delta - lo) as usize);
        let phases = by_phase
            .into_iter()
            .map(|(r, taps)| (r, taps.into_iter().map(at).collect()))
            .collect();
        Some(Phases {
            out,
            stride: s,
            phases,
            before,
            padded,
        })
    }

    fn line(&self, r: usize) -> Line {
        Line {
            count: (self.out - r).div_ceil(self.stride),
            first: r,
            every: self.stride,
        }
    }
}

/// A product weight `[rows, O']`, `O'` the output channels rounded up to whole vectors (zeros
/// past them), every row on a cache line.
type Weight = Lined<f32>;

/// Output positions per run of the weight gradient's sum, at least.
const MIN_RUN_POSITIONS: usize = 1024;

/// Images a thread copies and multiplies at a time: their padded copies and outputs stay in
/// its cache, and the few columns at the edges of the maps (whose runs skip the taps that
/// would read padding) still make products of several panels.
const IMAGES_PER_CHUNK: usize = 8;

/// `images` images `x` (`[images, C, h, w]`) into their padded channels-last copies (reused:
/// only the borders are zeroed again), with 16 zeros past the last (the weight gradient's
/// panels read up to 3 past a run).
fn pad_channels_last(x: &[f32], (h, w): (usize, usize), pad: &Pad, out: &mut Vec<f32>) {
    let image = pad.c * h * w;
    let images = x.len() / image.max(1);
    out.resize(images * pad.len() + 16, 0.0);
    let (copies, spare) = out.split_at_mut(images * pad.len());
    spare.fill(0.0);
    for (src, dst) in x
        .chunks_exact(image.max(1))
        .zip(copies.chunks_exact_mut(pad.len().max(1)))
    {
        zero_border(dst, pad, (h, w));
        // [C, h·w] to [h·w, C], each pixel's channels into place: whole 8 × 8 blocks across
        // the rows of the image, where one row at a time would leave them partly empty.
        let pixel = |p: usize| pad.at((p / w + pad.top, p % w + pad.left));
        sgemm::transpose_to(src, (pad.c, h * w), h * w, dst, pixel);
    }
}

/// Zeros around the `h × w` image in its padded copy `dst`.
fn zero_border(dst: &mut [f32], pad: &Pad, (h, w): (usize, usize)) {
    let (top, bottom) = (pad.at((pad.top, 0)), pad.at((pad.top + h, 0)));
    dst[..top].fill(0.0);
    dst[bottom..].fill(0.0);
    for r in pad.top..pad.top + h {
        dst[pad.at((r, 0))..pad.at((r, pad.left))].fill(0.0);
        dst[pad.at((r, pad.left + w))..pad.at((r + 1, 0))].fill(0.0);
    }
}

/// A chunk's buffers in [`run_plan`]: its padded channels-last images, one pass's gathered
/// positions and output rows, and the product's channels-last output.
type Scratch = (Vec<f32>, Vec<usize>, Vec<usize>, Vec<f32>);

/// Convolution (`conv`) or transposed convolution of every image through `plan`: `x` is
/// `[N, C, h, w]` (C the plan's channels), `weights` one per pass, `y` `[N, O, ho, wo]`
/// (overwritten; outputs no tap reaches are zero). Chunks of images run in parallel: the
/// passes of a chunk add into its output laid out channels-last, which is then transposed
/// into place image by image.
fn run_plan(
    plan: &Plan,
    x: &[f32],
    (h, w): (usize, usize),
    weights: &[Weight],
    (o, ho, wo): (usize, usize, usize),
    y: &mut [f32],
) {
    let (image, plane) = (plan.pad.c * h * w, ho * wo);
    if image == 0 {
        // Empty images (no rows, say, but padding enough for outputs): nothing reaches y.
        y.fill(0.0);
        return;
    }
    let n = x.len() / image;
    // Fewer images a chunk when there are too few chunks for the threads.
    let per = (n / crate::kernels::parallel::threads()).clamp(1, IMAGES_PER_CHUNK);
    let chunks = y
        .chunks_mut((per * o * plane).max(1))
        .zip(x.chunks((per * image).max(1)));
    run_tasks_with(chunks.collect(), |scratch: &mut Scratch, (y, x)| {
        let (padded, at, outputs, prod) = scratch;
        let images = x.len() / image.max(1);
        pad_channels_last(x, (h, w), &plan.pad, padded);
        prod.clear();
        prod.resize(images * plane * o, 0.0);
        for (pass, weight) in plan.passes.iter().zip(weights) {
            if pass.count(images) == 0 {
                continue;
            }
            pass.positions(&plan.pad, images, at);
            pass.outputs(images, (ho, wo, o), outputs);
            let sizes = (&plan.pad, h, images);
            pass.for_groups(sizes, (padded, at), |first, a| {
                let c = (&mut prod[..], &outputs[first..]);
                sgemm::gathered_rows_product(a, weight.data(), o, c);
            });
        }
        for (src, dst) in prod
            .chunks_exact((plane * o).max(1))
            .zip(y.chunks_exact_mut((o * plane).max(1)))
        {
            sgemm::transpose(src, (plane, o), o, dst, plane);
        }
    });
}

/// Convolution of every image over channels-last copies: `x` `[N, C, h, w]`, `w`
/// `[O, C·kh·kw]` row-major, `y` `[N, O, ho, wo]` (overwritten). Call it only where
/// [`applies`].
pub(crate) fn conv<T: Float>(x: &[T], c: usize, g: &Geom, w: &[T], o: usize, y: &mut [T]) {
    let (Some(x), Some(w), Some(y)) = (T::as_f32(x), T::as_f32(w), T::as_f32_mut(y)) else {
        panic!("channels_last::conv: f32 only");
    };
    let plan = Plan::conv(g, c).expect("channels_last::conv outside applies");
    let weight = Plan::conv_weight(g, w, c, o);
    run_plan(&plan, x, (g.h, g.w), &[weight], (o, g.ho, g.wo), y);
}

/// The transposed convolution of every image over channels-last copies: `u` `[N, C, ho, wo]`
/// of geometry `g` (its forward convolution's output), `w` `[C, O, kh, kw]`, `y`
/// `[N, O, h, w]` (overwritten). Call it only where [`applies`] (with the
/// channels swapped).
pub(crate) fn conv_transpose<T: Float>(
    u: &[T],
    c: usize,
    g: &Geom,
    w: &[T],
    o: usize,
    y: &mut [T],
) {
    let (Some(u), Some(w), Some(y)) = (T::as_f32(u), T::as_f32(w), T::as_f32_mut(y)) else {
        panic!("channels_last::conv_transpose: f32 only");
    };
    let plan = Plan::transposed(g, c).expect("channels_last::conv_transpose outside applies");
    let weights = plan.transposed_weights(w, g.taps(), o);
    run_plan(&plan, u, (g.ho, g.wo), &weights, (o, g.h, g.w), y);
}

/// The buffers a run of [`conv_weight`] reuses from chunk to chunk.
#[derive(Default)]
struct WeightBufs {
    /// The chunk's padded channels-last copies.
    padded: Vec<f32>,
    /// Where each position starts in them.
    at: Vec<usize>,
    /// The output gradient, a row per position.
    rows: Vec<f32>,
    /// Each output pixel's row, and each position's pixel.
    row_of: Vec<usize>,
    pixels: Vec<usize>,
}

/// One chunk of images' share of [`conv_weight`] (`x` and its output gradient `dy`), added
/// into `acc` (`[taps · C, ld]`, rows as the weight of [`Plan::conv`]).
fn chunk_weight(
    plan: &Plan,
    (x, dy): (&[f32], &[f32]),
    (g, o, ld): (&Geom, usize, usize),
    bufs: &mut WeightBufs,
    acc: &mut [f32],
) {
    let WeightBufs {
        padded,
        at,
        rows,
        row_of,
        pixels,
    } = bufs;
    let (pass, c, plane) = (&plan.passes[0], plan.pad.c, g.ho * g.wo);
    let images = x.len() / (c * g.h * g.w).max(1);
    pad_channels_last(x, (g.h, g.w), &plan.pad, padded);
    pass.positions(&plan.pad, images, at);
    // The output gradient positions by channels, rows in the order of the positions (the
    // pixels no position reads after them), each image transposed straight into its rows.
    // Columns o..ld are read with the vectors but never stored: whatever they hold.
    pass.pixel_rows(images, (g.ho, g.wo), (row_of, pixels));
    rows.resize(images * plane * ld, 0.0);
    for (i, dy) in dy.chunks_exact((o * plane).max(1)).enumerate() {
        let row_at = |p: usize| row_of[i * plane + p] * ld;
        sgemm::transpose_to(dy, (o, plane), plane, rows, row_at);
    }
    pass.for_groups((&plan.pad, g.h, images), (padded, at), |first, a| {
        sgemm::gathered_steps_product_acc(a, (&rows[first * ld..], ld), o, (acc, ld));
    });
}

/// The weight gradient of [`conv`] summed over the images: `x` `[N, C, h, w]`, `dy`
/// `[N, O, ho, wo]`; the result is `[O, C·kh·kw]`. Each chunk of images adds the product of
/// its column matrix (read out of the channels-last copies) with its output gradient laid
/// out positions by channels. Threads take fixed runs of images whose sums are added in
/// order, so the result does not depend on the scheduling.
pub(crate) fn conv_weight<T: Float>(x: &[T], dy: &[T], c: usize, g: &Geom, o: usize) -> Vec<T> {
    let (Some(x), Some(dy)) = (T::as_f32(x), T::as_f32(dy)) else {
        panic!("channels_last::conv_weight: f32 only");
    };
    let plan = Plan::conv(g, c).expect("channels_last::conv_weight outside applies");
    let (image, plane, ld) = (c * g.h * g.w, g.ho * g.wo, o.next_multiple_of(16));
    let k = c * g.taps();
    // Runs of enough positions that the work of a run outweighs its sums' copy of the
    // weight (zeroed, added into, and added to the total): a run of four 7×7 maps would
    // spend a third of its time on them.
    let n = x.len().checked_div(image).unwrap_or(0);
    let per_run = images_per_run(n).max(MIN_RUN_POSITIONS.div_ceil(plane.max(1)));
    // As many runs as that takes, of near-equal size: they share out evenly between threads.
    let per_run = n.div_ceil(n.div_ceil(per_run.max(1)).max(1));
    let sizes = (image, o * plane, k * ld);
    let total = sum_over_runs(x, dy, sizes, per_run, |xs, dys, acc| {
        let mut bufs = WeightBufs::default();
        let chunks = xs.chunks((IMAGES_PER_CHUNK * image).max(1));
        for (x, dy) in chunks.zip(dys.chunks((IMAGES_PER_CHUNK * o * plane).max(1))) {
            chunk_weight(&plan, (x, dy), (g, o, ld), &mut bufs, acc);
        }
    });
    // Rows by kernel tap and channel to PyTorch's [O, C, kh, kw]: [k, O'] to [O, k], then
    // each filter's [taps, C] to [C, taps].
    let mut filters = vec![0.0f32; o * k];
    sgemm::transpose(&total, (k, o), ld, &mut filters, k);
    let mut out = vec![T::zero(); o * k];
    let dst = T::as_f32_mut(&mut out).expect("f32");
    for (src, dst) in filters.chunks_exact(k).zip(dst.chunks_exact_mut(k)) {
        sgemm::transpose(src, (g.taps(), c), c, dst, g.taps());
    }
    out
}
