//! Convolution without a column matrix (f32, AVX2 or AVX-512). Along one output row, each row of a
//! convolution's im2col matrix is a run of pixels of the padded image, so the matrix
//! product reads those runs where they are, through a table of where each kernel tap's run
//! starts (`sgemm::offset_rows_product` for the forward pass, `offset_runs_product_acc` for
//! the weight gradient). The stride-1 transposed convolution, an input gradient, is the
//! same product by the flipped kernel (see `ops/conv.rs`).

use super::conv::{images_per_run, sum_over_runs, Geom};
use super::parallel::run_tasks_with;
use super::sgemm::Runs;
use super::Float;

/// Whether [`implicit_conv`] can run a convolution of geometry `g` on `c` channels of type
/// `T`: f32 on an AVX path (AVX2 or AVX-512), and a padding within the kernel's reach (the padded copy
/// stays within a few times the image).
pub(crate) fn implicit_applies<T: Float>(g: &Geom, c: usize) -> bool {
    T::as_f32(&[]).is_some()
        && super::sgemm::available()
        && g.ph <= g.dh * (g.kh - 1)
        && g.pw <= g.dw * (g.kw - 1)
        && padded_len(c, g).is_some()
}

/// The floats of the padded copy of an image of `c` channels, covering every run the implicit
/// products read (whole vectors of 16 past a row's last output), when every offset into it
/// is computable and the copy stays within a few times the image (a huge dilation allows a
/// huge padding, whose copy would be mostly zeros).
fn padded_len(c: usize, g: &Geom) -> Option<usize> {
    // (The geometry was built with h + 2·ph and w + 2·pw checked.)
    let p = Phased::new(g);
    // The largest tap offset: Phased::at grows with the channel, the row and the column's
    // quotient, and the phase is below the stride.
    let rows = (c.checked_sub(1)?.checked_mul(p.hp)?).checked_add((g.kh - 1).checked_mul(g.dh)?)?;
    let last = rows
        .checked_mul(g.sw)?
        .checked_add(g.sw - 1)?
        .checked_mul(p.wq)?
        .checked_add((g.kw - 1).checked_mul(g.dw)? / g.sw)?;
    let step = g.sh.checked_mul(g.sw)?.checked_mul(p.wq)?;
    let reach =
        g.ho.saturating_sub(1)
            .checked_mul(step)?
            .checked_add(last)?
            .checked_add(g.wo.checked_next_multiple_of(16)?)?;
    let copy = c.checked_mul(p.hp)?.checked_mul(step / g.sh)?;
    let len = reach.max(copy);
    let image = c.checked_mul(g.h)?.checked_mul(g.w)?;
    (len <= image.saturating_mul(16).saturating_add(1 << 16)).then_some(len)
}

/// The output positions of `images` images of geometry `g` as runs of their padded copies,
/// `len` floats apart.
fn runs_of(g: &Geom, images: usize, len: usize) -> Runs {
    Runs {
        images,
        image_step: len,
        rows: g.ho,
        run: g.wo,
        row_step: Phased::new(g).row_step(g),
    }
}

/// Images per product: one where the output rows fill the vectors (each row is read in
/// place); otherwise the products pack positions 32 to a panel across image boundaries, and
/// up to 4 images go together so that a plane such as 7×7 (49 positions: two panels, the
/// second half empty) fills its panels better (3 × 49 = 147 positions in 5 panels).
fn images_per_product(g: &Geom, images: usize) -> usize {
    let plane = g.ho * g.wo;
    // Large planes waste little of their last panel; and every thread keeps work.
    let most = (images / crate::kernels::parallel::threads()).clamp(1, 4);
    if runs_of(g, 1, 0).fills_vectors() || plane == 0 || plane > 256 {
        return 1;
    }
    let waste = |n: usize| (n * plane).next_multiple_of(32) - n * plane;
    // The fewest images with the least waste per image.
    (1..=most).min_by_key(|&n| waste(n) * 4 / n).unwrap_or(1)
}

/// The padded copy the implicit products read: each padded row of `wp` pixels split into
/// `sw` phases (pixels `phase, phase + sw, ...`), each `wq = ⌈wp / sw⌉` long, so that under a
/// stride along the width the pixels one kernel tap sees along an output row are still one
/// contiguous run. With stride 1 it is the plain padded image.
#[derive(Clone, Copy)]
struct Phased {
    hp: usize,
    wq: usize,
}

