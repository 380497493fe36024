//! CPU compute on slices: no tensors, no autodiff. Every speed trick of the crate lives here.
//!
//! Element-wise maps run on several threads above [`MAP_THRESHOLD`] elements, reductions and
//! the other kernels above [`PAR_THRESHOLD`]; below them handing out the parts costs more than
//! it saves.

pub mod activation;
pub(crate) mod alloc;
pub(crate) mod attention;
pub mod cells;
pub(crate) mod channels_last;
pub(crate) mod conv;
mod float;
mod gemv;
pub(crate) mod implicit_conv;
pub(crate) mod index;
pub mod isa;
mod lined;
pub mod matmul;
pub mod norm;
pub mod optim;
pub(crate) mod parallel;
pub mod reduce;
pub mod sequence;
mod sgemm;
pub mod strided;

pub use float::Float;
pub use isa::Isa;
/// Shapes and strides: inline up to four axes, so that the layouts of small tensors cost no
/// allocation.
pub type Dims = smallvec::SmallVec<[usize; 4]>;

/// A row-major buffer seen as `[outer, mid, inner]` around one axis (or one run of axes):
/// the form every reduction, softmax and selection along an axis takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub outer: usize,
    pub mid: usize,
    pub inner: usize,
}

impl Rows {
    /// `shape` around `axis`.
    pub fn around(shape: &[usize], axis: usize) -> Rows {
        Rows {
            outer: part_numel(&shape[..axis]),
            mid: shape[axis],
            inner: part_numel(&shape[axis + 1..]),
        }
    }
}

/// The number of elements of axes of sizes `dims`, or `None` when it does not fit in a
/// `usize`. A 0 anywhere gives 0, whatever overflows before it: `[2^40, 2^40, 0]` is empty.
pub fn checked_numel_of(dims: impl IntoIterator<Item = usize>) -> Option<usize> {
    let mut n = Some(1usize);
    for d in dims {
        if d == 0 {
            return Some(0);
        }
        n = n.and_then(|n| n.checked_mul(d));
    }
    n
}

/// The number of elements of `shape`, or `None` when it does not fit in a `usize` (a 0
/// anywhere gives 0, whatever overflows before it).
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    checked_numel_of(shape.iter().copied())
}

/// The element count of `dims`, a part of a tensor's shape. Where a product of the part
/// overflows, another part holds a 0 (the shape's own count fits), so nothing is there to
/// visit: 0.
pub fn part_numel(dims: &[usize]) -> usize {
    checked_numel(dims).unwrap_or(0)
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut strides = Dims::from_elem(0, shape.len());
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        // Saturating: only an empty tensor's shape can overflow here, and its strides are
        // never used to address anything.
        acc = acc.saturating_mul(shape[i]);
    }
    strides
}

/// Element count above which reductions, optimizer updates and vector products split work
/// across threads (element-wise maps: [`MAP_THRESHOLD`]).
pub const PAR_THRESHOLD: usize = 1 << 17;

/// Element count above which the element-wise kernels that write each element from its own
/// inputs (maps, zips, fills; not reductions, whose sums depend on how they are split) split
/// work across threads. Lower than [`PAR_THRESHOLD`]: the kernels' helper threads stay warm
/// between calls (`parallel`), so a split costs little more than the two halves.
pub(crate) const MAP_THRESHOLD: usize = 1 << 15;

/// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
pub(crate) const PAR_CHUNK: usize = 1 << 14;
