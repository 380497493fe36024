//! `Display` and `Debug` in the style of numpy/PyTorch: nested brackets, aligned columns, long
//! axes elided with `...`, then the shape and dtype.

use std::fmt;

use super::Tensor;

/// Tensors with more elements than this show only the edges of each axis.
const ELIDE_ABOVE: usize = 1000;
/// Items shown at each end of an elided axis.
const EDGE: usize = 3;

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.numel() == 0 {
            // Nothing to lay out (and the shape's other axes may be huge).
            return write!(
                f,
                "tensor([], shape={:?}, dtype={})",
                self.shape(),
                self.dtype()
            );
        }
        let values = self.to_vec::<f64>();
        let elide = values.len() > ELIDE_ABOVE;
        let precision = f.precision().unwrap_or(4);
        // One style for the whole tensor, as numpy: "1." when every value is whole.
        let whole = values
            .iter()
            .all(|v| v.is_finite() && *v == v.trunc() && v.abs() < 1e16);
        let integer = !self.dtype().is_float();
        let fmt_one = |v: f64| -> String {
            if integer {
                format!("{v:.0}")
            } else if whole {
                format!("{v:.0}.")
            } else {
                format!("{v:.precision$}")
            }
        };
        let width = values.iter().map(|&v| fmt_one(v).len()).max().unwrap_or(1);
        let mut out = String::from("tensor(");
        let indent = out.len();
        write_axis(&mut out, &values, self.shape(), 0, 0, indent, elide, &|v| {
            format!("{:>width$}", fmt_one(v))
        });
        f.write_str(&out)?;
        write!(f, ", shape={:?}, dtype={}", self.shape(), self.dtype())?;
        // As PyTorch prints them: the op that made a tracked result, or a leaf's flag.
        match self.grad_fn() {
            Some(op) => write!(f, ", grad_fn={op}")?,
            None if self.is_tracked() => f.write_str(", requires_grad=true")?,
            None => {}
        }
        f.write_str(")")
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[allow(clippy::too_many_arguments)]
fn write_axis(
    out: &mut String,
    values: &[f64],
    shape: &[usize],
    axis: usize,
    start: usize,
    indent: usize,
    elide: bool,
    one: &dyn Fn(f64) -> String,
) {
    if axis == shape.len() {
        out.push_str(&one(values[start]));
        return;
    }
    let n = shape[axis];
    let block = crate::kernels::part_numel(&shape[axis + 1..]);
    out.push('[');
    let shown: Vec<Option<usize>> = if elide && n > 2 * EDGE {
        (0..EDGE)
            .map(Some)
            .chain([None])
            .chain((n - EDGE..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    let inner_last = axis + 1 == shape.len();
    for (k, item) in shown.iter().enumerate() {
        if k > 0 {
            if inner_last {
                out.push_str(", ");
            } else {
                out.push(',');
                for _ in 0..(shape.len() - axis - 1) {
                    out.push('\n');
                }
                out.push_str(&" ".repeat(indent + axis + 1));
            }
        }
        match item {
            Some(i) => write_axis(
                out,
                values,
                shape,
                axis + 1,
                start + i * block,
                indent,
                elide,
                one,
            ),
            None => out.push_str("..."),
        }
    }
    out.push(']');
}
