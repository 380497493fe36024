//! Matrix product: 2-D, batched N-D with broadcast batch axes, and 1-D operands promoted as in
//! numpy. Transposed views go to the kernel as strides, never copied; a stack of matrices
//! times one matrix is one product of all their rows (a copy only when the stack's rows are
//! not already one matrix).

use super::binary_promote;
use super::dtype::{eager_dtype, floats_rule, promoted_float_rule};
use smallvec::smallvec;

use super::shape::{broadcast, eager, known, numel, same, show, Rule};
use crate::error::{Error, Result};
use crate::kernels::matmul::{gemm_batch_append, gemm_plus_row_append, MatRef};
use crate::kernels::part_numel;
use crate::tensor::trace::{self, attrs};
use crate::tensor::{checked_numel, no_grad, record, with_dtype, FloatElement, Tensor};

impl Tensor {
    /// Matrix product `self @ other`. Panics with both shapes when they do not fit.
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        let _profiled = crate::tensor::profile::scope("matmul");
        self.try_matmul(other).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::matmul`], returning [`Error::Shape`] instead of panicking when the shapes do
    /// not fit.
    pub fn try_matmul(&self, other: &Tensor) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("matmul");
        trace::op("Matmul", attrs![], &[self, other], || {
            self.matmul_untraced(other)
        })
    }

    fn matmul_untraced(&self, other: &Tensor) -> Result<Tensor> {
        let out_shape = eager(
            "matmul",
            matmul_rule(&known(self.shape()), &known(other.shape())),
        )?;
        eager_dtype("matmul", promoted_float_rule(self.dtype(), other.dtype()))?;
        let (a, b) = binary_promote(self, other);
        // 1-D operands are a row (left) or a column (right) vector, removed again afterwards.
        if a.ndim() == 1 {
            return Ok(a.unsqueeze(0).try_matmul(&b)?.reshape(&out_shape));
        }
        if b.ndim() == 1 {
            return Ok(a.try_matmul(&b.unsqueeze(1))?.reshape(&out_shape));
        }
        let (ra, rb) = (a.ndim(), b.ndim());
        let k = a.shape()[ra - 1];
        crate::tensor::profile::note_product_flops(out_shape.iter().copied().chain([k]));
        let rows = a.numel() / k.max(1);
        if ra > 2 && rb == 2 && k > 0 && rows > 0 {
            // A stack of matrices times one matrix (a layer applied to [N, T, E]) is one
            // product of all their rows: one large gemm instead of N small ones, and one
            // product for the matrix's gradient instead of N summed.
            return a
                .try_reshape(&[rows, k])?
                .try_matmul(&b)?
                .try_reshape(&out_shape);
        }
        let out = if out_shape.contains(&0) {
            Tensor::zeros(&out_shape, a.dtype())
        } else if k == 0 {
            // An empty inner dimension sums nothing: zeros, without a product per batch
            // entry, and an error (not a panic) when they do not fit in memory.
            with_dtype!(a.dtype(), T => {
                let mut zeros = product_buffer::<T>("matmul", &out_shape, &a, &b)?;
                zeros.resize(checked_numel(&out_shape).unwrap_or(0), T::default());
                Tensor::from_data(zeros, &out_shape)
            })
        } else {
            with_dtype!(a.dtype(), T => batched::<T>(&a, &b, &out_shape, k))?
        };
        Ok(record("matmul", out, &[&a, &b], |c, up| {
            let (a, b) = (c.input(0), c.input(1));
            smallvec![
                c.needs(0).then(|| up.matmul(&b.t()).sum_to(a.shape())),
                c.needs(1).then(|| {
                    // A transposed matrix (Dense's `weight.t()`) gets its gradient as the
                    // transpose of a row-major product: the same work, and after the
                    // transpose's own rule the leaf's gradient is row-major like the leaf, so
                    // optimizers update it without a copy.
                    if b.ndim() == 2 && a.ndim() == 2 && b.t().is_contiguous() {
                        up.t().matmul(a).t()
                    } else {
                        a.t().matmul(up).sum_to(b.shape())
                    }
                }),
            ]
        }))
    }
}

impl Tensor {
    /// `self @ weightᵀ + bias`, PyTorch's `F.linear`: `self` `[.., in]`, `weight` `[out, in]`,
    /// `bias` `[out]` (or none), giving `[.., out]`. The same values as the matmul and the
    /// addition written out (to the bit), without a pass of its own: where the own f32 kernel
    /// runs, the bias joins each row panel of the product once it is stored, still in cache.
    /// Mixed dtypes are promoted. Panics when the shapes do not fit.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
        let _profiled = crate::tensor::profile::scope("linear");
        self.try_linear(weight, bias)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::linear`], returning [`Error::Shape`] instead of panicking when the shapes do
    /// not fit.
    pub fn try_linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let _profiled = crate::tensor::profile::scope("linear");
        let body = || self.linear_untraced(weight, bias);
        match bias {
            Some(b) => trace::op("Linear", attrs![], &[self, weight, b], body),
            None => trace::op("Linear", attrs![], &[self, weight], body),
        }
    }

    fn linear_untraced(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let (out_shape, rows, k, n) = linear_shape(self, weight, bias)?;
        crate::tensor::profile::note_product_flops([rows, k, n]);
        let mut operands = vec![("input", self.dtype()), ("weight", weight.dtype())];
        operands.extend(bias.map(|b| ("bias", b.dtype())));
        let dtype = eager_dtype("linear", floats_rule(&operands))?;
        let (x, w) = (self.to_dtype(dtype), weight.to_dtype(dtype));
        let b = bias.map(|b| b.to_dtype(dtype));
        let out = match &b {
            Some(b) if rows > 0 && n > 0 => {
                with_dtype!(dtype, T => linear_forward::<T>(&x, &w, b, (rows, k), &out_shape))?
            }
            // Without a bias, or with an empty result, the product is all there is to do.
            _ => no_grad(|| -> Result<Tensor> {
                let y = x
                    .try_matmul(&w.t())
                    .map_err(|e| Error::Shape(format!("linear: {e}")))?;
                Ok(b.as_ref().map_or(y.clone(), |b| &y + b))
            })?,
        };
        let mut inputs = vec![&x, &w];
        inputs.extend(&b);
        Ok(record("linear", out, &inputs, move |c, up| {
            let (x, w) = (c.input(0), c.input(1));
            let mut grads = smallvec![
                c.needs(0).then(|| up.matmul(w)),
                c.needs(1).then(|| {
                    // Rows of every leading axis at once: [out, rows] @ [rows, in], row-major
                    // like the weight, so an optimizer updates it without a copy.
                    let n = w.shape()[0];
                    up.reshape(&[rows, n]).t().matmul(&x.reshape(&[rows, k]))
                }),
            ];
            if c.inputs.len() == 3 {
                grads.push(c.needs(2).then(|| up.sum_to(&[n])));
            }
            grads
        }))
    }
}

