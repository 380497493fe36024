//! Shape, strides and offset: how a tensor's elements sit in its storage. Views (transpose,
//! permute, narrow, broadcast_to, reshape of a contiguous tensor) are new layouts over the same
//! storage.

use crate::kernels::Dims;
pub use crate::kernels::{checked_numel, contiguous_strides};

/// Bytes from which a buffer counts as large for the allocator (glibc's first mmap threshold).
const LARGE: usize = 128 << 10;

/// `n` copies of `value`, or a panic naming `op` when the allocator refuses the memory (a
/// shape from hostile input asking for terabytes): the default allocation would abort the
/// process instead of unwinding to a caller that can report it.
pub(crate) fn filled<T: Copy + Send + Sync>(op: &str, n: usize, value: T) -> Vec<T> {
    let mut data = reserved(op, n);
    crate::kernels::strided::fill_into(&mut data, n, value);
    data
}

/// An empty vector with room for `n` elements, or a panic naming `op` as in [`filled`]: for
/// kernels that write every element once (no fill first).
pub(crate) fn reserved<T>(op: &str, n: usize) -> Vec<T> {
    if n.saturating_mul(std::mem::size_of::<T>()) >= LARGE {
        crate::kernels::alloc::keep_large_buffers();
    }
    let mut data = Vec::new();
    if data.try_reserve_exact(n).is_err() {
        panic!(
            "{op}: cannot allocate {n} elements ({} bytes)",
            n.saturating_mul(std::mem::size_of::<T>())
        );
    }
    data
}

/// [`checked_numel`] that panics naming `op` and the shape when the count overflows.
pub(crate) fn numel_or_panic(op: &str, shape: &[usize]) -> usize {
    checked_numel(shape)
        .unwrap_or_else(|| panic!("{op}: shape {shape:?} has more elements than fit in memory"))
}

/// Where a tensor's elements sit in its storage: element `[i, j, ...]` is at
/// `offset + i·strides[0] + j·strides[1] + ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of each axis.
    pub shape: Dims,
    /// Elements to skip per step along each axis; 0 along a broadcast axis.
    pub strides: Dims,
    /// Position of the first element in the storage.
    pub offset: usize,
}

impl Layout {
    /// The row-major layout of `shape` from offset 0.
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            shape: Dims::from_slice(shape),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// Number of elements addressed (the product of the shape; 1 for a 0-d layout).
    pub fn numel(&self) -> usize {
        // A zero axis after huge ones: a plain product would overflow before reaching it.
        checked_numel(&self.shape).expect("a layout's element count is checked when it is made")
    }

    /// Whether every element this layout addresses lies inside a buffer of `len` elements, with
    /// the element count and every offset free of overflow. A tensor is only ever built on a
    /// layout that passes this, which is what lets kernels index without further checks.
    pub fn fits(&self, len: usize) -> bool {
        let Some(numel) = checked_numel(&self.shape) else {
            return false;
        };
        if numel == 0 {
            return true;
        }
        let last = self
            .shape
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |at, (&d, &s)| {
                at.checked_add((d - 1).checked_mul(s)?)
            });
        last.is_some_and(|last| last < len)
    }

    /// True when the elements are the row-major block `offset..offset + numel`.
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            // Saturating as `contiguous_strides` is: only an empty tensor's shape overflows.
            expected = expected.saturating_mul(d);
        }
        true
    }

    /// The layout seen with axes reordered by `perm`.
    pub fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Strides of this layout viewed as `out_shape` under numpy broadcasting (0 on new or
    /// stretched axes). The caller has checked that the shapes broadcast.
    pub fn broadcast_strides(&self, out_shape: &[usize]) -> Dims {
        let lead = out_shape.len() - self.shape.len();
        let mut strides = Dims::from_elem(0, out_shape.len());
        for i in 0..self.shape.len() {
            strides[lead + i] = if self.shape[i] == 1 && out_shape[lead + i] != 1 {
                0
            } else {
                self.strides[i]
            };
        }
        strides
    }
}

/// The numpy broadcast of two shapes, or `None` when they do not broadcast.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Dims> {
    let n = a.len().max(b.len());
    let mut out = Dims::from_elem(0, n);
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}
