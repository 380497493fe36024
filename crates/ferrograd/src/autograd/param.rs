//! Trainable parameters: leaves with a stable identity whose value optimizers replace.

use std::cell::RefCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::tensor::{with_any_dtype, DType, Element, Node, Tensor};

/// `value` as a parameter's tensor: its own contiguous buffer from offset 0 (so that updates
/// in place are possible), tracked as the leaf `id` when it is a float tensor.
fn owned(value: &Tensor, id: u64) -> Tensor {
    let fresh = with_any_dtype!(value.dtype(), T => value.materialize::<T>());
    Tensor::from_parts(
        fresh.storage().clone(),
        fresh.layout().clone(),
        leaf(value.dtype(), id),
    )
}

/// The leaf node of parameter `id`; none for an integer buffer (a count, say), which no
/// gradient reaches.
fn leaf(dtype: DType, id: u64) -> Option<Node> {
    dtype.is_float().then(|| Node::leaf_with_id(id))
}

/// A tracked leaf whose value can be replaced while its identity (what `Gradients` is keyed
/// by) stays. Clones share the same parameter.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let loss = (&w.tensor() * 3.0).sum();
/// let grads = loss.backward();
/// assert_eq!(grads.get_param(&w).unwrap().to_vec::<f32>(), vec![3.0, 3.0]);
/// w.set(&Tensor::from_vec(vec![0.5f32, 0.5], &[2]));
/// assert_eq!(w.tensor().to_vec::<f32>(), vec![0.5, 0.5]);
/// ```
#[derive(Clone)]
pub struct Param {
    id: u64,
    value: Arc<RwLock<Tensor>>,
    /// Frozen parameters hand out untracked values: no gradient reaches them, so no optimizer
    /// moves them (PyTorch's `requires_grad_(False)`).
    frozen: Arc<AtomicBool>,
}

impl std::fmt::Debug for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Param")
            .field("shape", &self.shape())
            .field("dtype", &self.dtype())
            .field("frozen", &self.is_frozen())
            .finish()
    }
}

