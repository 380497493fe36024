//! The [`Tensor`] handle: shape, strides and offset over shared storage, in f32 or f64 (or
//! i64, for indices and labels).
//!
//! A tensor is an immutable value and cheap to clone. A tracked tensor carries its graph node
//! (`record`): the tensor, its node and the recording scopes are one layer, below the ops.

pub(crate) mod anomaly;
pub(crate) mod create;
mod display;
pub(crate) mod draws;
mod element;
mod layout;
mod mode;
pub mod profile;
pub(crate) mod record;
pub(crate) mod trace;

use std::borrow::Cow;
use std::sync::Arc;

pub use create::{manual_seed, with_default_rng};
pub(crate) use element::{dispatch, with_any_dtype, with_dtype, INTEGER_IN_FLOAT_OP};
pub use element::{DType, Element, FloatElement, Storage};
pub use layout::{broadcast_shapes, checked_numel, contiguous_strides, Layout};
pub(crate) use layout::{filled, numel_or_panic, reserved};

use crate::kernels::strided::{self, Src};
pub use crate::kernels::Dims;
pub(crate) use mode::ModeGuard;
pub use mode::{enable_grad, is_grad_enabled, no_grad, set_grad_enabled};
pub use record::live_nodes;
pub(crate) use record::{
    record, record_nondiff, record_part, BackwardCtx, InputGrads, Node, NodeKind, Part,
};

/// An n-dimensional array of f32 or f64 (or i64 indices), possibly a view of another tensor's
/// storage. Ops take `&self` and return new tensors; operators work on references, with numpy
/// broadcasting and `f64` numbers on either side.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
/// assert_eq!(a.shape(), &[2, 2]);
/// assert_eq!(a.dtype(), DType::F32);
/// let b = &a * 2.0 + &Tensor::ones(&[2], DType::F32); // [2, 2] + [2] broadcasts
/// assert_eq!(b.to_vec::<f32>(), vec![3.0, 5.0, 7.0, 9.0]);
/// assert_eq!(a.matmul(&a).to_vec::<f32>(), vec![7.0, 10.0, 15.0, 22.0]);
/// assert_eq!(a.sum_axes(&[1], false).to_vec::<f32>(), vec![3.0, 7.0]);
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorInner>);

pub(crate) struct TensorInner {
    pub(crate) storage: Storage,
    pub(crate) layout: Layout,
    /// Set when the tensor takes part in a recorded graph (a tracked leaf or an op's output).
    pub(crate) node: Option<Node>,
}

impl Tensor {
    pub(crate) fn from_parts(storage: Storage, layout: Layout, node: Option<Node>) -> Tensor {
        assert!(
            layout.fits(storage.len()),
            "tensor: layout {:?} / {:?} + {} does not fit a buffer of {} elements",
            layout.shape,
            layout.strides,
            layout.offset,
            storage.len()
        );
        Tensor(Arc::new(TensorInner {
            storage,
            layout,
            node,
        }))
    }

    /// A contiguous, untracked tensor owning `data`.
    pub(crate) fn from_data<T: Element>(data: Vec<T>, shape: &[usize]) -> Tensor {
        assert_eq!(
            Some(data.len()),
            layout::checked_numel(shape),
            "tensor: {} elements for shape {shape:?}",
            data.len()
        );
        profile::note_bytes(std::mem::size_of_val(data.as_slice()));
        Tensor::from_parts(T::into_storage(data), Layout::contiguous(shape), None)
    }

    /// The same elements seen through `layout`, untracked.
    pub(crate) fn view_untracked(&self, layout: Layout) -> Tensor {
        Tensor::from_parts(self.0.storage.clone(), layout, None)
    }

    /// The size of each axis (empty for a 0-d tensor).
    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// Elements to skip in the storage per step along each axis (0 along a broadcast axis).
    pub fn strides(&self) -> &[usize] {
        &self.0.layout.strides
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.0.layout.shape.len()
    }

    /// Number of elements (1 for a 0-d tensor).
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.storage.dtype()
    }

    /// Whether the elements sit in row-major order in one block of the storage.
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.0.storage
    }

    /// True when both tensors view the same storage buffer.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        match (&self.0.storage, &other.0.storage) {
            (Storage::F32(a), Storage::F32(b)) => Arc::ptr_eq(a, b),
            (Storage::F64(a), Storage::F64(b)) => Arc::ptr_eq(a, b),
            (Storage::I64(a), Storage::I64(b)) => Arc::ptr_eq(a, b),
            // Inline single elements are copied, never shared.
            _ => false,
        }
    }

    /// The whole storage buffer (callers pair it with `layout()`).
    pub(crate) fn buffer<T: Element>(&self) -> &[T] {
        T::buffer(&self.0.storage)
    }

    /// This tensor as a kernel operand broadcast to `shape`; `strides` holds the broadcast
    /// strides and must outlive the operand.
    pub(crate) fn src<'a, T: Element>(&'a self, strides: &'a [usize]) -> Src<'a, T> {
        Src {
            data: self.buffer::<T>(),
            strides,
            offset: self.0.layout.offset,
        }
    }

    /// Elements in row-major order: borrowed when the layout is contiguous, gathered otherwise.
    pub(crate) fn contiguous_data<T: Element>(&self) -> Cow<'_, [T]> {
        let l = &self.0.layout;
        let buf = self.buffer::<T>();
        if l.numel() == 0 {
            // Checked first: an empty narrow may start past the end of its storage.
            Cow::Owned(Vec::new())
        } else if l.is_contiguous() {
            Cow::Borrowed(&buf[l.offset..l.offset + l.numel()])
        } else {
            let mut out = layout::reserved("gather", l.numel());
            strided::gather(
                &l.shape,
                Src {
                    data: buf,
                    strides: &l.strides,
                    offset: l.offset,
                },
                &mut out,
            );
            Cow::Owned(out)
        }
    }

    /// The elements as a mutable row-major slice, for updates in place (optimizer state). The
    /// tensor first becomes the sole owner of a contiguous buffer of its own if it is not
    /// already (a view, or storage shared with another tensor, is copied); any graph node is
    /// dropped. `T` must be the tensor's dtype.
    pub(crate) fn data_mut<T: Element>(&mut self) -> &mut [T] {
        assert_eq!(
            self.dtype(),
            T::DTYPE,
            "data_mut: element type differs from the dtype"
        );
        let sole = self.is_contiguous()
            && self.0.layout.offset == 0
            && self.0.storage.len() == self.numel()
            && self.0.node.is_none();
        if !sole || Arc::get_mut(&mut self.0).is_none() {
            *self = Tensor::from_data(self.contiguous_data::<T>().into_owned(), self.shape());
        }
        let inner = Arc::get_mut(&mut self.0).expect("a fresh tensor has one owner");
        T::buffer_mut(&mut inner.storage)
    }

    /// A row-major copy of the elements converted to `T`, whatever the dtype (exactly when
    /// it is the dtype; otherwise as [`Element::cast_from_f64`] describes).
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        trace::note_read_of(self);
        if self.dtype() == T::DTYPE {
            return self.contiguous_data::<T>().into_owned();
        }
        with_any_dtype!(self.dtype(), S => {
            let data = self.contiguous_data::<S>();
            data.iter().map(|&v| T::cast_from_f64(v.cast_to_f64())).collect()
        })
    }

    /// The value of a one-element tensor, as f64.
    pub fn item(&self) -> f64 {
        assert!(
            self.numel() == 1,
            "item: tensor of shape {:?} has {} elements, expected 1",
            self.shape(),
            self.numel()
        );
        self.to_vec::<f64>()[0]
    }
}
