//! Lookup table: rows of a weight matrix selected by integer ids.

use super::module::tie_slot;
use super::{Layer, Mode, Module};
use crate::autograd::Param;
use crate::error::{Error, Result};
use crate::init;
use crate::tensor::{with_default_rng, DType, Tensor};

/// A table of `count` learned vectors of `dim` entries, looked up by integer id (PyTorch's
/// `nn.Embedding`; the table is the parameter `weight`, `[count, dim]`).
///
/// ```
/// use ferrograd::prelude::*;
///
/// let emb = Embedding::new(100, 16);
/// let ids = Tensor::from_vec(vec![3i64, 7, 7, 0, 1, 99], &[2, 3]);
/// let v = Layer::forward(&emb, &ids, Mode::Eval);
/// assert_eq!(v.shape(), &[2, 3, 16]);
/// assert_eq!(emb.lookup(&[3, 7]).shape(), &[2, 16]);
/// assert_eq!(emb.params()[0].1.shape(), vec![100, 16]);
/// ```
pub struct Embedding {
    table: Param,
    padding: Option<usize>,
}

impl Embedding {
    /// `count` vectors of `dim`, drawn from N(0, 1) as PyTorch does.
    pub fn new(count: usize, dim: usize) -> Embedding {
        let table = with_default_rng(|r| init::normal(&[count, dim], 0.0, 1.0, DType::F32, r));
        Embedding {
            table: Param::new(table),
            padding: None,
        }
    }

    /// Row `id` as padding (PyTorch's `padding_idx`): set to zeros now, and never changed by
    /// training, since no gradient reaches it (its current value is what it looks up).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let emb = Embedding::new(5, 3).padding_idx(0);
    /// let ids = Tensor::from_vec(vec![0i64, 2, 0], &[3]);
    /// let y = Layer::forward(&emb, &ids, Mode::Train);
    /// assert_eq!(y.narrow(0, 0, 1).to_vec::<f32>(), [0.0; 3]);
    /// let g = y.sum().backward().get(&emb.weight().tensor()).unwrap();
    /// assert_eq!(g.narrow(0, 0, 1).to_vec::<f32>(), [0.0; 3]); // the padding row: none
    /// assert_eq!(g.narrow(0, 2, 1).to_vec::<f32>(), [1.0; 3]);
    /// ```
    pub fn padding_idx(mut self, id: usize) -> Embedding {
        let [rows, dim] = [0, 1].map(|a| self.table.shape()[a]);
        assert!(
            id < rows,
            "Embedding: padding_idx {id} is not a row of {rows}"
        );
        let t = self.table.tensor().detach();
        let zero = Tensor::zeros(&[1, dim], t.dtype());
        let parts = [t.narrow(0, 0, id), zero, t.narrow(0, id + 1, rows - id - 1)];
        self.table.set(&Tensor::cat(&parts.each_ref(), 0));
        self.padding = Some(id);
        self
    }

    /// The table, `[count, dim]` (to tie an output layer to it: [`Dense::tied`]).
    ///
    /// [`Dense::tied`]: super::Dense::tied
    pub fn weight(&self) -> &Param {
        &self.table
    }

    /// The vectors of `ids`: `[ids.len(), dim]`. Gradients scatter back into the used rows
    /// (but the padding row's).
    pub fn lookup(&self, ids: &[usize]) -> Tensor {
        let rows = self.table.tensor().index_select(0, ids);
        match self.padding {
            Some(p) if ids.contains(&p) => {
                let pad: Vec<f64> = ids.iter().map(|&i| f64::from(u8::from(i == p))).collect();
                let pad = Tensor::from_vec(pad, &[ids.len(), 1]);
                pad.where_cond(&rows.detach(), &rows)
            }
            _ => rows,
        }
    }
}

impl Module for Embedding {
    fn params(&self) -> Vec<(String, Param)> {
        vec![("weight".into(), self.table.clone())]
    }

    fn tie(&mut self, name: &str, to: &Param) -> Result<()> {
        let layer = self.name();
        match name {
            "weight" => tie_slot(&layer, name, &mut self.table, to),
            _ => Err(Error::Shape(format!(
                "{layer}: no parameter {name:?} to share"
            ))),
        }
    }

    fn name(&self) -> String {
        let s = self.table.shape();
        match self.padding {
            Some(p) => format!("Embedding({}, {}, padding_idx={p})", s[0], s[1]),
            None => format!("Embedding({}, {})", s[0], s[1]),
        }
    }
}

impl Layer for Embedding {
    /// `x` holds ids, any shape: an `I64` tensor (or whole floats); the result has a trailing
    /// `dim` axis.
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let (rows, dim) = (self.table.shape()[0], self.table.shape()[1]);
        let ids: Vec<usize> = x
            .to_vec::<f64>()
            .iter()
            .map(|&v| {
                assert!(
                    v >= 0.0 && v < rows as f64 && v.fract() == 0.0,
                    "{}: id {v} is not an integer in 0..{rows}",
                    self.name()
                );
                v as usize
            })
            .collect();
        let mut shape = x.shape().to_vec();
        shape.push(dim);
        // Selected by the ids as a tensor, and the padding mask made from them by ops, so
        // that a trace keeps the ids an input.
        let flat = x.to_dtype(DType::I64).reshape(&[ids.len()]);
        let rows = self.table.tensor().index_select(0, &flat);
        let rows = match self.padding {
            // The padding row's vectors pass no gradient.
            Some(p) if ids.contains(&p) => {
                let pad = flat.eq_scalar(p as f64).to_dtype(rows.dtype());
                pad.reshape(&[ids.len(), 1])
                    .where_cond(&rows.detach(), &rows)
            }
            _ => rows,
        };
        rows.reshape(&shape)
    }
}
