//! Pooling and resampling over the last two axes of `[N, C, H, W]`, with PyTorch's semantics
//! (floor mode; max pooling pads with −∞; average pooling counts the padding).
//!
//! Every op here is linear in its input or routes it by indices fixed in the forward pass, so
//! each backward is another op of this file: max pooling's gradient scatters to the recorded
//! arg-max (its derivative in the input is zero, as PyTorch's), and a window mean's adjoint
//! spreads each output back over its window.

use std::sync::Arc;

use smallvec::smallvec;

use crate::kernels::conv::{max_pool_plane, window_mean_plane, window_mean_plane_t, Geom, Windows};
use crate::kernels::index;
use crate::kernels::parallel::{chunks_per_part, for_each_chunk, run_tasks};
use crate::tensor::{filled, numel_or_panic, record, reserved, with_dtype, FloatElement, Tensor};
use num_traits::Zero;

/// `(planes, h, w)` of a `[N, C, H, W]` tensor, or a panic naming `op`.
fn planes(op: &str, t: &Tensor) -> (usize, usize, usize) {
    match t.shape() {
        &[n, c, h, w] if h > 0 && w > 0 => (n * c, h, w),
        s => panic!("{op}: input must be [N, C, H, W] with H, W > 0, got shape {s:?}"),
    }
}

/// A new `[N, C, h, w]` tensor, zero before `f(input plane, output plane)` fills each plane
/// of `x` (`[N, C, H, W]`); planes in parallel. Panics naming `op` when it cannot be made.
fn map_planes<T: FloatElement>(
    op: &str,
    x: &Tensor,
    (h, w): (usize, usize),
    f: impl Fn(&[T], &mut [T]) + Sync,
) -> Tensor {
    let (_, ih, iw) = planes(op, x);
    let data = x.contiguous_data::<T>();
    let shape = with_hw(x, h, w);
    let mut out = filled(op, numel_or_panic(op, &shape), T::zero());
    for_each_chunk(&mut out, h * w, |p, o| {
        f(&data[p * ih * iw..][..ih * iw], o)
    });
    Tensor::from_data(out, &shape)
}

/// `t`'s shape with the last two axes replaced.
fn with_hw(t: &Tensor, h: usize, w: usize) -> [usize; 4] {
    let s = t.shape();
    [s[0], s[1], h, w]
}

/// Windows of `k` taps, `stride` apart, over an axis of `size` padded by `pad` on each side;
/// each output divides by `k` (the padding counts).
fn fixed_windows(op: &str, size: usize, k: usize, stride: usize, pad: usize) -> Windows {
    assert!(
        k > 0 && stride > 0 && pad <= k / 2,
        "{op}: kernel {k}, stride {stride} and padding {pad} need k > 0, stride > 0 and \
         padding ≤ kernel / 2"
    );
    let padded = pad.checked_mul(2).and_then(|p| p.checked_add(size));
    let Some(padded) = padded.filter(|&p| p >= k) else {
        panic!("{op}: a kernel of {k} does not fit an axis of {size} padded by {pad}")
    };
    let out = (padded - k) / stride + 1;
    let start: Vec<usize> = (0..out).map(|o| (o * stride).saturating_sub(pad)).collect();
    let end = (0..out).map(|o| (o * stride + k - pad).min(size)).collect();
    Windows {
        start,
        end,
        div: vec![k as f64; out],
    }
}

/// PyTorch's adaptive windows: output `o` of `out` covers `⌊o·size/out⌋..⌈(o+1)·size/out⌉`.
/// `out` is the caller's number: its tables go through the checked allocation (a clean panic
/// naming the op when they cannot be held), and the products are taken in 128 bits.
fn adaptive_windows(size: usize, out: usize) -> Windows {
    let at = |o: usize, up: bool| {
        let (num, den) = (o as u128 * size as u128, out as u128);
        // The quotient is at most `size`, so it fits.
        (if up { num.div_ceil(den) } else { num / den }) as usize
    };
    let table = |f: &dyn Fn(usize) -> usize| {
        let mut v = reserved("adaptive_avg_pool2d", out);
        v.extend((0..out).map(f));
        v
    };
    let start = table(&|o| at(o, false));
    let end = table(&|o| at(o + 1, true));
    let mut div = reserved("adaptive_avg_pool2d", out);
    div.extend(start.iter().zip(&end).map(|(&s, &e)| (e - s) as f64));
    Windows { start, end, div }
}

impl Tensor {
    /// Max pooling with a square `kernel`, `stride` and `padding` (padding ≤ kernel / 2, as
    /// PyTorch requires). The gradient goes to the first maximal element of each window.
    pub fn max_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Tensor {
        self.max_pool2d_hw([kernel; 2], [stride; 2], [padding; 2])
    }

    /// Max pooling with sizes `[height, width]` (PyTorch's `kernel_size=(2, 3)`).
    pub fn max_pool2d_hw(
        &self,
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [ph, pw]: [usize; 2],
    ) -> Tensor {
        let (np, h, w) = planes("max_pool2d", self);
        let (wy, wx) = (
            fixed_windows("max_pool2d", h, kh, sh, ph),
            fixed_windows("max_pool2d", w, kw, sw, pw),
        );
        let g = Geom {
            h,
            w,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            dh: 1,
            dw: 1,
            ho: wy.start.len(),
            wo: wx.start.len(),
        };
        let plane = g.ho * g.wo;
        let mut arg = vec![0usize; np * plane];
        let out = with_dtype!(self.dtype(), T => {
            let x = self.contiguous_data::<T>();
            let mut out = filled("max_pool2d", np * plane, T::zero());
            // Runs of planes per task, as `for_each_chunk` makes them.
            let (per, plane) = (chunks_per_part(np), plane.max(1));
            let runs = out.chunks_mut(per * plane).zip(arg.chunks_mut(per * plane));
            run_tasks(runs.enumerate().collect(), |(r, (o, a))| {
                let planes = o.chunks_mut(plane).zip(a.chunks_mut(plane));
                for (p, (o, a)) in (r * per..).zip(planes) {
                    max_pool_plane(&x[p * h * w..][..h * w], &g, o, a);
                }
            });
            Tensor::from_data(out, &with_hw(self, g.ho, g.wo))
        });
        let arg: Arc<[usize]> = arg.into();
        record("max_pool2d", out, &[self], move |_, up| {
            smallvec![Some(up.scatter_planes(&arg, (h, w)))]
        })
    }

