//! Reductions over axes (with or without keeping them) and over the whole tensor.

use std::borrow::Cow;

use super::dtype::{eager_dtype_or_panic, float_rule, positions_rule, sum_rule};
use super::shape::{check_axis, eager_or_panic, known, show, Rule};
use super::{axes_in, axis_in, Axis};
use smallvec::smallvec;

use crate::kernels::reduce as kr;
use crate::kernels::{checked_numel_of, part_numel, Rows};
use crate::tensor::trace::{self, attrs};
use crate::tensor::{
    filled, record, record_nondiff, with_dtype, DType, Element, FloatElement, Tensor,
};

/// A reduction arranged for the kernels: the data as `[outer, red, inner]` in row-major order.
struct Reduction {
    /// Sorted, distinct reduced axes.
    axes: Vec<usize>,
    /// The data as `[outer, reduced, inner]`.
    rows: Rows,
    /// Input shape with reduced axes set to 1.
    keep_shape: Vec<usize>,
    out_shape: Vec<usize>,
    /// The input permuted so that reduced axes are innermost, when they are not one run.
    permuted: Option<Vec<usize>>,
}

impl Reduction {
    /// `axes` are positions resolved by `axes_in`/`axis_in`; the shape rule refuses repeats,
    /// naming `op`.
    fn new(op: &str, shape: &[usize], axes: &[usize], keepdim: bool) -> Reduction {
        let out_shape = eager_or_panic(op, reduce_rule(&known(shape), axes, keepdim));
        let mut sorted = axes.to_vec();
        sorted.sort_unstable();
        let reduced = |i: usize| sorted.binary_search(&i).is_ok();
        let keep_shape: Vec<usize> = (0..shape.len())
            .map(|i| if reduced(i) { 1 } else { shape[i] })
            .collect();
        let red = checked_numel_of(sorted.iter().map(|&a| shape[a])).unwrap_or(0);
        let one_run = sorted.windows(2).all(|w| w[1] == w[0] + 1);
        let (outer, inner, permuted) = match (sorted.first(), sorted.last(), one_run) {
            (Some(&first), Some(&last), true) => (
                part_numel(&shape[..first]),
                part_numel(&shape[last + 1..]),
                None,
            ),
            _ => {
                let perm: Vec<usize> = (0..shape.len())
                    .filter(|&i| !reduced(i))
                    .chain(sorted.iter().copied())
                    .collect();
                (part_numel(&keep_shape), 1, Some(perm))
            }
        };
        Reduction {
            axes: sorted,
            rows: Rows {
                outer,
                mid: red,
                inner,
            },
            keep_shape,
            out_shape,
            permuted,
        }
    }

    /// The input's elements in the order the kernels expect.
    fn data<'a, T: Element>(&self, x: &'a Tensor) -> Cow<'a, [T]> {
        match &self.permuted {
            None => x.contiguous_data::<T>(),
            Some(perm) => Cow::Owned(
                x.view_untracked(x.layout().permuted(perm))
                    .contiguous_data::<T>()
                    .into_owned(),
            ),
        }
    }

    /// Runs `kernel(data, rows, out)` into a new tensor of the output shape.
    fn run<T: FloatElement>(
        &self,
        x: &Tensor,
        kernel: impl FnOnce(&[T], Rows, &mut [T]),
    ) -> Tensor {
        // An empty input can reduce to a huge output (zeros over [0, 2^30, 2^29]): a refused
        // allocation is a panic naming the op, not an abort.
        let mut out = filled("reduction", self.rows.outer * self.rows.inner, T::zero());
        kernel(&self.data::<T>(x), self.rows, &mut out);
        Tensor::from_data(out, &self.out_shape)
    }
}

/// For sorted axes that are not one contiguous run: the last run, and the axes before it.
fn split_last_run(axes: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    let start = (1..axes.len())
        .rev()
        .find(|&i| axes[i] != axes[i - 1] + 1)?;
    Some((axes[start..].to_vec(), axes[..start].to_vec()))
}

impl Tensor {
    /// Sum of all elements (0-d).
    pub fn sum(&self) -> Tensor {
        let _profiled = crate::tensor::profile::scope("sum");
        trace::op("Sum", attrs![], &[self], || {
            self.sum_axes(&self.all_axes(), false)
        })
    }

    /// Mean of all elements (0-d).
    pub fn mean(&self) -> Tensor {
        let _profiled = crate::tensor::profile::scope("mean");
        trace::op("Mean", attrs![], &[self], || {
            self.mean_axes(&self.all_axes(), false)
        })
    }

