//! Pooling and resampling over the last two axes of `[N, C, H, W]`, with PyTorch's semantics
//! (floor mode; max pooling pads with −∞; average pooling counts the padding).
//!
//! Every op here is linear in its input or routes it by indices fixed in the forward pass, so
//! each backward is another op of this file: max pooling's gradient scatters to the recorded
//! arg-max (its derivative in the input is zero, as PyTorch's), and a window mean's adjoint
//! spreads each output back over its window.

use crate::tensor::trace::{self, attrs};
use std::sync::Arc;

use smallvec::smallvec;

use crate::kernels::conv::{max_pool_plane, window_mean_plane, window_mean_plane_t, Geom, Windows};
use crate::kernels::index;
use crate::kernels::parallel::{chunks_per_part, for_each_chunk, run_tasks};
use crate::tensor::{filled, numel_or_panic, record, reserved, with_dtype, FloatElement, Tensor};
use num_traits::Zero;

use super::dtype::{eager_dtype_or_panic, float_rule};
use super::shape::{eager_or_panic, known, numel, show, Rule};

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
/// each output divides by `k` (the padding counts). The sizes are ones [`pool_rule`] accepted.
fn fixed_windows(size: usize, k: usize, stride: usize, pad: usize) -> Windows {
    let padded = size + 2 * pad;
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
        let _profiled = crate::tensor::profile::scope("max_pool2d");
        self.max_pool2d_hw([kernel; 2], [stride; 2], [padding; 2])
    }

    /// Max pooling with sizes `[height, width]` (PyTorch's `kernel_size=(2, 3)`).
    pub fn max_pool2d_hw(
        &self,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Tensor {
        let _profiled = crate::tensor::profile::scope("max_pool2d_hw");
        self.max_pool2d_positions([kernel, stride, padding], trace::is_tracing())
            .0
    }

    /// Max pooling's values and, as i64, the position each came from within its plane
    /// (`h · W + w`), PyTorch's `F.max_pool2d(.., return_indices=True)`.
    pub fn max_pool2d_with_indices(
        &self,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> (Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("max_pool2d_with_indices");
        self.max_pool2d_positions([kernel, stride, padding], true)
    }

    /// Max pooling, with its positions made when `wanted` (otherwise an empty tensor). A
    /// trace records both, so that a traced backward routes by the positions a graph
    /// computes.
    fn max_pool2d_positions(&self, sizes: [[usize; 2]; 3], wanted: bool) -> (Tensor, Tensor) {
        let [kernel, stride, padding] = sizes;
        let attrs = attrs![kernel, stride, padding];
        trace::op("MaxPool2d", attrs, &[self], || {
            let (out, arg, hw) = self.max_pool_positions(kernel, stride, padding);
            let positions = match wanted {
                true => {
                    let at: Vec<i64> = arg.iter().map(|&a| a as i64).collect();
                    Tensor::from_vec(at, out.shape())
                }
                false => Tensor::from_vec(Vec::<i64>::new(), &[0]),
            };
            let at = positions.clone();
            let values = record("max_pool2d", out, &[self], move |_, up| {
                // A trace records the derivative as an op that reads the positions the
                // forward gave, so that a graph routes by the values it is given.
                let traced = trace::is_tracing() && at.shape() == up.shape();
                smallvec![Some(match traced {
                    true => up.max_pool2d_backward(&at, hw),
                    false => up.scatter_planes(&arg, hw),
                })]
            });
            (values, positions)
        })
    }

    /// This gradient of max pooling routed back to planes of `h × w`: each value added at
    /// its position in `positions` (as [`Tensor::max_pool2d_with_indices`] gives them),
    /// PyTorch's `max_pool2d_with_indices_backward`.
    pub fn max_pool2d_backward(&self, positions: &Tensor, (h, w): (usize, usize)) -> Tensor {
        let _profiled = crate::tensor::profile::scope("max_pool2d_backward");
        let attrs = attrs![[h, w]];
        trace::op("MaxPool2dBackward", attrs, &[self, positions], || {
            assert!(
                positions.shape() == self.shape() && positions.dtype() == crate::tensor::DType::I64,
                "max_pool2d_backward: positions {:?} ({}) for a gradient {:?}",
                positions.shape(),
                positions.dtype(),
                self.shape()
            );
            let plane = h.checked_mul(w).expect("max_pool2d_backward: plane size");
            let arg: Arc<[usize]> = positions
                .contiguous_data::<i64>()
                .iter()
                .map(|&a| usize::try_from(a).ok().filter(|&a| a < plane))
                .collect::<Option<Vec<usize>>>()
                .expect("max_pool2d_backward: a position outside its plane")
                .into();
            self.scatter_planes_by(&arg, (h, w))
        })
    }

    /// Max pooling's values and, within each plane, the flat position of each window's
    /// maximum; with the planes' height and width.
    fn max_pool_positions(
        &self,
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [ph, pw]: [usize; 2],
    ) -> (Tensor, Arc<[usize]>, (usize, usize)) {
        let rule = pool_rule(&known(self.shape()), [kh, kw], [sh, sw], [ph, pw]);
        eager_or_panic("max_pool2d", rule);
        eager_dtype_or_panic("max_pool2d", float_rule(self.dtype()));
        let (np, h, w) = planes("max_pool2d", self);
        let (wy, wx) = (fixed_windows(h, kh, sh, ph), fixed_windows(w, kw, sw, pw));
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
        (out, arg.into(), (h, w))
    }

    /// Average pooling with a square `kernel`, `stride` and `padding`; the padding counts in
    /// the divisor (PyTorch's default `count_include_pad=True`).
    pub fn avg_pool2d(&self, kernel: usize, stride: usize, padding: usize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("avg_pool2d");
        self.avg_pool2d_hw([kernel; 2], [stride; 2], [padding; 2])
    }

    /// Average pooling with sizes `[height, width]`; each output divides by `kh · kw`.
    pub fn avg_pool2d_hw(
        &self,
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [ph, pw]: [usize; 2],
    ) -> Tensor {
        let _profiled = crate::tensor::profile::scope("avg_pool2d_hw");
        let _profiled = crate::tensor::profile::scope("avg_pool2d_hw");
        trace::op(
            "AvgPool2d",
            attrs![[kh, kw], [sh, sw], [ph, pw]],
            &[self],
            || self.avg_pool2d_hw_untraced([kh, kw], [sh, sw], [ph, pw]),
        )
    }

    fn avg_pool2d_hw_untraced(
        &self,
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [ph, pw]: [usize; 2],
    ) -> Tensor {
        let rule = pool_rule(&known(self.shape()), [kh, kw], [sh, sw], [ph, pw]);
        eager_or_panic("avg_pool2d", rule);
        eager_dtype_or_panic("avg_pool2d", float_rule(self.dtype()));
        let (_, h, w) = planes("avg_pool2d", self);
        let wy = fixed_windows(h, kh, sh, ph);
        let wx = fixed_windows(w, kw, sw, pw);
        self.window_mean("avg_pool2d", Arc::new([wy, wx]))
    }

    /// Average pooling to an `out_h × out_w` output whatever the input size (PyTorch's
    /// `adaptive_avg_pool2d`).
    pub fn adaptive_avg_pool2d(&self, out_h: usize, out_w: usize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("adaptive_avg_pool2d");
        trace::op("AdaptiveAvgPool2d", attrs![out_h, out_w], &[self], || {
            self.adaptive_avg_pool2d_untraced(out_h, out_w)
        })
    }

    fn adaptive_avg_pool2d_untraced(&self, out_h: usize, out_w: usize) -> Tensor {
        let rule = resize_rule(&known(self.shape()), (out_h, out_w), true);
        eager_or_panic("adaptive_avg_pool2d", rule);
        eager_dtype_or_panic("adaptive_avg_pool2d", float_rule(self.dtype()));
        let (_, h, w) = planes("adaptive_avg_pool2d", self);
        self.window_mean(
            "adaptive_avg_pool2d",
            Arc::new([adaptive_windows(h, out_h), adaptive_windows(w, out_w)]),
        )
    }

    /// Nearest-neighbour upsampling by integer factors: each pixel becomes a
    /// `scale_h × scale_w` block. Built from views, so its gradient sums each block.
    pub fn upsample_nearest2d(&self, scale_h: usize, scale_w: usize) -> Tensor {
        let _profiled = crate::tensor::profile::scope("upsample_nearest2d");
        trace::op(
            "UpsampleNearest2d",
            attrs![scale_h, scale_w],
            &[self],
            || self.upsample_nearest2d_untraced(scale_h, scale_w),
        )
    }

    fn upsample_nearest2d_untraced(&self, scale_h: usize, scale_w: usize) -> Tensor {
        let rule = resize_rule(&known(self.shape()), (scale_h, scale_w), false);
        eager_or_panic("upsample_nearest2d", rule);
        let (_, h, w) = planes("upsample_nearest2d", self);
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
        if trace::is_tracing() {
            // A trace (forward mode or `vmap` of a gradient) reads ops it has rules for: the
            // same sums by `index_add` at flat positions, which the forward read from values.
            trace::note_positions_read();
            let at = flat_positions(arg, np, ho * wo, h * w);
            let zeros = Tensor::zeros(&[np * h * w], self.dtype());
            let flat = self.reshape(&[np * ho * wo]);
            return zeros.index_add(0, &at, &flat).reshape(&with_hw(self, h, w));
        }
        self.scatter_planes_by(arg, (h, w))
    }

    /// [`Tensor::scatter_planes`] in one fused pass, whatever traces run.
    fn scatter_planes_by(&self, arg: &Arc<[usize]>, (h, w): (usize, usize)) -> Tensor {
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
        if trace::is_tracing() {
            trace::note_positions_read();
            let at = flat_positions(arg, np, ho * wo, h * w);
            let flat = self.reshape(&[np * h * w]);
            return flat
                .index_select(0, at.as_slice())
                .reshape(&with_hw(self, ho, wo));
        }
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

/// The positions `arg` (within each plane of `plane` elements, `per` per plane) as positions
/// in all `np` planes laid end to end.
fn flat_positions(arg: &[usize], np: usize, per: usize, plane: usize) -> Vec<usize> {
    (0..np * per)
        .map(|k| (k / per.max(1)) * plane + arg[k])
        .collect()
}

// The poolings' shape rules, which the static graph's inference shares (see `ops::shape`).

/// `Err` unless `s` is `[N, C, H, W]` with `H` and `W` not empty.
fn check_planes(s: &[Option<usize>]) -> Result<(), String> {
    if s.len() != 4 || s[2] == Some(0) || s[3] == Some(0) {
        return Err(format!(
            "input must be [N, C, H, W] with H, W > 0, got shape {}",
            show(s)
        ));
    }
    Ok(())
}

/// Windows of `kernel` taps, `stride` apart, over each plane padded by `padding` (at most half
/// the kernel, as PyTorch requires), PyTorch's floor mode.
pub(crate) fn pool_rule(
    s: &[Option<usize>],
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> Rule {
    check_planes(s)?;
    let mut out = s[..2].to_vec();
    for i in 0..2 {
        let (k, st, p) = (kernel[i], stride[i], padding[i]);
        if k == 0 || st == 0 || p > k / 2 {
            return Err(format!(
                "kernel {k}, stride {st} and padding {p} need k > 0, stride > 0 and \
                 padding ≤ kernel / 2"
            ));
        }
        let Some(n) = s[2 + i] else {
            out.push(None);
            continue;
        };
        let padded = p.checked_mul(2).and_then(|p| p.checked_add(n));
        let Some(padded) = padded.filter(|&padded| padded >= k) else {
            return Err(format!(
                "a kernel of {k} does not fit an axis of {n} padded by {p}"
            ));
        };
        out.push(Some((padded - k) / st + 1));
    }
    numel(&out)?;
    Ok(out)
}

/// Adaptive pooling to `h × w` (`adaptive`), or nearest upsampling by `h × w`.
pub(crate) fn resize_rule(s: &[Option<usize>], (h, w): (usize, usize), adaptive: bool) -> Rule {
    check_planes(s)?;
    if h == 0 || w == 0 {
        return Err(format!("sizes must be positive, got {h}x{w}"));
    }
    let scaled = |n: Option<usize>, f: usize| -> Result<Option<usize>, String> {
        n.map(|n| n.checked_mul(f).ok_or("the output overflows".to_string()))
            .transpose()
    };
    let out = if adaptive {
        vec![s[0], s[1], Some(h), Some(w)]
    } else {
        vec![s[0], s[1], scaled(s[2], h)?, scaled(s[3], w)?]
    };
    numel(&out)?;
    Ok(out)
}