    /// Average pooling with a square `kernel`, `stride` and `padding`; the padding counts in
    /// the divisor (PyTorch's default `count_include_pad=True`).
    pub fn avg_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Tensor {
        self.avg_pool2d_hw([kernel; 2], [stride; 2], [padding; 2])
    }

    /// Average pooling with sizes `[height, width]`; each output divides by `kh · kw`.
    pub fn avg_pool2d_hw(
        &self,
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [ph, pw]: [usize; 2],
    ) -> Tensor {
        let (_, h, w) = planes("avg_pool2d", self);
        let wy = fixed_windows("avg_pool2d", h, kh, sh, ph);
        let wx = fixed_windows("avg_pool2d", w, kw, sw, pw);
        self.window_mean("avg_pool2d", Arc::new([wy, wx]))
    }

    /// Average pooling to an `out_h × out_w` output whatever the input size (PyTorch's
    /// `adaptive_avg_pool2d`).
    pub fn adaptive_avg_pool2d(&self, out_h: usize, out_w: usize) -> Tensor {
        let (_, h, w) = planes("adaptive_avg_pool2d", self);
        assert!(
            out_h > 0 && out_w > 0 && h > 0 && w > 0,
            "adaptive_avg_pool2d: cannot pool {:?} to {out_h}x{out_w}",
            self.shape()
        );
        self.window_mean(
            "adaptive_avg_pool2d",
            Arc::new([adaptive_windows(h, out_h), adaptive_windows(w, out_w)]),
        )
    }

    /// Nearest-neighbour upsampling by integer factors: each pixel becomes a
    /// `scale_h × scale_w` block. Built from views, so its gradient sums each block.
    pub fn upsample_nearest2d(&self, scale_h: usize, scale_w: usize) -> Tensor {
        let (_, h, w) = planes("upsample_nearest2d", self);
        assert!(
            scale_h > 0 && scale_w > 0,
            "upsample_nearest2d: scales must be positive"
        );
        let s = self.shape();
        self.reshape(&[s[0], s[1], h, 1, w, 1])
            .broadcast_to(&[s[0], s[1], h, scale_h, w, scale_w])
            .reshape(&[s[0], s[1], h * scale_h, w * scale_w])
    }

    /// Mean over fixed windows of the last two axes (`windows` = rows, columns), for the
    /// user's call `op`.
    fn window_mean(&self, op: &'static str, windows: Arc<[Windows; 2]>) -> Tensor {
        let (_, h, w) = planes(op, self);
        let (ho, wo) = (windows[0].start.len(), windows[1].start.len());
        let out = with_dtype!(self.dtype(), T => map_planes::<T>(op, self, (ho, wo), |x, o| {
            window_mean_plane(x, w, &windows, o)
        }));
        record("window_mean", out, &[self], move |_, up| {
            smallvec![Some(up.window_mean_t(op, windows.clone(), (h, w)))]
        })
    }

    /// The adjoint of [`Tensor::window_mean`]: each value spread (divided) over its window of
    /// an `h × w` plane.
    fn window_mean_t(
        &self,
        op: &'static str,
        windows: Arc<[Windows; 2]>,
        (h, w): (usize, usize),
    ) -> Tensor {
        let out = with_dtype!(self.dtype(), T => map_planes::<T>(op, self, (h, w), |up, x| {
            window_mean_plane_t(up, w, &windows, x)
        }));
        record("window_mean_t", out, &[self], move |_, up| {
            smallvec![Some(up.window_mean(op, windows.clone()))]
        })
    }

    /// Each plane's values added at the flat positions `arg` of a zero `h × w` plane (the
    /// gradient of max pooling).
    fn scatter_planes(&self, arg: &Arc<[usize]>, (h, w): (usize, usize)) -> Tensor {
        let (np, ho, wo) = planes("max_pool2d backward", self);
        let out = with_dtype!(self.dtype(), T => {
            let up = self.contiguous_data::<T>();
            let out = index::scatter_add_planes(&up, arg, np, (ho * wo, h * w));
            Tensor::from_data(out, &with_hw(self, h, w))
        });
        let (arg, hw) = (arg.clone(), (ho, wo));
        record("scatter_planes", out, &[self], move |_, up| {
            smallvec![Some(up.gather_planes(&arg, hw))]
        })
    }

    /// Each plane's values at the flat positions `arg`, as `ho × wo` planes (the adjoint of
    /// [`Tensor::scatter_planes`]).
    fn gather_planes(&self, arg: &Arc<[usize]>, (ho, wo): (usize, usize)) -> Tensor {
        let (np, h, w) = planes("max_pool2d double backward", self);
        let out = with_dtype!(self.dtype(), T => {
            let x = self.contiguous_data::<T>();
            let out = index::gather_planes(&x, &arg[..np * ho * wo], (h * w, ho * wo));
            Tensor::from_data(out, &with_hw(self, ho, wo))
        });
        let (arg, hw) = (arg.clone(), (h, w));
        record("gather_planes", out, &[self], move |_, up| {
            smallvec![Some(up.scatter_planes(&arg, hw))]
        })
    }
}