impl Param {
    /// A new parameter holding a copy of `value`, with a fresh identity. A float value is
    /// tracked; an integer one (a count kept as a buffer) is not.
    pub fn new(value: Tensor) -> Param {
        let id = Node::fresh_id();
        let value = owned(&value, id);
        Param {
            id,
            value: Arc::new(RwLock::new(value)),
            frozen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The identity this parameter's leaf carries across updates: the key of its gradient,
    /// equal to [`Tensor::id`] of every value [`Param::tensor`] returns.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The current value, tracked as this parameter's leaf (untracked while frozen); inside
    /// [`with_substitutes`], the value put in its place on this thread.
    pub fn tensor(&self) -> Tensor {
        if let Some(value) = substitute(self.id) {
            return value;
        }
        let value = self.value.read().unwrap_or_else(|e| e.into_inner()).clone();
        if self.is_frozen() {
            value.detach()
        } else {
            value
        }
    }

    /// Stops (or resumes) gradients to this parameter, and with them its updates.
    pub fn set_frozen(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::Relaxed);
    }

    /// Whether [`Param::set_frozen`] has stopped gradients to this parameter.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// Whether both handles are the same parameter.
    pub fn same(&self, other: &Param) -> bool {
        self.id == other.id
    }

    /// Replaces the value (same shape and dtype), keeping the identity.
    pub fn set(&self, value: &Tensor) {
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        assert!(
            value.shape() == slot.shape() && value.dtype() == slot.dtype(),
            "Param::set: new value {:?} ({}) differs from the parameter's {:?} ({})",
            value.shape(),
            value.dtype(),
            slot.shape(),
            slot.dtype()
        );
        *slot = owned(value, self.id);
    }

    /// Runs `f` on the elements in place (row-major; `T` must be the parameter's dtype). The
    /// buffer is copied first only when another tensor still shares it (a graph that is still
    /// alive, say); optimizers update without allocating otherwise. If `f` panics, the panic
    /// goes on and the parameter keeps its shape, dtype, identity and buffer: the old values
    /// when `f` panics before writing, as the optimizer kernels do (they check every length
    /// first); a closure that panics halfway leaves what it wrote.
    pub fn update<T: Element>(&self, f: impl FnOnce(&mut [T])) {
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        assert!(
            slot.dtype() == T::DTYPE,
            "Param::update: the closure takes {} elements, the parameter {:?} holds {}",
            T::DTYPE,
            slot.shape(),
            slot.dtype()
        );
        // Swap the value out and unhook its node, so that the buffer is unique unless some
        // other tensor really shares it.
        let taken = std::mem::replace(&mut *slot, Tensor::from_data(Vec::<T>::new(), &[0]));
        let mut bare = match Arc::try_unwrap(taken.0) {
            Ok(inner) => Tensor::from_parts(inner.storage, inner.layout, None),
            Err(shared) => Tensor::from_parts(shared.storage.clone(), shared.layout.clone(), None),
        };
        let result = catch_unwind(AssertUnwindSafe(|| f(bare.data_mut::<T>())));
        *slot = Tensor::from_parts(
            bare.storage().clone(),
            bare.layout().clone(),
            leaf(T::DTYPE, self.id),
        );
        if let Err(panic) = result {
            drop(slot);
            resume_unwind(panic);
        }
    }

    /// Converts the value to `dtype`, keeping the identity (for f64 gradient checks, say). An
    /// integer buffer keeps its dtype: a count stays a count in an f64 network.
    pub fn set_dtype(&self, dtype: DType) {
        if !self.dtype().is_float() {
            return;
        }
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        *slot = owned(&slot.to_dtype(dtype), self.id);
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.value.read().unwrap_or_else(|e| e.into_inner()).numel()
    }

    /// The current value's element type.
    pub fn dtype(&self) -> DType {
        self.value.read().unwrap_or_else(|e| e.into_inner()).dtype()
    }

    /// The current value's shape (a copy: the value can be replaced at any time).
    pub fn shape(&self) -> Vec<usize> {
        self.value
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .shape()
            .to_vec()
    }
}

thread_local! {
    /// Values standing in for parameters on this thread, by parameter identity, innermost last.
    static SUBSTITUTES: RefCell<Vec<(u64, Tensor)>> = const { RefCell::new(Vec::new()) };
}

/// The value standing in for parameter `id` on this thread, if any.
fn substitute(id: u64) -> Option<Tensor> {
    SUBSTITUTES.with(|s| {
        let s = s.borrow();
        s.iter()
            .rev()
            .find(|(p, _)| *p == id)
            .map(|(_, t)| t.clone())
    })
}

/// While it lives, [`Param::tensor`] on this thread gives other values for some parameters;
/// made by [`Substitutes::push`], for bindings whose scopes are not closures.
pub struct Substitutes {
    below: usize,
}

impl Substitutes {
    /// Puts each `(param, value)`'s value in the parameter's place (same shape and dtype)
    /// until the guard drops. The value is used as it is, tracked or not, so gradients reach
    /// whatever it was computed from.
    pub fn push(values: &[(&Param, Tensor)]) -> crate::Result<Substitutes> {
        for (p, v) in values {
            if v.shape() != p.shape().as_slice() || v.dtype() != p.dtype() {
                return Err(crate::Error::Shape(format!(
                    "substitute: a value {:?} ({}) for a parameter {:?} ({})",
                    v.shape(),
                    v.dtype(),
                    p.shape(),
                    p.dtype()
                )));
            }
        }
        let below = SUBSTITUTES.with(|s| {
            let mut s = s.borrow_mut();
            let below = s.len();
            s.extend(values.iter().map(|(p, v)| (p.id, v.clone())));
            below
        });
        Ok(Substitutes { below })
    }
}

impl Drop for Substitutes {
    fn drop(&mut self) {
        SUBSTITUTES.with(|s| s.borrow_mut().truncate(self.below));
    }
}

/// Runs `f` with each `(param, value)`'s value in the parameter's place on this thread
/// (`torch.func.functional_call`'s mechanism): the module computes with the given values, and
/// gradients reach what they were computed from. The parameters themselves do not change.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::autograd::with_substitutes;
///
/// let w = Param::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]));
/// let other = Tensor::from_vec(vec![5.0f32, 6.0], &[2]);
/// let sum = with_substitutes(&[(&w, other)], || w.tensor().sum()).unwrap();
/// assert_eq!(sum.item(), 11.0);
/// assert_eq!(w.tensor().to_vec::<f32>(), vec![1.0, 2.0]);
/// ```
pub fn with_substitutes<R>(values: &[(&Param, Tensor)], f: impl FnOnce() -> R) -> crate::Result<R> {
    let _guard = Substitutes::push(values)?;
    Ok(f())
}
