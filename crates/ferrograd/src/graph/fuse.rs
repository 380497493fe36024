//! Element-wise fusion: chains of element-wise ops (`Fusion::Elementwise` in their
//! declarations) run together over blocks of elements, so that what one op writes the next
//! reads while it is still in cache, and the intermediates inside a chain are never whole
//! tensors.
//!
//! A fused region runs each member's own op (its eager evaluation, the same kernel) on each
//! block, in order: the region gives eager's values to the bit, and an op needs nothing beyond
//! its declaration to be fused. Blocks run in parallel on the kernels' threads; the ops inside
//! a block run on one.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::op::{Binary, Fusion, Op, Unary};
use super::NodeData;
use crate::kernels::parallel::{chunks_per_part, run_tasks};
use crate::tensor::{with_any_dtype, DType, Element, Tensor};

/// Elements per block: a block of every member's values stays in the core's own caches.
const BLOCK: usize = 16384;

/// The fewest elements a region is fused at. Below it, the eager kernels' passes stay in the
/// caches and run faster than a fused loop (measured by `bench_compile` and a three-op chain:
/// fused, 2²⁰ elements took 1.1–1.2 of the unfused time; five ops on 2²² took 0.7–0.8).
const FUSED_AT_LEAST: usize = 1 << 22;

/// A block's index and its slices of the region's outputs.
type Block<'a, T> = (usize, Vec<&'a mut [T]>);

/// Each block's index with its slice of every output (`n` elements each).
fn blocks_of<T>(outs: &mut [Vec<T>], n: usize) -> Vec<Block<'_, T>> {
    let mut blocks: Vec<Block<'_, T>> = (0..n.div_ceil(BLOCK)).map(|b| (b, Vec::new())).collect();
    for out in outs {
        for (b, s) in out.chunks_mut(BLOCK).enumerate() {
            blocks[b].1.push(s);
        }
    }
    blocks
}

/// Where a member reads an operand: a value from outside the region, or an earlier member.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Outer(usize),
    Member(usize),
}

/// Element-wise nodes of one shape and dtype that run as one pass.
#[derive(Clone)]
pub(crate) struct Region {
    /// The member nodes, in evaluation order.
    pub nodes: Vec<usize>,
    /// The nodes outside the region whose values the members read.
    pub inputs: Vec<usize>,
    /// The members whose values are read after the region (or fetched).
    pub outputs: Vec<usize>,
    ops: Vec<(Op, Vec<Slot>)>,
    shape: Vec<usize>,
    dtype: DType,
    /// Whether every member runs from slices (`lane_step`), in a float dtype.
    in_lanes: bool,
}

impl Region {
    /// The values of [`Region::outputs`], from the values of [`Region::inputs`] (in order).
    pub fn run(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        let _profiled =
            crate::tensor::profile::scope_with(|| format!("fused({} ops)", self.ops.len()));
        if self.in_lanes {
            return match self.dtype {
                DType::F32 => self.run_lanes::<f32>(inputs),
                _ => self.run_lanes::<f64>(inputs),
            };
        }
        let n: usize = self.shape.iter().product();
        // Whole inputs as flat, row-major vectors; one-element inputs as one element that
        // broadcasts against any block.
        let flat: Vec<Tensor> = inputs
            .iter()
            .map(|t| match t.numel() == n {
                true => t.contiguous().reshape(&[n]),
                false => t.reshape(&[1]),
            })
            .collect();
        with_any_dtype!(self.dtype, T => self.run_typed::<T>(&flat, n))
    }

    fn run_typed<T: Element>(&self, flat: &[Tensor], n: usize) -> Vec<Tensor> {
        let mut outs: Vec<Vec<T>> = self.outputs.iter().map(|_| vec![T::ZERO; n]).collect();
        let blocks = blocks_of(&mut outs, n);
        run_tasks(blocks, |(b, slices)| {
            let start = b * BLOCK;
            let len = slices[0].len();
            for (slice, value) in slices.into_iter().zip(self.block(flat, n, start, len)) {
                slice.copy_from_slice(&value.contiguous_data::<T>());
            }
        });
        outs.into_iter()
            .map(|o| Tensor::from_data(o, &self.shape))
            .collect()
    }

