//! Shape, strides and offset: how a tensor's elements sit in its storage. Views (transpose,
//! permute, narrow, broadcast_to, and reshape wherever strides can express it) are new layouts
//! over the same storage.

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
    crate::kernels::alloc::advise_huge_pages(&mut data);
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

    /// This layout's elements, in row-major order, seen as `shape` where they lie: the layout
    /// of a view, or `None` when no strides address them so (two transposed axes merged into
    /// one, say) and they must be copied first (or the element counts differ). The axes that
    /// step evenly through memory together (each one's stride its inner neighbour's times that
    /// neighbour's size) form a chunk, and any axes whose sizes multiply to a chunk's count can
    /// replace it; axes of one element belong anywhere.
    pub fn reshaped(&self, shape: &[usize]) -> Option<Layout> {
        let view = |strides| Layout {
            shape: Dims::from_slice(shape),
            strides,
            offset: self.offset,
        };
        if checked_numel(shape) != Some(self.numel()) {
            return None; // not the same elements: no view, and no copy either
        }
        match self.numel() {
            // No element: nothing to address, and no offset to keep (it may lie past the end
            // of the storage, where an empty narrow starts).
            0 => return Some(Layout::contiguous(shape)),
            1 => return Some(view(contiguous_strides(shape))),
            _ => {}
        }
        // (elements, stride of the innermost axis) of each chunk, innermost chunk first.
        let mut chunks: Vec<(usize, usize)> = Vec::new();
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            match chunks.last_mut() {
                _ if d == 1 => {}
                Some((n, inner)) if n.checked_mul(*inner) == Some(s) => *n *= d,
                _ => chunks.push((d, s)),
            }
        }
        let mut strides = Dims::from_elem(1, shape.len());
        let mut axes = (0..shape.len()).rev();
        for (n, inner) in chunks {
            let mut covered = 1usize;
            while covered < n {
                let a = axes.next()?;
                strides[a] = covered.checked_mul(inner)?;
                covered = covered.checked_mul(shape[a])?;
            }
            if covered != n {
                return None;
            }
        }
        // The axes left over have one element each (the counts agree): any stride will do.
        Some(view(strides))
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

#[cfg(test)]
mod reshape_tests {
    use super::*;

    fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
        Layout {
            shape: Dims::from_slice(shape),
            strides: Dims::from_slice(strides),
            offset,
        }
    }

    /// Every element's storage position, in row-major order of the layout's shape.
    fn positions(l: &Layout) -> Vec<usize> {
        let mut out = vec![l.offset];
        for (&d, &s) in l.shape.iter().zip(&l.strides) {
            out = out
                .iter()
                .flat_map(|&p| (0..d).map(move |i| p + i * s))
                .collect();
        }
        out
    }

    #[test]
    fn views_address_the_same_elements_in_the_same_order() {
        // (layout, new shape, whether a view exists)
        let cases = [
            // The third of a [2, 3, 12] projection's columns, its last axis split in heads.
            (layout(&[2, 3, 4], &[36, 12, 1], 8), vec![2, 3, 2, 2], true),
            (layout(&[2, 3, 4], &[36, 12, 1], 8), vec![6, 4], true),
            // Rows of a narrowed matrix cannot merge with its columns.
            (layout(&[2, 3, 4], &[36, 12, 1], 8), vec![2, 12], false),
            // A transposed pair merged: no strides do; split again, they do.
            (layout(&[3, 2], &[1, 3], 0), vec![6], false),
            (layout(&[4, 6], &[1, 4], 0), vec![2, 2, 6], true),
            (layout(&[4, 6], &[1, 4], 0), vec![4, 2, 3], true),
            (layout(&[4, 6], &[1, 4], 0), vec![8, 3], false),
            // Broadcast axes, and axes of one element anywhere.
            (layout(&[3, 4], &[0, 1], 0), vec![3, 2, 2], true),
            (layout(&[3, 4], &[0, 1], 0), vec![12], false),
            (
                layout(&[1, 5, 1, 2], &[99, 4, 7, 1], 3),
                vec![5, 1, 2, 1],
                true,
            ),
            (layout(&[1, 5, 1, 2], &[99, 4, 7, 1], 3), vec![10], false),
            (
                layout(&[1, 5, 1, 2], &[99, 2, 7, 1], 3),
                vec![1, 10, 1],
                true,
            ),
            // One element or none: always a view.
            (layout(&[1, 1], &[5, 9], 4), vec![1], true),
            (layout(&[0, 3], &[1, 7], 0), vec![3, 0, 2], true),
            // Other element counts: nothing to view.
            (layout(&[4], &[1], 0), vec![5, 4], false),
            (layout(&[0, 3], &[1, 7], 0), vec![2], false),
        ];
        for (old, shape, viewable) in cases {
            let got = old.reshaped(&shape);
            assert_eq!(got.is_some(), viewable, "{old:?} as {shape:?}");
            if let Some(new) = got {
                assert_eq!(new.shape.as_slice(), shape.as_slice());
                assert_eq!(positions(&new), positions(&old), "{old:?} as {shape:?}");
            }
        }
    }
}