    /// Sum over `axes`; with `keepdim` they stay as size-1 axes. An `I64` tensor sums exactly
    /// in integers, wrapping on overflow as PyTorch's int64.
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let big = Tensor::from_vec(vec![(1i64 << 53) + 1, 2], &[2]);
    /// assert_eq!(big.sum().to_vec::<i64>(), [(1i64 << 53) + 3]);
    /// let wraps = Tensor::from_vec(vec![i64::MAX, 1], &[2]);
    /// assert_eq!(wraps.sum().to_vec::<i64>(), [i64::MIN]);
    /// ```
    pub fn sum_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("sum_axes");
        let axes = &axes_in("sum_axes", axes, self.shape());
        trace::op("SumAxes", attrs![axes.clone(), keepdim], &[self], || {
            self.sum_axes_untraced(axes, keepdim)
        })
    }

    fn sum_axes_untraced(&self, axes: &[usize], keepdim: bool) -> Tensor {
        let plan = Reduction::new("sum_axes", self.shape(), axes, keepdim);
        eager_dtype_or_panic("sum_axes", sum_rule(self.dtype()));
        if plan.axes.is_empty() {
            return self.clone();
        }
        if self.dtype() == DType::I64 {
            // Integers sum exactly, wrapping on overflow as PyTorch's int64 (no derivative:
            // an integer tensor is never tracked).
            let mut out = filled("sum_axes", plan.rows.outer * plan.rows.inner, 0i64);
            kr::sum_wrapping(&plan.data::<i64>(self), plan.rows, &mut out);
            return Tensor::from_data(out, &plan.out_shape);
        }
        if let Some((last_run, rest)) = split_last_run(&plan.axes) {
            // Several separate runs of axes ([N, C, H, W] over N, H and W, say): the last run
            // first, then the others, each over contiguous memory, instead of gathering the
            // whole tensor into a permuted copy.
            let partial = self.sum_axes(&last_run, true);
            let total = partial.sum_axes(&rest, true);
            return if keepdim {
                total
            } else {
                total.reshape(&plan.out_shape)
            };
        }
        let out = with_dtype!(self.dtype(), T => plan.run::<T>(self, kr::sum));
        let keep_shape = plan.keep_shape;
        record("sum_axes", out, &[self], move |c, up| {
            smallvec![Some(
                up.reshape(&keep_shape).broadcast_to(c.input(0).shape()),
            )]
        })
    }

    /// Mean over `axes`.
    pub fn mean_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("mean_axes");
        let axes = &axes_in("mean_axes", axes, self.shape());
        trace::op("MeanAxes", attrs![axes.clone(), keepdim], &[self], || {
            self.mean_axes_untraced(axes, keepdim)
        })
    }

    fn mean_axes_untraced(&self, axes: &[usize], keepdim: bool) -> Tensor {
        let plan = Reduction::new("mean_axes", self.shape(), axes, keepdim);
        eager_dtype_or_panic("mean_axes", float_rule(self.dtype()));
        if plan.rows.mid == 0 {
            // numpy and PyTorch give NaN for the mean of nothing.
            return &self.sum_axes(axes, keepdim) * f64::NAN;
        }
        &self.sum_axes(axes, keepdim) * (1.0 / plan.rows.mid as f64)
    }

    /// Maximum over `axes`. The gradient goes to the maximal elements, split evenly at ties.
    pub fn max_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("max_axes");
        let axes = axes_in("max_axes", axes, self.shape());
        trace::op("MaxAxes", attrs![axes.clone(), keepdim], &[self], || {
            self.extremum("max_axes", &axes, keepdim, true)
        })
    }

    /// Minimum over `axes`; gradient as in [`Tensor::max_axes`].
    pub fn min_axes<A: Axis>(&self, axes: &[A], keepdim: bool) -> Tensor {
        let _profiled = crate::tensor::profile::scope("min_axes");
        let axes = axes_in("min_axes", axes, self.shape());
        trace::op("MinAxes", attrs![axes.clone(), keepdim], &[self], || {
            self.extremum("min_axes", &axes, keepdim, false)
        })
    }

    /// Maximum of all elements (0-d).
    pub fn max(&self) -> Tensor {
        let _profiled = crate::tensor::profile::scope("max");
        trace::op("Max", attrs![], &[self], || {
            self.max_axes(&self.all_axes(), false)
        })
    }

    /// Minimum of all elements (0-d).
    pub fn min(&self) -> Tensor {
        let _profiled = crate::tensor::profile::scope("min");
        trace::op("Min", attrs![], &[self], || {
            self.min_axes(&self.all_axes(), false)
        })
    }

    fn extremum(&self, op: &'static str, axes: &[usize], keepdim: bool, is_max: bool) -> Tensor {
        let plan = Reduction::new(op, self.shape(), axes, keepdim);
        eager_dtype_or_panic(op, float_rule(self.dtype()));
        if plan.axes.is_empty() {
            return self.clone();
        }
        assert!(
            plan.rows.mid > 0,
            "{op}: reduction over an empty axis of shape {:?}",
            self.shape()
        );
        let out = with_dtype!(self.dtype(), T => plan.run::<T>(self, |x, rows, out| {
            // NaN propagates, as in numpy.
            if is_max {
                kr::fold(x, rows, out, |a, b| if a.is_nan() || a >= b { a } else { b })
            } else {
                kr::fold(x, rows, out, |a, b| if a.is_nan() || a <= b { a } else { b })
            }
        }));
        let (keep_shape, axes) = (plan.keep_shape, plan.axes);
        record(op, out, &[self], move |c, up| {
            let x = c.input(0).detach();
            let picked = x.eq(&c.out().detach().reshape(&keep_shape));
            let share = &picked / &picked.sum_axes(&axes, true);
            smallvec![Some(&up.reshape(&keep_shape) * &share)]
        })
    }

    /// Index of the largest element along `axis` (first at ties; NaN counts as the largest,
    /// as in numpy), an `I64` tensor with `axis` removed. Has no derivative.
    pub fn argmax<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("argmax");
        let axis = axis_in("argmax", axis, self.shape());
        trace::op("Argmax", attrs![axis], &[self], || {
            self.arg_extremum("argmax", axis, true)
        })
    }

    /// Index of the smallest element along `axis` (first at ties). Has no derivative.
    pub fn argmin<A: Axis>(&self, axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("argmin");
        let axis = axis_in("argmin", axis, self.shape());
        trace::op("Argmin", attrs![axis], &[self], || {
            self.arg_extremum("argmin", axis, false)
        })
    }

    fn arg_extremum(&self, op: &'static str, axis: usize, is_max: bool) -> Tensor {
        let plan = Reduction::new(op, self.shape(), &[axis], false);
        eager_dtype_or_panic(op, positions_rule(self.dtype()));
        assert!(
            plan.rows.mid > 0,
            "{op}: reduction over an empty axis of shape {:?}",
            self.shape()
        );
        let out = with_dtype!(self.dtype(), T => {
            let mut idx = vec![0usize; plan.rows.outer * plan.rows.inner];
            let data = plan.data::<T>(self);
            if is_max {
                kr::arg_fold(&data, plan.rows, &mut idx, |v, best| v > best);
            } else {
                kr::arg_fold(&data, plan.rows, &mut idx, |v, best| v < best);
            }
            // An axis longer than i64 can count cannot be allocated.
            let idx: Vec<i64> = idx.into_iter().map(|i| i as i64).collect();
            Tensor::from_data(idx, &plan.out_shape)
        });
        record_nondiff(op, out, &[self])
    }

    /// Every axis, for the reductions to one value.
    fn all_axes(&self) -> Vec<usize> {
        (0..self.ndim()).collect()
    }

    /// Sums a broadcast result back down to `shape` (the reverse of `broadcast_to`): the
    /// gradient of a broadcast operand.
    pub fn sum_to(&self, shape: &[usize]) -> Tensor {
        let _profiled = crate::tensor::profile::scope("sum_to");
        trace::op("SumTo", attrs![shape.to_vec()], &[self], || {
            self.sum_to_untraced(shape)
        })
    }

    fn sum_to_untraced(&self, shape: &[usize]) -> Tensor {
        // Every operand of a broadcast op's derivative passes here, mostly to its own shape:
        // that takes no shape rule.
        let same = self.shape() == shape;
        if !same {
            eager_or_panic("sum_to", sum_to_rule(&known(self.shape()), shape));
        }
        eager_dtype_or_panic("sum_to", float_rule(self.dtype()));
        if same {
            return self.clone();
        }
        let n = self.ndim();
        let lead = n - shape.len();
        let axes: Vec<usize> = (0..n)
            .filter(|&i| i < lead || (shape[i - lead] == 1 && self.shape()[i] != 1))
            .collect();
        self.sum_axes(&axes, true).reshape(shape)
    }
}

