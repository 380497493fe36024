//! The result of a backward pass: one gradient per tracked leaf, looked up by tensor or
//! parameter.

use std::ops::{Add, AddAssign};

use super::ids::IdMap;
use super::param::Param;
use crate::kernels::optim::sum_squares;
use crate::kernels::parallel::run_tasks;
use crate::tensor::{with_dtype, Tensor};

/// Gradients from one backward pass. Fresh on every call; add two to accumulate explicitly
/// (over micro-batches, say).
#[derive(Clone, Default)]
pub struct Gradients {
    map: IdMap<Tensor>,
}

impl Gradients {
    pub(crate) fn from_map(map: IdMap<Tensor>) -> Gradients {
        Gradients { map }
    }

    /// The gradient for the tracked leaf `t`, or `None` when `t` does not reach the result.
    pub fn get(&self, t: &Tensor) -> Option<Tensor> {
        t.0.node.as_ref().and_then(|n| self.map.get(&n.id).cloned())
    }

    /// The gradient for a parameter, or `None` when it does not reach the result.
    pub fn get_param(&self, p: &Param) -> Option<Tensor> {
        self.map.get(&p.id()).cloned()
    }

    /// Sets the gradient of parameter `p` (replacing any it had): for gradients that come from
    /// elsewhere than a backward pass (kept beside each parameter by a binding, say).
    pub fn insert(&mut self, p: &Param, g: Tensor) {
        self.map.insert(p.id(), g);
    }

    /// Number of leaves with a gradient.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// `true` when no leaf received a gradient.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The parameters' gradients, in `params`' order, skipping those with none.
    pub fn of<'a>(
        &'a self,
        params: &'a [(String, Param)],
    ) -> impl Iterator<Item = (&'a str, Tensor)> + 'a {
        params
            .iter()
            .filter_map(|(n, p)| self.get_param(p).map(|g| (n.as_str(), g)))
    }

    /// The global L2 norm of every gradient held here together, accumulated in f64 (clipping
    /// by norm compares the same figure, over the parameters it updates).
    pub fn norm(&self) -> f64 {
        global_norm(self.map.values())
    }

    /// Every gradient scaled by `factor` (averaging accumulated micro-batches, say).
    pub fn scale(&self, factor: f64) -> Gradients {
        Gradients {
            map: self.map.iter().map(|(&k, g)| (k, g * factor)).collect(),
        }
    }
}

/// The L2 norm of all `tensors` together, as if they were one vector, accumulated in f64
/// (what `clip_grad_norm_` compares with its bound). Each tensor's sum of squares is taken on
/// whichever thread is free (most are too small to split), and the sums are added in the
/// tensors' order: the same bits on any number of threads.
pub fn global_norm<'a>(tensors: impl IntoIterator<Item = &'a Tensor>) -> f64 {
    let tensors: Vec<&Tensor> = tensors.into_iter().collect();
    run_tasks(
        tensors,
        |t| with_dtype!(t.dtype(), T => sum_squares(&t.contiguous_data::<T>())),
    )
    .iter()
    .sum::<f64>()
    .sqrt()
}

impl std::fmt::Debug for Gradients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shapes: Vec<(u64, Vec<usize>)> = self
            .map
            .iter()
            .map(|(&id, g)| (id, g.shape().to_vec()))
            .collect();
        shapes.sort();
        f.debug_struct("Gradients")
            .field("leaves", &shapes.len())
            .field(
                "shapes",
                &shapes.into_iter().map(|(_, s)| s).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl AddAssign<&Gradients> for Gradients {
    fn add_assign(&mut self, rhs: &Gradients) {
        for (&id, g) in &rhs.map {
            let sum = match self.map.get(&id) {
                Some(acc) => acc + g,
                None => g.clone(),
            };
            self.map.insert(id, sum);
        }
    }
}

impl Add<&Gradients> for &Gradients {
    type Output = Gradients;
    fn add(self, rhs: &Gradients) -> Gradients {
        let mut out = self.clone();
        out += rhs;
        out
    }
}

impl Add for Gradients {
    type Output = Gradients;
    fn add(mut self, rhs: Gradients) -> Gradients {
        self += &rhs;
        self
    }
}
