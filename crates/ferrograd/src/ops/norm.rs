//! Batch normalisation with the batch's own statistics and layer normalisation, fused
//! (`kernels/norm.rs`): one rule for the whole normalisation instead of a dozen composite ops.
//!
//! The rule takes the fused kernel when no graph is being built (an ordinary backward), and
//! writes the same derivative with tensor ops when it is (`backward_with_graph`), so that
//! second derivatives work as for every op.

use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use super::shape::{eager_or_panic, known, show, Rule, Shape};
use crate::kernels::norm as kn;
use crate::kernels::{Float, Rows};
use crate::tensor::{is_grad_enabled, record, reserved, with_dtype, DType, FloatElement, Tensor};

/// `[outer, channels, inner]` of an `[N, C, ...]` input.
fn channel_rows(shape: &[usize]) -> Rows {
    Rows::around(shape, 1)
}

/// Every axis but the channels'.
fn stat_axes(ndim: usize) -> Vec<usize> {
    (0..ndim).filter(|&a| a != 1).collect()
}

fn forward<T: FloatElement>(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> [Tensor; 4] {
    let rows = channel_rows(x.shape());
    let xs = x.contiguous_data::<T>();
    let (mean, var) = kn::batch_stats(&xs, rows);
    let invstd: Vec<T> = var
        .iter()
        .map(|&v| T::one() / (v + T::from_f64(eps)).sqrt())
        .collect();
    let (w, b) = (weight.contiguous_data::<T>(), bias.contiguous_data::<T>());
    let scale: Vec<T> = (0..rows.mid).map(|c| w[c] * invstd[c]).collect();
    let shift: Vec<T> = (0..rows.mid).map(|c| b[c] - mean[c] * scale[c]).collect();
    let mut out = reserved("batch_norm", xs.len());
    kn::scale_shift(&xs, rows, [&scale, &shift], &mut out);
    let c = [rows.mid];
    [
        Tensor::from_data(out, x.shape()),
        Tensor::from_data(mean, &c),
        Tensor::from_data(var, &c),
        Tensor::from_data(invstd, &c),
    ]
}

/// The fused derivative: `(dx, dweight, dbias)`.
fn fused_backward<T: FloatElement>(up: &Tensor, x: &Tensor, stats: [&Tensor; 3]) -> [Tensor; 3] {
    let rows = channel_rows(x.shape());
    let [mean, invstd, weight] = stats.map(|t| t.contiguous_data::<T>());
    let xs = x.contiguous_data::<T>();
    let mut dx = reserved("batch_norm backward", xs.len());
    let (dw, db) = kn::batch_norm_backward(
        [&up.contiguous_data::<T>(), &xs],
        rows,
        [&mean, &invstd, &weight],
        &mut dx,
    );
    let c = [rows.mid];
    [
        Tensor::from_data(dx, x.shape()),
        Tensor::from_data(dw, &c),
        Tensor::from_data(db, &c),
    ]
}

/// `x` standardised over `axes` with the biased variance, `(x − mean) / √(var + eps)`, in
/// tensor ops (differentiable again), and `1 / √(var + eps)` (axes kept).
pub(crate) fn standardized(x: &Tensor, axes: &[usize], eps: f64) -> (Tensor, Tensor) {
    let centered = x - &x.mean_axes(axes, true);
    let invstd = centered
        .square()
        .mean_axes(axes, true)
        .add_scalar(eps)
        .powf(-0.5);
    (&centered * &invstd, invstd)
}

/// The same derivative in tensor ops on the (tracked) inputs: differentiable again.
fn composite_backward(up: &Tensor, x: &Tensor, weight: &Tensor, eps: f64) -> [Tensor; 3] {
    let axes = stat_axes(x.ndim());
    let mut keep = vec![1; x.ndim()];
    keep[1] = x.shape()[1];
    let (xhat, invstd) = standardized(x, &axes, eps);
    let up_xhat = up * &xhat;
    let scaled = &weight.reshape(&keep) * &invstd;
    let dx = &scaled
        * &(&(up - &up.mean_axes(&axes, true)) - &(&xhat * &up_xhat.mean_axes(&axes, true)));
    [
        dx,
        up_xhat.sum_axes(&axes, false),
        up.sum_axes(&axes, false),
    ]
}

impl Tensor {
    /// Batch normalisation with this batch's statistics (PyTorch's `batch_norm` in training):
    /// every channel (axis 1 of `[N, C, ...]`) is normalised by its mean and biased variance
    /// over all other axes, then scaled by `weight` and shifted by `bias` (`[C]` each).
    ///
    /// Returns the output and the per-channel mean and biased variance (`[C]`, untracked), from
    /// which a layer updates its running statistics.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 18.0], &[2, 2]);
    /// let (w, b) = (Tensor::ones(&[2], DType::F32), Tensor::zeros(&[2], DType::F32));
    /// let (y, mean, var) = x.batch_norm(&w, &b, 0.0);
    /// assert_eq!(y.to_vec::<f32>(), vec![-1.0, -1.0, 1.0, 1.0]);
    /// assert_eq!((mean.to_vec::<f32>(), var.to_vec::<f32>()), (vec![2.0, 14.0], vec![1.0, 16.0]));
    /// ```
    pub fn batch_norm(&self, weight: &Tensor, bias: &Tensor, eps: f64) -> (Tensor, Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("batch_norm");
        trace::op("BatchNorm", attrs![eps], &[self, weight, bias], || {
            self.batch_norm_untraced(weight, bias, eps)
        })
    }

    fn batch_norm_untraced(
        &self,
        weight: &Tensor,
        bias: &Tensor,
        eps: f64,
    ) -> (Tensor, Tensor, Tensor) {
        let channels = self.shape().get(1).copied();
        assert!(
            self.ndim() >= 2
                && weight.shape() == [channels.unwrap_or(0)]
                && bias.shape() == weight.shape(),
            "batch_norm: expected input [N, C, ...] with weight and bias [C], got input {:?}, \
             weight {:?}, bias {:?}",
            self.shape(),
            weight.shape(),
            bias.shape()
        );
        assert!(
            weight.dtype() == self.dtype() && bias.dtype() == self.dtype(),
            "batch_norm: input, weight and bias must share a dtype, got {:?}, {:?}, {:?}",
            self.dtype(),
            weight.dtype(),
            bias.dtype()
        );
        let count = self.numel() / channels.unwrap_or(1).max(1);
        assert!(
            count > 1,
            "batch_norm: training needs more than one value per channel, got input {:?}",
            self.shape()
        );
        let [y, mean, var, invstd] =
            with_dtype!(self.dtype(), T => forward::<T>(self, weight, bias, eps));
        let stats = (mean.clone(), invstd);
        let y = record("batch_norm", y, &[self, weight, bias], move |c, up| {
            let (x, w) = (c.input(0), c.input(1));
            let [dx, dw, db] = if is_grad_enabled() {
                composite_backward(up, x, w, eps)
            } else {
                with_dtype!(x.dtype(), T => fused_backward::<T>(up, x, [&stats.0, &stats.1, w]))
            };
            smallvec![
                c.needs(0).then_some(dx),
                c.needs(1).then_some(dw),
                c.needs(2).then_some(db)
            ]
        });
        (y, mean, var)
    }
}

/// Layer normalisation's derivative in tensor ops on the (tracked) inputs, differentiable
/// again: `(dx, dweight, dbias)` for `y = x̂·w + b` over the last axis.
pub(crate) fn layer_norm_composite(
    up: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> [Tensor; 3] {
    let centered = x - &x.mean_axes(&[-1], true);
    let rstd = centered
        .square()
        .mean_axes(&[-1], true)
        .add_scalar(eps)
        .powf(-0.5);
    let xhat = &centered * &rstd;
    let g = up * weight;
    let dx = &rstd
        * &(&(&g - &g.mean_axes(&[-1], true)) - &(&xhat * &(&g * &xhat).mean_axes(&[-1], true)));
    let rows: Vec<usize> = (0..x.ndim() - 1).collect();
    [
        dx,
        (up * &xhat).sum_axes(&rows, false),
        up.sum_axes(&rows, false),
    ]
}

impl Tensor {
    /// Layer normalisation over the last axis, PyTorch's `F.layer_norm(x, (D,), weight, bias,
    /// eps)`: each row normalised by its mean and biased variance, `(x − mean)/√(var + eps)`,
    /// then times `weight` and plus `bias` (`[D]` each, same dtype). One fused kernel each way;
    /// a backward that builds a graph takes the same derivative in tensor ops.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], &[2, 2]);
    /// let (w, b) = (Tensor::ones(&[2], DType::F64), Tensor::zeros(&[2], DType::F64));
    /// let y = x.layer_norm(&w, &b, 0.0);
    /// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0, -1.0, 1.0]);
    /// ```
    pub fn layer_norm(&self, weight: &Tensor, bias: &Tensor, eps: f64) -> Tensor {
        let _profiled = crate::tensor::profile::scope("layer_norm");
        trace::op("LayerNorm", attrs![eps], &[self, weight, bias], || {
            self.layer_norm_untraced(weight, bias, eps)
        })
    }

    fn layer_norm_untraced(&self, weight: &Tensor, bias: &Tensor, eps: f64) -> Tensor {
        let shapes = [self, weight, bias].map(|t| known(t.shape()));
        eager_or_panic("layer_norm", layer_norm_rule(&shapes));
        let dtype = layer_norm_dtype([self, weight, bias].map(Tensor::dtype));
        dtype.unwrap_or_else(|e| panic!("layer_norm: {e}"));
        let d = self.shape()[self.ndim() - 1];
        let (y, stats) = with_dtype!(self.dtype(), T => {
            let x = self.contiguous_data::<T>();
            let (w, b) = (weight.contiguous_data::<T>(), bias.contiguous_data::<T>());
            let mut out = reserved("layer_norm", x.len());
            let stats = kn::layer_norm(&x, d, [&w, &b], T::from_f64(eps), &mut out);
            let rows = stats.len() / 2;
            (Tensor::from_data(out, self.shape()), Tensor::from_data(stats, &[rows, 2]))
        });
        record("layer_norm", y, &[self, weight, bias], move |c, up| {
            let (x, w) = (c.input(0), c.input(1));
            let [dx, dw, db] = if is_grad_enabled() {
                let (dx, dw, db) = up.layer_norm_backward(x, w, eps);
                [dx, dw, db]
            } else {
                with_dtype!(x.dtype(), T => layer_norm_fused::<T>(up, x, w, &stats))
            };
            smallvec![
                c.needs(0).then_some(dx),
                c.needs(1).then_some(dw),
                c.needs(2).then_some(db)
            ]
        })
    }
}

/// Layer normalisation's derivative by the fused kernel, from the forward's per-row mean
/// and rstd (`stats`, `[rows, 2]`): `(dx, dweight, dbias)`.
fn layer_norm_fused<T: FloatElement>(
    up: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    stats: &Tensor,
) -> [Tensor; 3] {
    let d = weight.numel();
    let xs = x.contiguous_data::<T>();
    let mut dx = reserved("layer_norm backward", xs.len());
    let (dw, db) = kn::layer_norm_backward(
        [&up.contiguous_data::<T>(), &xs],
        d,
        &weight.contiguous_data::<T>(),
        &stats.contiguous_data::<T>(),
        &mut dx,
    );
    [
        Tensor::from_data(dx, x.shape()),
        Tensor::from_data(dw, &[d]),
        Tensor::from_data(db, &[d]),
    ]
}

impl Tensor {
    /// The gradients of [`Tensor::layer_norm`] of `x` with `weight` (and `eps`) given this
    /// gradient of its output: `(dx, dweight, dbias)`, PyTorch's `native_layer_norm_backward`.
    /// One fused pass (it recomputes each row's statistics); under a graph that is recorded,
    /// the same derivative in tensor ops, differentiable again.
    pub fn layer_norm_backward(
        &self,
        x: &Tensor,
        weight: &Tensor,
        eps: f64,
    ) -> (Tensor, Tensor, Tensor) {
        let _profiled = crate::tensor::profile::scope("layer_norm_backward");
        trace::op("LayerNormBackward", attrs![eps], &[self, x, weight], || {
            let [dx, dw, db] = if is_grad_enabled() {
                layer_norm_composite(self, x, weight, eps)
            } else {
                with_dtype!(x.dtype(), T => {
                    let d = weight.numel();
                    let stats = kn::layer_norm_stats(&x.contiguous_data::<T>(), d, T::from_f64(eps));
                    let rows = stats.len() / 2;
                    let stats = Tensor::from_data(stats, &[rows, 2]);
                    layer_norm_fused::<T>(self, x, weight, &stats)
                })
            };
            (dx, dw, db)
        })
    }

    /// RMS normalisation over the last axis, PyTorch's `F.rms_norm`: `x / √(mean(x²) + eps)`,
    /// times `weight` (`[D]`) when given. Without `eps`, the dtype's machine epsilon, as
    /// PyTorch's default. Written with differentiable ops: every order of derivative.
    pub fn rms_norm(&self, weight: Option<&Tensor>, eps: Option<f64>) -> Tensor {
        let _profiled = crate::tensor::profile::scope("rms_norm");
        let body = || self.rms_norm_untraced(weight, eps);
        match weight {
            Some(w) => trace::op("RmsNorm", attrs![eps], &[self, w], body),
            None => trace::op("RmsNorm", attrs![eps], &[self], body),
        }
    }

    pub(crate) fn rms_norm_untraced(&self, weight: Option<&Tensor>, eps: Option<f64>) -> Tensor {
        assert!(
            self.ndim() >= 1,
            "rms_norm: needs at least one axis, got a 0-d tensor"
        );
        let eps = eps.unwrap_or(match self.dtype() {
            DType::F64 => f64::EPSILON,
            _ => f32::EPSILON as f64,
        });
        let mean_square = self.square().mean_axes(&[-1], true);
        let y = self / &mean_square.add_scalar(eps).sqrt();
        match weight {
            Some(w) => &y * w,
            None => y,
        }
    }
}

// Layer normalisation's shape and dtype rules, which the static graph's inference shares (see
// `ops::shape`).

/// Input `[..., D]` with weight and bias `[D]`, `D > 0`; the result has the input's shape.
pub(crate) fn layer_norm_rule([x, w, b]: &[Shape; 3]) -> Rule {
    let d = x.last().copied().flatten();
    let fits = |p: &Shape| p.len() == 1 && (d.is_none() || p[0].is_none() || p[0] == d);
    if x.is_empty() || d == Some(0) || !fits(w) || !fits(b) {
        return Err(format!(
            "expected input [..., D] with weight and bias [D], got input {}, weight {}, bias {}",
            show(x),
            show(w),
            show(b)
        ));
    }
    Ok(x.clone())
}

/// One float dtype for input, weight and bias.
pub(crate) fn layer_norm_dtype([x, w, b]: [DType; 3]) -> Result<DType, String> {
    if x.is_float() && w == x && b == x {
        Ok(x)
    } else {
        Err(format!(
            "input, weight and bias must share a float dtype, got {x}, {w} and {b}"
        ))
    }
}
