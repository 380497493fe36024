//! Convolution by im2col/col2im around the matrix product, and the window kernels of pooling.
//!
//! `im2col` lays one image's receptive fields out as the columns of a `[C·kh·kw, Ho·Wo]`
//! matrix, so that a convolution is one product with the `[O, C·kh·kw]` weight; `col2im` is
//! its adjoint (it adds each column back where it came from), which is what the transposed
//! convolution and the input gradient need.

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
    fn valid(out: usize, stride: usize, offset: isize, size: usize) -> std::ops::Range<usize> {
        let size = size as isize;
        let stride = stride as isize;
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
        let (lo, hi) = (lo as usize, (hi as usize).min(out));
        lo.min(hi)..hi
    }

    /// Calls `f(c, row, oy, iy, xs, ox_range, ix0)` for every kernel tap of every channel and
    /// output row whose input row is inside the image: the columns `ox_range` read input
    /// columns `ix0 + (ox − start)·sw`.
    fn for_each_run(&self, channels: usize, mut f: impl FnMut(usize, usize, usize, Run)) {
        for c in 0..channels {
            for i in 0..self.kh {
                let oy_off = (i * self.dh) as isize - self.ph as isize;
                let rows = Self::valid(self.ho, self.sh, oy_off, self.h);
                for j in 0..self.kw {
                    let ox_off = (j * self.dw) as isize - self.pw as isize;
                    let cols = Self::valid(self.wo, self.sw, ox_off, self.w);
                    let row = (c * self.kh + i) * self.kw + j;
                    for oy in rows.clone() {
                        let iy = (oy as isize * self.sh as isize + oy_off) as usize;
                        let ix0 = (cols.start as isize * self.sw as isize + ox_off) as usize;
                        f(
                            row,
                            oy,
                            c,
                            Run {
                                src: (c * self.h + iy) * self.w + ix0,
                                cols: cols.clone(),
                            },
                        );
                    }
                }
            }
        }
    }
}

/// A run of output columns and where the first one reads in the image.
struct Run {
    src: usize,
    cols: std::ops::Range<usize>,
}

/// The column matrix of one image's `channels` channels (`img` is `[channels, h, w]`) into
/// `cols` (`[channels·kh·kw, ho·wo]`, fully written: padding reads as zero).
pub(crate) fn im2col<T: Float>(img: &[T], g: &Geom, channels: usize, cols: &mut [T]) {
    let plane = g.ho * g.wo;
    assert!(img.len() == channels * g.h * g.w && cols.len() == channels * g.taps() * plane);
    cols.iter_mut().for_each(|v| *v = T::zero());
    g.for_each_run(channels, |row, oy, _, run| {
        let dst = &mut cols[row * plane + oy * g.wo..][..g.wo][run.cols.clone()];
        if g.sw == 1 {
            dst.copy_from_slice(&img[run.src..run.src + dst.len()]);
        } else {
            for (k, d) in dst.iter_mut().enumerate() {
                *d = img[run.src + k * g.sw];
            }
        }
    });
}

/// The adjoint of [`im2col`]: adds every column entry back onto the pixel it was read from
/// (`img` is `[channels, h, w]`, accumulated into).
pub(crate) fn col2im<T: Float>(cols: &[T], g: &Geom, channels: usize, img: &mut [T]) {
    let plane = g.ho * g.wo;
    assert!(img.len() == channels * g.h * g.w && cols.len() == channels * g.taps() * plane);
    g.for_each_run(channels, |row, oy, _, run| {
        let src = &cols[row * plane + oy * g.wo..][..g.wo][run.cols.clone()];
        if g.sw == 1 {
            for (d, &s) in img[run.src..run.src + src.len()].iter_mut().zip(src) {
                *d += s;
            }
        } else {
            for (k, &s) in src.iter().enumerate() {
                img[run.src + k * g.sw] += s;
            }
        }
    });
}

/// Max pooling of one `[h, w]` plane: each output's maximum (NaN wins, as in PyTorch) and the
/// flat input index it came from (the first at ties). Padding never wins (it is −∞).
pub(crate) fn max_pool_plane<T: Float>(x: &[T], g: &Geom, out: &mut [T], arg: &mut [usize]) {
    for oy in 0..g.ho {
        for ox in 0..g.wo {
            let mut best = T::neg_infinity();
            let mut at = usize::MAX;
            for i in 0..g.kh {
                let iy = (oy * g.sh + i * g.dh) as isize - g.ph as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                for j in 0..g.kw {
                    let ix = (ox * g.sw + j * g.dw) as isize - g.pw as isize;
                    if ix < 0 || ix >= g.w as isize {
                        continue;
                    }
                    let idx = iy as usize * g.w + ix as usize;
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

/// Windows along one axis: output `o` averages input `start[o]..end[o]` and divides by
/// `div[o]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Windows {
    pub start: Vec<usize>,
    pub end: Vec<usize>,
    pub div: Vec<f64>,
}

/// `out[oy, ox] = Σ x[window] / (div_y[oy] · div_x[ox])` for one plane.
pub(crate) fn window_mean_plane<T: Float>(
    x: &[T],
    w: usize,
    wy: &Windows,
    wx: &Windows,
    out: &mut [T],
) {
    let wo = wx.start.len();
    for (oy, (&y0, &y1)) in wy.start.iter().zip(&wy.end).enumerate() {
        for (ox, (&x0, &x1)) in wx.start.iter().zip(&wx.end).enumerate() {
            let mut s = T::zero();
            for iy in y0..y1 {
                for &v in &x[iy * w + x0..iy * w + x1] {
                    s += v;
                }
            }
            out[oy * wo + ox] = s / T::from_f64(wy.div[oy] * wx.div[ox]);
        }
    }
}

/// The adjoint of [`window_mean_plane`]: each output's value, divided as there, added to every
/// input of its window (`x` is accumulated into).
pub(crate) fn window_mean_plane_t<T: Float>(
    up: &[T],
    w: usize,
    wy: &Windows,
    wx: &Windows,
    x: &mut [T],
) {
    let wo = wx.start.len();
    for (oy, (&y0, &y1)) in wy.start.iter().zip(&wy.end).enumerate() {
        for (ox, (&x0, &x1)) in wx.start.iter().zip(&wx.end).enumerate() {
            let v = up[oy * wo + ox] / T::from_f64(wy.div[oy] * wx.div[ox]);
            for iy in y0..y1 {
                for d in &mut x[iy * w + x0..iy * w + x1] {
                    *d += v;
                }
            }
        }
    }
}