/// `linear`'s output shape, with its rows (the input's leading axes, even where its last axis
/// is empty), inner and output sizes, or why the operands do not fit.
fn linear_shape(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
) -> Result<(Vec<usize>, usize, usize, usize)> {
    let fits = match (x.shape(), w.shape()) {
        ([.., k], [n, kw]) if k == kw => b.is_none_or(|b| b.shape() == [*n]),
        _ => false,
    };
    if !fits {
        let bias = b.map_or("no bias".to_string(), |b| format!("bias {:?}", b.shape()));
        return Err(Error::Shape(format!(
            "linear: input {:?}, weight {:?} and {bias} do not fit ([.., in], [out, in] and \
             [out])",
            x.shape(),
            w.shape(),
        )));
    }
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let lead = &x.shape()[..x.ndim() - 1];
    let rows = checked_numel(lead).ok_or_else(|| {
        Error::Shape(format!(
            "linear: input {:?} has more rows than fit in memory",
            x.shape()
        ))
    })?;
    let mut out_shape = lead.to_vec();
    out_shape.push(n);
    Ok((out_shape, rows, k, n))
}

/// `x @ wᵀ + b` for non-empty `rows × n`, `x` seen as `[rows, k]`.
fn linear_forward<T: FloatElement>(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    (rows, k): (usize, usize),
    out_shape: &[usize],
) -> Result<Tensor> {
    let mut data = product_buffer::<T>("linear", out_shape, x, w)?;
    // A view wherever the strides allow (a copy otherwise), read in place by the kernel.
    let x2 = no_grad(|| x.reshape(&[rows, k]));
    let (xs, ws) = (x2.strides(), w.strides());
    let a = MatRef {
        data: x2.buffer::<T>(),
        offset: x2.layout().offset,
        rows,
        cols: k,
        rs: xs[0],
        cs: xs[1],
    };
    // The weight transposed, as strides.
    let bt = MatRef {
        data: w.buffer::<T>(),
        offset: w.layout().offset,
        rows: k,
        cols: w.shape()[0],
        rs: ws[1],
        cs: ws[0],
    };
    gemm_plus_row_append(a, bt, &b.contiguous_data::<T>(), &mut data);
    Ok(Tensor::from_data(data, out_shape))
}

