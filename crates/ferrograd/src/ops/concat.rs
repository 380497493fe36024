//! New buffers assembled from blocks: cat and stack join tensors along an axis, pad surrounds
//! one with a constant. Their gradients are views of the upstream gradient (narrow).

use crate::tensor::trace::{self, attrs};
use smallvec::smallvec;

use super::dtype::joined_rule;
use super::shape::{check_axis, eager, eager_or_panic, known, numel, same, show, Rule, Shape};
use super::Axis;
use crate::error::{Error, Result};
use crate::kernels::{index, strided, Rows};
use crate::tensor::{checked_numel, filled, record, with_any_dtype, Element, Tensor};

impl Tensor {
    /// Padded with `value`: `pads[i] = (before, after)` elements along axis `i`.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Tensor {
        let _profiled = crate::tensor::profile::scope("pad");
        trace::op("Pad", attrs![pads.to_vec(), value], &[self], || {
            self.pad_untraced(pads, value)
        })
    }

    fn pad_untraced(&self, pads: &[(usize, usize)], value: f64) -> Tensor {
        let out_shape = eager_or_panic("pad", pad_rule(&known(self.shape()), pads));
        let len = checked_numel(&out_shape).expect("the rule checked the count");
        let start: Vec<usize> = pads.iter().map(|&(before, _)| before).collect();
        let out = with_any_dtype!(self.dtype(), T => {
            let mut out = filled("pad", len, T::cast_from_f64(value));
            let src = self.contiguous_data::<T>();
            strided::copy_into_block(&src, self.shape(), &mut out, &out_shape, &start);
            Tensor::from_data(out, &out_shape)
        });
        let pads = pads.to_vec();
        record("pad", out, &[self], move |c, up| {
            let mut g = up.clone();
            for (axis, &(before, _)) in pads.iter().enumerate() {
                g = g.narrow(axis, before, c.input(0).shape()[axis]);
            }
            smallvec![Some(g)]
        })
    }

    /// Tensors joined along `axis`; all other axes must agree.
    pub fn cat<A: Axis>(tensors: &[&Tensor], axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("cat");
        Tensor::try_cat(tensors, axis).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::cat`], returning [`Error::Shape`] instead of panicking when the list is empty,
    /// the axis is out of range or the other axes disagree.
    pub fn try_cat<A: Axis>(tensors: &[&Tensor], axis: A) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("cat");
        let resolved = tensors
            .first()
            .and_then(|t| axis.position(t.ndim()))
            .unwrap_or(0);
        trace::op("Cat", attrs![resolved], tensors, || {
            Tensor::cat_untraced(tensors, axis)
        })
    }

    fn cat_untraced<A: Axis>(tensors: &[&Tensor], axis: A) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::Shape("cat: no tensors given".into()))?;
        let Some(axis) = axis.position(first.ndim()) else {
            return Err(Error::Shape(format!(
                "cat: axis {axis} out of range for shape {:?}",
                first.shape()
            )));
        };
        let shapes: Vec<Shape> = tensors.iter().map(|t| known(t.shape())).collect();
        let out_shape = eager("cat", cat_rule(&shapes, axis))?;
        let dtype = joined_rule(tensors.iter().map(|t| t.dtype()));
        let cast: Vec<Tensor> = tensors.iter().map(|t| t.to_dtype(dtype)).collect();
        let sizes: Vec<usize> = cast.iter().map(|t| t.shape()[axis]).collect();
        let out = with_any_dtype!(dtype, T => {
            let Rows { outer, inner, .. } = Rows::around(&out_shape, axis);
            let datas: Vec<_> = cast.iter().map(|t| t.contiguous_data::<T>()).collect();
            let parts: Vec<&[T]> = datas.iter().map(|d| &d[..]).collect();
            let runs: Vec<usize> = sizes.iter().map(|&n| n * inner).collect();
            Tensor::from_data(index::concat(&parts, &runs, outer), &out_shape)
        });
        let inputs: Vec<&Tensor> = cast.iter().collect();
        Ok(record("cat", out, &inputs, move |c, up| {
            let mut start = 0;
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let g = c.needs(i).then(|| up.narrow(axis, start, n));
                    start += n;
                    g
                })
                .collect()
        }))
    }

    /// Tensors of one shape stacked along a new axis `axis`.
    /// A negative `axis` counts from the back of the result.
    pub fn stack<A: Axis>(tensors: &[&Tensor], axis: A) -> Tensor {
        let _profiled = crate::tensor::profile::scope("stack");
        let expanded: Vec<Tensor> = tensors.iter().map(|t| t.unsqueeze(axis)).collect();
        let refs: Vec<&Tensor> = expanded.iter().collect();
        Tensor::cat(&refs, axis)
    }
}

// The joins' shape rules, which the static graph's inference shares (see `ops::shape`).

/// `pads[i]` adds `(before, after)` to axis `i`; the result must fit in memory.
pub(crate) fn pad_rule(s: &[Option<usize>], pads: &[(usize, usize)]) -> Rule {
    if pads.len() != s.len() {
        return Err(format!(
            "{} (before, after) pairs given for shape {}",
            pads.len(),
            show(s)
        ));
    }
    let out: Option<Shape> = s
        .iter()
        .zip(pads)
        .map(|(n, &(a, b))| match n {
            Some(n) => n.checked_add(a)?.checked_add(b).map(Some),
            None => Some(None),
        })
        .collect();
    let out = out.ok_or_else(|| format!("padding {pads:?} overflows shape {}", show(s)))?;
    numel(&out)?;
    Ok(out)
}

/// Shapes that agree outside `axis`, joined along it; the result must fit in memory.
pub(crate) fn cat_rule(shapes: &[Shape], axis: usize) -> Rule {
    let first = shapes.first().ok_or("no tensors given")?;
    check_axis(axis, first)?;
    let mut out = first.clone();
    for s in &shapes[1..] {
        let fits =
            s.len() == first.len() && (0..s.len()).all(|i| i == axis || same(s[i], first[i]));
        if !fits {
            return Err(format!(
                "shapes {} and {} differ outside axis {axis}",
                show(first),
                show(s)
            ));
        }
        out[axis] = match (out[axis], s[axis]) {
            (Some(a), Some(b)) => Some(
                a.checked_add(b)
                    .ok_or_else(|| format!("joining along axis {axis} overflows"))?,
            ),
            _ => None,
        };
    }
    numel(&out)?;
    Ok(out)
}