    /// The outputs' elements `start..start + len`.
    fn block(&self, flat: &[Tensor], n: usize, start: usize, len: usize) -> Vec<Tensor> {
        let outer: Vec<Tensor> = flat
            .iter()
            .map(|t| match t.numel() == n && n > 1 {
                true => t.narrow(0, start, len),
                false => t.clone(),
            })
            .collect();
        let mut members: Vec<Tensor> = Vec::with_capacity(self.ops.len());
        for (op, slots) in &self.ops {
            let args: Vec<Tensor> = slots
                .iter()
                .map(|s| match *s {
                    Slot::Outer(k) => outer[k].clone(),
                    Slot::Member(k) => members[k].clone(),
                })
                .collect();
            members.push(op.eval(&args).remove(0));
        }
        self.outputs
            .iter()
            .map(|o| members[self.position(*o)].clone())
            .collect()
    }

    /// One loop over blocks of elements, every member computed from slices by its table's
    /// element function: no tensor and no allocation per member and block.
    fn run_lanes<T: Lanes>(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        let n: usize = self.shape.iter().product();
        let data: Vec<std::borrow::Cow<'_, [T]>> =
            inputs.iter().map(|t| t.contiguous_data::<T>()).collect();
        // A one-element input, as long as a block.
        let splats: Vec<Option<Vec<T>>> = data
            .iter()
            .map(|d| (d.len() != n).then(|| vec![d[0]; BLOCK]))
            .collect();
        let mut outs: Vec<Vec<T>> = self.outputs.iter().map(|_| vec![T::ZERO; n]).collect();
        let blocks = blocks_of(&mut outs, n);
        let outer = |k: usize, start: usize, len: usize| -> &[T] {
            match &splats[k] {
                Some(splat) => &splat[..len],
                None => &data[k][start..start + len],
            }
        };
        // Runs of blocks per task, as the kernels' loops make them, each run with its own
        // members' blocks.
        let per = chunks_per_part(blocks.len());
        let mut runs: Vec<Vec<Block<'_, T>>> = Vec::new();
        for block in blocks {
            match runs.last_mut() {
                Some(run) if run.len() < per => run.push(block),
                _ => runs.push(vec![block]),
            }
        }
        run_tasks(runs, |run| {
            let mut members: Vec<Vec<T>> = vec![vec![T::ZERO; BLOCK]; self.ops.len()];
            for (b, slices) in run {
                let (start, len) = (b * BLOCK, slices[0].len());
                let outer = |k: usize| outer(k, start, len);
                run_block(&self.ops, &outer, &mut members, len);
                for (slice, o) in slices.into_iter().zip(&self.outputs) {
                    slice.copy_from_slice(&members[self.position(*o)][..len]);
                }
            }
        });
        outs.into_iter()
            .map(|o| Tensor::from_data(o, &self.shape))
            .collect()
    }

    fn position(&self, node: usize) -> usize {
        self.nodes
            .iter()
            .position(|&m| m == node)
            .expect("an output is a member")
    }
}

/// The element types fused loops run on, with the element-wise tables' slice forms.
trait Lanes: Element + PartialOrd + std::ops::Mul<Output = Self> {
    fn unary(u: Unary, xs: &mut [Self]) -> bool;
    fn binary(b: Binary, x: &[Self], y: &[Self], out: &mut [Self]);
    fn from_f64(v: f64) -> Self;
}

/// `Lanes` for a float type, by its tables' slice forms.
macro_rules! lanes {
    ($T:ty, $unary:ident, $binary:ident) => {
        impl Lanes for $T {
            fn unary(u: Unary, xs: &mut [$T]) -> bool {
                u.$unary(xs)
            }
            fn binary(b: Binary, x: &[$T], y: &[$T], out: &mut [$T]) {
                b.$binary(x, y, out);
            }
            fn from_f64(v: f64) -> $T {
                v as $T
            }
        }
    };
}