impl Phased {
    fn new(g: &Geom) -> Phased {
        Phased {
            hp: g.h + 2 * g.ph,
            wq: (g.w + 2 * g.pw).div_ceil(g.sw),
        }
    }

    /// Where padded pixel `(row, col)` of channel `ci` sits.
    fn at(&self, g: &Geom, ci: usize, row: usize, col: usize) -> usize {
        ((ci * self.hp + row) * g.sw + col % g.sw) * self.wq + col / g.sw
    }

    /// Floats between the starts of consecutive output rows.
    fn row_step(&self, g: &Geom) -> usize {
        g.sh * g.sw * self.wq
    }
}

/// Where each kernel tap `(c, i, j)` of geometry `g` starts in the padded copy of an image of
/// `c` channels (the run it reads for output row 0), and how many floats the copy needs for
/// every run the implicit products read (whole vectors of 16 past a row's last output).
fn tap_offsets(c: usize, g: &Geom) -> (Vec<usize>, usize) {
    let p = Phased::new(g);
    let len = padded_len(c, g).expect("implicit convolution outside implicit_applies");
    // No offset overflows: each is at most the largest, which padded_len computed checked.
    let offsets: Vec<usize> = (0..c)
        .flat_map(|ci| (0..g.kh).flat_map(move |i| (0..g.kw).map(move |j| (ci, i, j))))
        .map(|(ci, i, j)| p.at(g, ci, i * g.dh, j * g.dw))
        .collect();
    (offsets, len)
}

/// Images `x` (`[images, C, h, w]`) with `g`'s zero padding into `padded` (reused), `len`
/// floats per image, in the layout of [`Phased`].
fn pad_into(x: &[f32], image: usize, g: &Geom, len: usize, padded: &mut Vec<f32>) {
    let images = x.len() / image.max(1);
    padded.clear();
    padded.resize(len * images, 0.0);
    for (x, dst) in x
        .chunks_exact(image.max(1))
        .zip(padded.chunks_exact_mut(len.max(1)))
    {
        pad_image(x, g, dst);
    }
}

/// One image into its zeroed padded copy.
fn pad_image(x: &[f32], g: &Geom, padded: &mut [f32]) {
    let p = Phased::new(g);
    for (ci, src) in x.chunks_exact((g.h * g.w).max(1)).enumerate() {
        for (r, row) in src.chunks_exact(g.w.max(1)).enumerate() {
            if g.sw == 1 {
                padded[p.at(g, ci, r + g.ph, g.pw)..][..g.w].copy_from_slice(row);
                continue;
            }
            // Each phase's pixels are every sw-th of the row: one strided run per phase.
            for phase in 0..g.sw.min(g.w) {
                let first = g.pw + phase;
                let dst = &mut padded[p.at(g, ci, r + g.ph, first)..];
                for (d, &v) in dst.iter_mut().zip(row[phase..].iter().step_by(g.sw)) {
                    *d = v;
                }
            }
        }
    }
}

