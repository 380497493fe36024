//! A row-major matrix whose rows start on cache lines, for the matrix products to read in
//! place.

use super::matmul::MatRef;
use super::Float;

/// A row-major matrix whose rows start on cache lines (the row stride rounded up to a line):
/// the layout a matrix product reads in place, without packing it. Rows are pushed in order
/// into room reserved up front, so the buffer never moves.
pub(crate) struct Lined<T> {
    buf: Vec<T>,
    /// Where row 0 starts in `buf`.
    at: usize,
    cols: usize,
    stride: usize,
}

impl<T: Float> Lined<T> {
    /// Room for `rows` rows of `cols`, none pushed yet.
    pub(crate) fn with_rows(rows: usize, cols: usize) -> Self {
        let line = 64 / std::mem::size_of::<T>();
        let stride = cols.div_ceil(line) * line;
        let mut buf = Vec::with_capacity(rows * stride + line);
        let misalign = (buf.as_ptr() as usize % 64) / std::mem::size_of::<T>();
        let at = (line - misalign) % line;
        buf.resize(at, T::zero());
        Lined {
            buf,
            at,
            cols,
            stride,
        }
    }

    /// `rows × cols` zeros.
    pub(crate) fn zeros(rows: usize, cols: usize) -> Self {
        let mut m = Self::with_rows(rows, cols);
        m.buf.resize(m.at + rows * m.stride, T::zero());
        m
    }

    /// Appends a row made of `pieces` side by side (`cols` in all).
    pub(crate) fn push(&mut self, pieces: &[&[T]]) {
        debug_assert!(pieces.iter().map(|p| p.len()).sum::<usize>() == self.cols);
        debug_assert!(
            self.buf.len() + self.stride <= self.buf.capacity(),
            "room reserved"
        );
        let end = self.buf.len() + self.stride;
        pieces.iter().for_each(|p| self.buf.extend_from_slice(p));
        self.buf.resize(end, T::zero());
    }

    /// Row `r`, `cols` long.
    pub(crate) fn row_mut(&mut self, r: usize) -> &mut [T] {
        &mut self.buf[self.at + r * self.stride..][..self.cols]
    }

    /// Rows `first..first + rows` as a matrix.
    pub(crate) fn rows(&self, first: usize, rows: usize) -> MatRef<'_, T> {
        MatRef {
            data: &self.buf,
            offset: self.at + first * self.stride,
            rows,
            cols: self.cols,
            rs: self.stride,
            cs: 1,
        }
    }

    /// The rows from row 0 on, and the stride between them (for products that take a slice).
    pub(crate) fn data(&self) -> (&[T], usize) {
        (&self.buf[self.at..], self.stride)
    }

    /// As [`Lined::data`], to write.
    pub(crate) fn data_mut(&mut self) -> (&mut [T], usize) {
        (&mut self.buf[self.at..], self.stride)
    }
}
