//! The data model of `ferrograd.Tensor`: what a Python tensor holds (a value, or a trainable
//! leaf that keeps its identity and `.grad`), the storage an in-place update writes through
//! to, and the views that read their base again. The methods of the class are built on it
//! in `tensor.rs`; conversions, indexing and autograd read it from here.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use ferrograd::prelude::*;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;

use crate::guard;

/// A trainable leaf seen from Python: the parameter (value and identity) and the gradient the
/// last backward gave it.
pub struct Leaf {
    pub param: Param,
    pub(crate) grad: Mutex<Option<Tensor>>,
    /// The Python object that first wrapped this leaf, so that the same parameter reached
    /// twice (a layer's `weight`, a custom gradient's `variables`) is the same object.
    pub(crate) owner: Mutex<Option<Py<PyWeakrefReference>>>,
}

impl Leaf {
    pub fn grad(&self) -> Option<Tensor> {
        lock(&self.grad).clone()
    }

    pub fn set_grad(&self, g: Option<Tensor>) {
        *lock(&self.grad) = g;
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a Python tensor holds.
#[derive(Clone)]
pub enum Value {
    /// A value (tracked when it was computed from trainable leaves).
    Plain(Tensor),
    /// A trainable leaf: its value can be updated in place, and backward sets its `.grad`.
    Leaf(Arc<Leaf>),
}

/// An n-dimensional array of float32, float64 or int64 with reverse-mode autodiff.
///
/// Operators follow numpy's broadcasting and take Python numbers; every method returns a new
/// tensor (tensors are values), except the in-place operators on a trainable leaf, which
/// update its value under `ferrograd.no_grad()` and keep its identity.
///
/// The object is frozen for PyO3 (no borrow flags that `x += x` or another thread could trip);
/// what an in-place operator replaces sits behind a lock held only to read or swap it.
#[pyclass(name = "Tensor", module = "ferrograd", weakref, frozen)]
pub struct PyTensor {
    pub(crate) value: RwLock<Value>,
    /// A comparison's result: stored as int64 0/1, seen from Python as dtype `bool` (numpy
    /// bool arrays, a mask when indexing, `~`, `&`, `|`), as PyTorch's bool tensors.
    pub(crate) boolean: bool,
    /// Where an in-place update of this object lands besides itself (`w.grad`, `w.data`, a
    /// layer's buffer: in PyTorch these are the storage itself).
    pub(crate) writes_to: Option<WriteBack>,
}

/// The storage behind a tensor handed out by `.grad`, `.data` or a layer's buffer, so that
/// `w.grad.zero_()`, `lin.weight.data.copy_(t)` and `bn.running_mean.zero_()` change it, as in
/// PyTorch, rather than a copy.
#[derive(Clone)]
pub enum WriteBack {
    /// A leaf's value (its `.data`), written whether or not gradients are recorded.
    Data(Arc<Leaf>),
    /// A leaf's `.grad`.
    Grad(Arc<Leaf>),
    /// A layer's buffer.
    Buffer(Param),
    /// The tensor a view was taken from (by basic indexing, `view`, `transpose`, `narrow`,
    /// ...): an in-place update of the view writes through to it, as to PyTorch's shared
    /// storage.
    View(Arc<ViewOf>),
}

/// Where a view came from: the tensor it was first taken from (`base`, itself no view) and
/// the view ops from there to it.
pub struct ViewOf {
    pub(crate) base: Py<PyTensor>,
    pub(crate) step: Arc<ViewStep>,
    /// Whether the view's elements are the base's own, where they lie (a slice with a step
    /// is gathered into a buffer of its own): only such a view can be reshaped into another.
    pub(crate) strided: bool,
    /// The base's value that the view's was last taken from: when the base holds another
    /// (an update of it, of another view of it, an optimizer's step), the view reads it
    /// again, as a PyTorch view reads its storage. Holding it keeps that buffer shared, so a
    /// new value is always a new buffer.
    pub(crate) seen: Mutex<Tensor>,
    /// Whether gradients were recorded when the view was made.
    pub(crate) recorded: bool,
}

impl ViewOf {
    /// The view ops from the base out (a loop, not a recursion, however long the chain).
    pub(crate) fn steps(&self) -> Vec<&ViewStep> {
        let mut steps = Vec::new();
        let mut step = Some(&*self.step);
        while let Some(s) = step {
            steps.push(s);
            step = s.parent.as_deref();
        }
        steps.reverse();
        steps
    }

    /// Whether the view is in the graph when its base's value is `base`: when the base is,
    /// unless the view was made under `no_grad` (as PyTorch's views follow their base).
    pub(crate) fn tracked(&self, base: &Tensor) -> bool {
        self.recorded && base.is_tracked()
    }

    /// The view's value taken again from the base's `base` (tracked if `tracked`).
    pub(crate) fn derive(&self, py: Python<'_>, base: &Tensor, tracked: bool) -> PyResult<Tensor> {
        let mut value = base.clone();
        for s in self.steps() {
            value = ferrograd::autograd::enable_grad(|| (s.derive)(py, &value))?;
        }
        Ok(if tracked { value } else { value.detach() })
    }
}

/// Whether `a` and `b` are the same value: the same elements of the same buffer.
pub(crate) fn same_value(a: &Tensor, b: &Tensor) -> bool {
    a.shares_storage(b) && a.shape() == b.shape() && a.strides() == b.strides()
}

/// How a view's value comes from its parent's.
pub(crate) type Derive = Box<dyn Fn(Python<'_>, &Tensor) -> PyResult<Tensor> + Send + Sync>;
/// The parent's new value when the view's changes: `put(py, parent, view)`, differentiable in
/// both (as `parent[key] = view` is).
pub(crate) type Put = Box<dyn Fn(Python<'_>, &Tensor, &Tensor) -> PyResult<Tensor> + Send + Sync>;

/// One view op, and the one before it when the parent is itself a view.
pub(crate) struct ViewStep {
    pub(crate) derive: Derive,
    pub(crate) put: Put,
    pub(crate) parent: Option<Arc<ViewStep>>,
    /// The view this op made, while it lives (a view updated through a view of it takes the
    /// new values too).
    pub(crate) view: OnceLock<Py<PyWeakrefReference>>,
}

impl Drop for ViewStep {
    /// Link by link: a long chain of views of views must not recurse once per link.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(step) = next {
            next = match Arc::try_unwrap(step) {
                Ok(mut step) => step.parent.take(),
                Err(_) => None,
            };
        }
    }
}

impl PyTensor {
    /// A plain tensor.
    pub fn new(t: Tensor) -> PyTensor {
        PyTensor::from_value(Value::Plain(t))
    }

    pub fn from_value(value: Value) -> PyTensor {
        PyTensor {
            value: RwLock::new(value),
            boolean: false,
            writes_to: None,
        }
    }

    /// A boolean tensor: non-zero elements of `t` are true.
    pub fn mask(t: Tensor) -> PyTensor {
        // Non-zero is true, whatever the dtype: a mask holds 0 and 1 only.
        let t = t.detach().ne_scalar(0.0).to_dtype(DType::I64);
        PyTensor {
            value: RwLock::new(Value::Plain(t)),
            boolean: true,
            writes_to: None,
        }
    }

    /// The same tensor, its in-place updates also written to `target`.
    pub fn writing_to(self, target: WriteBack) -> PyTensor {
        PyTensor {
            writes_to: Some(target),
            ..self
        }
    }

    /// Whether this is a boolean tensor.
    pub fn is_mask(&self) -> bool {
        self.boolean
    }

    /// `t` as a tensor of this one's kind: what views and selections of a mask give.
    pub(crate) fn like(&self, t: Tensor) -> PyTensor {
        if self.boolean {
            PyTensor::mask(t)
        } else {
            PyTensor::new(t)
        }
    }

    /// What it holds now.
    pub fn value(&self) -> Value {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What it holds now, a view's values read from its base as they are now.
    pub(crate) fn fresh_value(&self) -> Value {
        match self.value() {
            Value::Plain(_) => Value::Plain(self.tensor()),
            leaf => leaf,
        }
    }

    /// The parameter behind a trainable leaf, None for any other tensor.
    pub fn leaf_param(&self) -> Option<Param> {
        match self.value() {
            Value::Leaf(leaf) => Some(leaf.param.clone()),
            Value::Plain(_) => None,
        }
    }

    /// The parameter behind a trainable leaf or a core layer's buffer, None for any other
    /// tensor.
    pub fn backing_param(&self) -> Option<Param> {
        match &self.writes_to {
            Some(WriteBack::Buffer(p)) => Some(p.clone()),
            _ => self.leaf_param(),
        }
    }

    /// Keeps the values and drops the graph behind them (what `Model.backward` does to its
    /// prediction once the gradients are taken).
    pub fn release_graph(&self) {
        let mut v = self.value.write().unwrap_or_else(|e| e.into_inner());
        if let Value::Plain(t) = &*v {
            *v = Value::Plain(t.detach());
        }
    }

    pub(crate) fn replace(&self, value: Value) {
        *self.value.write().unwrap_or_else(|e| e.into_inner()) = value;
    }

    /// The current value (a leaf's is tracked, with the leaf's identity).
    pub fn tensor(&self) -> Tensor {
        // A leaf first: an alias of another tensor's storage (`p.detach()`) made trainable by
        // `requires_grad_()` is a leaf of its own from then on.
        let value = self.value();
        if let Value::Leaf(l) = &value {
            return l.param.tensor();
        }
        if let Some(live) = self.writes_to.as_ref().and_then(WriteBack::current) {
            return live;
        }
        match (value, self.view_of()) {
            (Value::Plain(t), Some(of)) => self.fresh(&of, t),
            (Value::Plain(t), None) => t,
            (Value::Leaf(l), _) => l.param.tensor(),
        }
    }

    /// A view's value `own`, or, when its base holds another value since, the view taken
    /// from that one (kept as the view's value; `own` if it cannot be taken any more, the
    /// base having been made smaller).
    pub(crate) fn fresh(&self, of: &ViewOf, own: Tensor) -> Tensor {
        let base = of.base.get().tensor();
        if same_value(&base, &of.seen.lock().unwrap_or_else(|e| e.into_inner())) {
            return own;
        }
        // (Taken outside the lock: the ops may let another thread run, which may read this
        // view too.)
        match Python::attach(|py| of.derive(py, &base, of.tracked(&base))) {
            Ok(value) => {
                self.replace(Value::Plain(value.clone()));
                *of.seen.lock().unwrap_or_else(|e| e.into_inner()) = base;
                value
            }
            Err(_) => own,
        }
    }

    /// What this tensor is a view of, if it is one (a view made trainable with
    /// `requires_grad_()` is a leaf of its own).
    pub(crate) fn view_of(&self) -> Option<Arc<ViewOf>> {
        match (&self.writes_to, self.value()) {
            (Some(WriteBack::View(view)), Value::Plain(_)) => Some(Arc::clone(view)),
            _ => None,
        }
    }

    /// Whether this tensor's elements lie where those of the tensor it was taken from do
    /// (true of a tensor that is no view): as PyTorch's strides, what decides whether a
    /// reshape of it can be a view.
    pub(crate) fn is_strided(&self) -> bool {
        self.view_of().is_none_or(|of| of.strided)
    }
}

impl WriteBack {
    /// The storage's value now: what the handed-out tensor reads, as a PyTorch view of the
    /// same storage would (an optimizer step or a forward pass since is seen). None once a
    /// `.grad` was cleared: the tensor then keeps its own values, as PyTorch's old gradient does.
    pub(crate) fn current(&self) -> Option<Tensor> {
        match self {
            WriteBack::Data(leaf) => Some(leaf.param.tensor().detach()),
            WriteBack::Grad(leaf) => leaf.grad(),
            WriteBack::Buffer(p) => Some(p.tensor().detach()),
            WriteBack::View(_) => None,
        }
    }

    /// Whether an update still reaches the storage: not once a `.grad` was cleared (nor
    /// through here for a view: see `in_place`).
    pub(crate) fn live(&self) -> bool {
        match self {
            WriteBack::Grad(leaf) => leaf.grad().is_some(),
            WriteBack::View(_) => false,
            _ => true,
        }
    }

    /// Writes an in-place update through to the storage (a `.grad` keeps its graph, as one
    /// built with `create_graph` must).
    pub(crate) fn write(&self, value: &Tensor) -> PyResult<()> {
        match self {
            WriteBack::Data(leaf) => set_leaf(leaf, value),
            WriteBack::Grad(leaf) => {
                let dtype = leaf.param.dtype();
                leaf.set_grad(Some(value.to_dtype(dtype)));
                Ok(())
            }
            WriteBack::Buffer(p) => {
                let value = value.detach().to_dtype(p.dtype());
                guard::run(|| p.set(&value))
            }
            // (What a view was taken from takes its values in `in_place`.)
            WriteBack::View(_) => Ok(()),
        }
    }
}

/// Replaces a leaf's value, keeping its identity; same shape, converted to its dtype.
pub(crate) fn set_leaf(leaf: &Leaf, value: &Tensor) -> PyResult<()> {
    let shape = leaf.param.shape();
    if value.shape() != shape.as_slice() {
        return Err(PyValueError::new_err(format!(
            "cannot set a leaf of shape {shape:?} to a value of shape {:?}",
            value.shape()
        )));
    }
    let value = value.detach().to_dtype(leaf.param.dtype());
    guard::run(|| leaf.param.set(&value))
}