lanes!(f32, in_place_f32, zip_f32);
lanes!(f64, in_place_f64, zip_f64);

/// Whether a fused loop computes `op` from slices (see [`lane_step`]).
fn in_lanes(op: &Op) -> bool {
    match op {
        Op::Unary(u) => u.in_place_f64(&mut []),
        Op::Binary(_)
        | Op::CompareScalar { .. }
        | Op::WhereCond {}
        | Op::StopGradient {}
        | Op::SlopeScaled { .. } => true,
        _ => false,
    }
}

/// Every member over one block of `len` elements, in order, into `members`; `outer(k)` is
/// input `k`'s block.
fn run_block<'a, T: Lanes>(
    ops: &[(Op, Vec<Slot>)],
    outer: &dyn Fn(usize) -> &'a [T],
    members: &mut [Vec<T>],
    len: usize,
) {
    for (m, (op, slots)) in ops.iter().enumerate() {
        let (done, rest) = members.split_at_mut(m);
        let arg = |i: usize| match slots[i] {
            Slot::Outer(k) => outer(k),
            Slot::Member(k) => &done[k][..len],
        };
        lane_step(op, &arg, &mut rest[0][..len]);
    }
}

/// One member over one block: `out` from its operands' slices (`arg(i)` for operand `i`),
/// each element as the op's eager kernel computes it.
fn lane_step<'a, T: Lanes>(op: &Op, arg: &dyn Fn(usize) -> &'a [T], out: &mut [T]) {
    match op {
        Op::Unary(u) => {
            out.copy_from_slice(arg(0));
            T::unary(*u, out);
        }
        Op::Binary(b) => T::binary(*b, arg(0), arg(1), out),
        Op::CompareScalar { comparison, value } => {
            let v = vec![T::from_f64(*value); out.len()];
            T::binary(*comparison, arg(0), &v, out);
        }
        Op::WhereCond {} => {
            let (c, a, b) = (arg(0), arg(1), arg(2));
            for (i, o) in out.iter_mut().enumerate() {
                *o = if c[i] != T::ZERO { a[i] } else { b[i] };
            }
        }
        Op::StopGradient {} => out.copy_from_slice(arg(0)),
        Op::SlopeScaled { slope } => {
            let (up, x, s) = (arg(0), arg(1), T::from_f64(*slope));
            for (i, o) in out.iter_mut().enumerate() {
                *o = match (x[i] > T::ZERO, *slope == 0.0) {
                    (true, _) => up[i],
                    (false, true) => T::ZERO,
                    (false, false) => up[i] * s,
                };
            }
        }
        _ => unreachable!("in_lanes admits only these"),
    }
}

/// The shape and dtype a node may be fused at: element-wise, of a concrete shape of at least
/// [`FUSED_AT_LEAST`] elements, a dtype every member shares, and inputs either of that shape
/// or one element.
fn fusible(nodes: &[NodeData], repr: &[usize], i: usize) -> Option<(Vec<usize>, DType)> {
    let n = &nodes[i];
    if n.op.fusion() != Fusion::Elementwise || n.op.outputs() != 1 {
        return None;
    }
    let shape: Vec<usize> = n.shape.as_ref()?.iter().copied().collect::<Option<_>>()?;
    let numel: usize = shape.iter().product();
    let fits = |j: &usize| {
        let s = nodes[repr[*j]].shape.as_ref();
        let s: Option<Vec<usize>> = s.and_then(|s| s.iter().copied().collect());
        s.is_some_and(|s| s == shape || s.iter().product::<usize>() == 1)
    };
    (numel >= FUSED_AT_LEAST && n.inputs.iter().all(fits)).then_some((shape, n.dtype?))
}