/// An empty buffer with room for the product `out_shape` of `a` and `b`, or an error naming
/// `op` when that much memory cannot be had.
fn product_buffer<T>(op: &str, out_shape: &[usize], a: &Tensor, b: &Tensor) -> Result<Vec<T>> {
    let numel = checked_numel(out_shape).unwrap_or(usize::MAX);
    let mut data = Vec::new();
    data.try_reserve_exact(numel).map_err(|_| {
        Error::Shape(format!(
            "{op}: cannot allocate the {numel} elements of the product of {:?} and {:?}",
            a.shape(),
            b.shape()
        ))
    })?;
    Ok(data)
}

/// Per-batch offsets of an operand broadcast to `batch ++ [rows, cols]`, plus its matrix
/// strides.
fn operand_offsets(
    t: &Tensor,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> (Vec<usize>, usize, usize) {
    let mut full = batch.to_vec();
    full.extend([rows, cols]);
    let strides = t.layout().broadcast_strides(&full);
    let nb = part_numel(batch);
    let offsets = (0..nb)
        .map(|mut i| {
            let mut off = t.layout().offset;
            for ax in (0..batch.len()).rev() {
                off += (i % batch[ax]) * strides[ax];
                i /= batch[ax];
            }
            off
        })
        .collect();
    (offsets, strides[batch.len()], strides[batch.len() + 1])
}

/// The product into `out_shape` (`batch ++ [m, n]`, not empty).
fn batched<T: FloatElement>(
    a: &Tensor,
    b: &Tensor,
    out_shape: &[usize],
    k: usize,
) -> Result<Tensor> {
    let (batch, m, n) = match out_shape {
        [batch @ .., m, n] => (batch, *m, *n),
        _ => unreachable!("matmul output has two matrix axes"),
    };
    // The output first: the per-batch tables below are no larger than it, so a batch too
    // large to hold is an error here, before anything is allocated in proportion to it.
    let mut data = product_buffer::<T>("matmul", out_shape, a, b)?;
    let (offs_a, rsa, csa) = operand_offsets(a, batch, m, k);
    let (offs_b, rsb, csb) = operand_offsets(b, batch, k, n);
    let (da, db) = (a.buffer::<T>(), b.buffer::<T>());
    let pairs: Vec<_> = offs_a
        .iter()
        .zip(&offs_b)
        .map(|(&oa, &ob)| {
            (
                MatRef {
                    data: da,
                    offset: oa,
                    rows: m,
                    cols: k,
                    rs: rsa,
                    cs: csa,
                },
                MatRef {
                    data: db,
                    offset: ob,
                    rows: k,
                    cols: n,
                    rs: rsb,
                    cs: csb,
                },
            )
        })
        .collect();
    gemm_batch_append(&pairs, m, n, &mut data);
    Ok(Tensor::from_data(data, out_shape))
}

/// numpy's matmul: the inner sizes agree, the batch axes broadcast; a 1-D operand is a row
/// (left) or a column (right) that the result drops. The shape rule the static graph's
/// inference shares (see `ops::shape`).
pub(crate) fn matmul_rule(a: &[Option<usize>], b: &[Option<usize>]) -> Rule {
    if a.is_empty() || b.is_empty() {
        return Err(format!(
            "operands need at least one axis: {} @ {}",
            show(a),
            show(b)
        ));
    }
    let a2 = if a.len() == 1 {
        vec![Some(1), a[0]]
    } else {
        a.to_vec()
    };
    let b2 = if b.len() == 1 {
        vec![b[0], Some(1)]
    } else {
        b.to_vec()
    };
    let (ra, rb) = (a2.len(), b2.len());
    if !same(a2[ra - 1], b2[rb - 2]) {
        return Err(format!(
            "inner dimensions differ: {} @ {}",
            show(a),
            show(b)
        ));
    }
    let mut out = broadcast(&a2[..ra - 2], &b2[..rb - 2]).map_err(|_| {
        format!(
            "batch dimensions do not broadcast: {} @ {}",
            show(a),
            show(b)
        )
    })?;
    if a.len() != 1 {
        out.push(a2[ra - 2]);
    }
    if b.len() != 1 {
        out.push(b2[rb - 1]);
    }
    numel(&out).map_err(|_| {
        format!(
            "the product of {} @ {} has more elements than fit in memory",
            show(a),
            show(b)
        )
    })?;
    Ok(out)
}