// The reductions' shape rules, which the static graph's inference shares (see `ops::shape`).

/// Reduced axes must be distinct axes of `s`; they leave the result, or stay as size-1 axes
/// with `keepdim`.
pub(crate) fn reduce_rule(s: &[Option<usize>], axes: &[usize], keepdim: bool) -> Rule {
    for (k, &a) in axes.iter().enumerate() {
        check_axis(a, s)?;
        if axes[..k].contains(&a) {
            return Err(format!("axis {a} given twice for shape {}", show(s)));
        }
    }
    Ok((0..s.len())
        .filter_map(|i| match (axes.contains(&i), keepdim) {
            (true, true) => Some(Some(1)),
            (true, false) => None,
            (false, _) => Some(s[i]),
        })
        .collect())
}

/// The adjoint of `broadcast_to`: `to` must broadcast to `s`.
pub(crate) fn sum_to_rule(s: &[Option<usize>], to: &[usize]) -> Rule {
    let lead = s.len().checked_sub(to.len());
    let fits = lead.is_some_and(|lead| {
        s[lead..]
            .iter()
            .zip(to)
            .all(|(n, &t)| t == 1 || n.is_none_or(|n| n == t))
    });
    if !fits {
        return Err(format!("shape {to:?} does not broadcast to {}", show(s)));
    }
    Ok(known(to))
}