/// The regions of the nodes in `order` (each evaluated once; `repr` maps a node to the one
/// that stands for it): a node joins the region of an operand of its shape and dtype unless
/// another operand is computed from that region (the region would then wait on itself).
/// Regions of one node fuse nothing and are dropped. `fetched` nodes are outputs.
pub(crate) fn regions(
    nodes: &[NodeData],
    repr: &[usize],
    order: &[usize],
    fetched: &HashSet<usize>,
) -> Vec<Region> {
    let mut region_of: HashMap<usize, usize> = HashMap::new();
    // The regions each node's value depends on, its own included.
    let mut deps: HashMap<usize, BTreeSet<usize>> = HashMap::new();
    let mut members: Vec<(Vec<usize>, Vec<usize>, DType)> = Vec::new();
    for &i in order {
        let inputs: Vec<usize> = nodes[i].inputs.iter().map(|&j| repr[j]).collect();
        let mut mine: BTreeSet<usize> = inputs
            .iter()
            .flat_map(|j| deps.get(j).into_iter().flatten().copied())
            .collect();
        if let Some((shape, dtype)) = fusible(nodes, repr, i) {
            let joinable = |r: usize| {
                members[r].1 == shape
                    && members[r].2 == dtype
                    && inputs.iter().all(|j| {
                        region_of.get(j) == Some(&r) || !deps.get(j).is_some_and(|d| d.contains(&r))
                    })
            };
            let r = match inputs
                .iter()
                .filter_map(|j| region_of.get(j))
                .find(|&&r| joinable(r))
            {
                Some(&r) => r,
                None => {
                    members.push((Vec::new(), shape, dtype));
                    members.len() - 1
                }
            };
            members[r].0.push(i);
            region_of.insert(i, r);
            mine.insert(r);
        }
        deps.insert(i, mine);
    }
    let readers = readers(nodes, repr, order);
    members
        .into_iter()
        .filter(|(m, _, _)| m.len() > 1)
        .map(|(m, shape, dtype)| build(nodes, repr, m, shape, dtype, &readers, fetched))
        .collect()
}

/// The nodes that read each node, among `order`.
fn readers(nodes: &[NodeData], repr: &[usize], order: &[usize]) -> HashMap<usize, Vec<usize>> {
    let mut out: HashMap<usize, Vec<usize>> = HashMap::new();
    for &i in order {
        for &j in &nodes[i].inputs {
            out.entry(repr[j]).or_default().push(i);
        }
    }
    out
}

fn build(
    nodes: &[NodeData],
    repr: &[usize],
    members: Vec<usize>,
    shape: Vec<usize>,
    dtype: DType,
    readers: &HashMap<usize, Vec<usize>>,
    fetched: &HashSet<usize>,
) -> Region {
    let inside: HashSet<usize> = members.iter().copied().collect();
    let mut inputs: Vec<usize> = Vec::new();
    let ops: Vec<(Op, Vec<Slot>)> = members
        .iter()
        .map(|&m| {
            let slots = nodes[m]
                .inputs
                .iter()
                .map(|&j| {
                    let j = repr[j];
                    match members.iter().position(|&k| k == j) {
                        Some(k) => Slot::Member(k),
                        None => {
                            Slot::Outer(inputs.iter().position(|&k| k == j).unwrap_or_else(|| {
                                inputs.push(j);
                                inputs.len() - 1
                            }))
                        }
                    }
                })
                .collect();
            (nodes[m].op.clone(), slots)
        })
        .collect();
    let outputs = members
        .iter()
        .copied()
        .filter(|m| {
            fetched.contains(m)
                || readers
                    .get(m)
                    .is_some_and(|r| r.iter().any(|x| !inside.contains(x)))
        })
        .collect();
    let in_lanes = dtype.is_float()
        && ops.iter().all(|(op, _)| in_lanes(op))
        && inputs.iter().all(|&j| nodes[j].dtype == Some(dtype));
    Region {
        nodes: members,
        inputs,
        outputs,
        ops,
        shape,
        dtype,
        in_lanes,
    }
}