/// Convolution of every image without a column matrix: `x` `[N, C, h, w]`, `w` `[O, C·kh·kw]`
/// row-major, `y` `[N, O, ho, wo]` (zeroed by the caller: an input of no pixels leaves it as
/// it is; otherwise overwritten). Each output row is one product of the
/// weight with the rows of the column matrix, read in place from a padded copy of the image
/// through a table of where each kernel tap starts. Images run in parallel. Call it only
/// where [`implicit_applies`].
pub(crate) fn implicit_conv<T: Float>(x: &[T], c: usize, g: &Geom, w: &[T], o: usize, y: &mut [T]) {
    let (Some(x), Some(w), Some(y)) = (T::as_f32(x), T::as_f32(w), T::as_f32_mut(y)) else {
        panic!("implicit_conv: f32 only");
    };
    let (offsets, len) = tap_offsets(c, g);
    let k = offsets.len();
    // Rows padded to a multiple of 4, so that every A panel reads inside the weight, and one
    // cache line longer than the taps: the kernel reads 12 rows side by side, and rows a
    // multiple of 4 KiB apart (1024 taps: 64 channels of 4×4) would all fall in one set of
    // the L1 cache (measured 6% slower).
    let lda = k + 16;
    let mut w4 = vec![0.0f32; o.next_multiple_of(4) * lda];
    for (dst, src) in w4.chunks_exact_mut(lda).zip(w.chunks_exact(k.max(1))) {
        dst[..k].copy_from_slice(src);
    }
    let (image, plane) = (c * g.h * g.w, g.ho * g.wo);
    let group = images_per_product(g, y.len() / (o * plane).max(1));
    let chunks = y
        .chunks_mut((group * o * plane).max(1))
        .zip(x.chunks((group * image).max(1)));
    run_tasks_with(
        chunks.collect(),
        |(padded, out): &mut (Vec<f32>, Vec<f32>), (y, x)| {
            pad_into(x, image, g, len, padded);
            let count = y.len() / (o * plane).max(1);
            let runs = runs_of(g, count, len);
            if count == 1 {
                super::sgemm::offset_rows_product((&w4, lda), o, &offsets, padded, runs, y);
                return;
            }
            // The product's output is [O, images·plane]: each image's planes back to NCHW.
            out.clear();
            out.resize(o * count * plane, 0.0);
            super::sgemm::offset_rows_product((&w4, lda), o, &offsets, padded, runs, out);
            for (oc, row) in out.chunks_exact(count * plane).enumerate() {
                for (i, src) in row.chunks_exact(plane).enumerate() {
                    y[(i * o + oc) * plane..][..plane].copy_from_slice(src);
                }
            }
        },
    );
}

/// The weight gradient of [`implicit_conv`] summed over the images: `x` `[N, C, h, w]`, `dy`
/// `[N, O, ho, wo]`; the result is `[O, C·kh·kw]`. Each image adds the product of its column
/// matrix (read in place, as the forward pass does) with its output gradient laid out
/// positions by channels. Threads take fixed runs of images whose sums are added in order,
/// so the result does not depend on the scheduling.
pub(crate) fn implicit_conv_weight<T: Float>(
    x: &[T],
    dy: &[T],
    c: usize,
    g: &Geom,
    o: usize,
) -> Vec<T> {
    let (Some(x), Some(dy)) = (T::as_f32(x), T::as_f32(dy)) else {
        panic!("implicit_conv_weight: f32 only");
    };
    let (offsets, len) = tap_offsets(c, g);
    let k = offsets.len();
    let (image, plane) = (c * g.h * g.w, g.ho * g.wo);
    let per_run = images_per_run(x.len().checked_div(image).unwrap_or(0));
    // Groups within a run (the runs already spread the images over the threads).
    let group = images_per_product(g, per_run * crate::kernels::parallel::threads());
    let width = o.next_multiple_of(16);
    let sizes = (image, o * plane, k * width);
    let total = sum_over_runs(x, dy, sizes, per_run, |xs, dys, acc| {
        let (mut padded, mut dyt) = (Vec::new(), vec![0.0; group * plane * width]);
        let chunks = xs.chunks((group * image).max(1));
        for (x, dy) in chunks.zip(dys.chunks((group * o * plane).max(1))) {
            pad_into(x, image, g, len, &mut padded);
            // The output gradients of the images one after another, positions by channels.
            for (i, dy) in dy.chunks_exact((o * plane).max(1)).enumerate() {
                let dst = &mut dyt[i * plane * width..][..plane * width];
                super::sgemm::transpose(dy, (o, plane), plane, dst, width);
            }
            let count = x.len() / image.max(1);
            super::sgemm::offset_runs_product_acc(
                (&padded, &offsets),
                runs_of(g, count, len),
                (&dyt, width),
                (o, width),
                acc,
            );
        }
    });
    // Taps by channels to PyTorch's [O, C·kh·kw].
    let mut out = vec![T::zero(); o * k];
    let dst = T::as_f32_mut(&mut out).expect("f32");
    for (tap, row) in total.chunks_exact(width).enumerate() {
        for (oc, &v) in row[..o].iter().enumerate() {
            dst[oc * k + tap] = v;
        }
    }
    out
}
