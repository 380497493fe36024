//! The tape a trace reads: while a function runs eagerly under [`record_events`], each op it
//! calls notes one [`Event`] (its graph variant's name, its attributes, its inputs and its
//! outputs) when it ends; the ops that op calls inside itself note theirs too, marked as
//! deeper, before it. The graph layer turns the
//! events into graph nodes (`graph::trace`); this layer knows nothing of graphs, so an op notes
//! its attributes as values and the graph's table reads them back by type.
//!
//! Off, it costs an op one relaxed atomic load.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Tensor;

/// One op as the function called it.
pub(crate) struct Event {
    /// The name of its graph `Op` variant (`"Narrow"`, or `"Unary"` / `"Binary"` for the
    /// element-wise tables).
    pub(crate) variant: &'static str,
    /// Its attributes, in the order of the variant's fields.
    pub(crate) attrs: Vec<Box<dyn Any>>,
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) outputs: Vec<Tensor>,
    /// 1 for an op the function called, more for one that op called inside itself (whose
    /// results a derivative rule may read).
    pub(crate) depth: usize,
}

/// The events of one trace, and how deep inside ops the caller is, counted from where the
/// trace began.
struct Tape {
    events: Vec<Event>,
    depth: usize,
    /// Whether the function read values it computed (to steer its control flow, or as
    /// positions an op keeps): a replay on other values would not do what it would do.
    read: bool,
    /// The function's inputs: reading their values (or a view's) counts as well.
    watch: Vec<Tensor>,
    /// Whether the events will run again on other values (`vmap`), not only at this point.
    replayed: bool,
}

thread_local! {
    /// The traces running on this thread, outermost first: an op notes its event on each
    /// trace it runs inside, so a trace inside another (a `jvp` inside a
    /// traced function, or inside another `jvp`) is also recorded by the outer one.
    static TAPES: RefCell<Vec<Tape>> = const { RefCell::new(Vec::new()) };
}

/// How many traces are running on all threads: ops test this before touching the
/// thread-local tapes.
static TRACING: AtomicUsize = AtomicUsize::new(0);

/// An op's place on the tapes while it runs; dropping the guard leaves the op.
struct Traced {
    /// How many tapes were running when the op began: the ones it is inside of. A tape begun
    /// within the op has ended by the time the op ends.
    tapes: usize,
}

impl Drop for Traced {
    fn drop(&mut self) {
        TAPES.with(|t| {
            for tape in t.borrow_mut().iter_mut().take(self.tapes) {
                tape.depth -= 1;
            }
        });
    }
}

/// Enters an op: `None` unless this thread is tracing.
#[inline]
fn enter() -> Option<Traced> {
    if TRACING.load(Ordering::Relaxed) == 0 {
        return None;
    }
    TAPES.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_empty() {
            return None;
        }
        for tape in t.iter_mut() {
            tape.depth += 1;
        }
        Some(Traced { tapes: t.len() })
    })
}

/// Notes an op's event on each tape it runs inside, with how deep it runs there.
fn record(
    traced: Traced,
    variant: &'static str,
    attrs: &dyn Fn() -> Vec<Box<dyn Any>>,
    inputs: &[&Tensor],
    outputs: &[Tensor],
) {
    TAPES.with(|t| {
        for tape in t.borrow_mut().iter_mut().take(traced.tapes) {
            tape.events.push(Event {
                variant,
                attrs: attrs(),
                inputs: inputs.iter().map(|&t| t.clone()).collect(),
                outputs: outputs.to_vec(),
                depth: tape.depth,
            });
        }
    });
}

/// Notes that the values of `t` were read out while no op is running, when `t` was computed
/// by the traced function (it is tracked) or is one of its inputs (or views one): the
/// function may steer by them.
#[inline]
pub(crate) fn note_read_of(t: &Tensor) {
    if TRACING.load(Ordering::Relaxed) == 0 {
        return;
    }
    TAPES.with(|tapes| {
        for tape in tapes.borrow_mut().iter_mut().filter(|tape| tape.depth == 0) {
            if t.is_tracked() || tape.watch.iter().any(|w| w.shares_storage(t)) {
                tape.read = true;
            }
        }
    });
}

/// Notes that an op keeps positions it read from its input's values (its derivative routes
/// by them): a replay on other values would route as these did.
pub(crate) fn note_positions_read() {
    if TRACING.load(Ordering::Relaxed) == 0 {
        return;
    }
    TAPES.with(|tapes| {
        tapes
            .borrow_mut()
            .iter_mut()
            .for_each(|tape| tape.read = true)
    });
}

/// Whether a trace running on this thread will run its ops again on other values (`vmap`):
/// an op that would read positions from its inputs' values computes from them as tensors.
pub(crate) fn is_replayed() -> bool {
    TRACING.load(Ordering::Relaxed) != 0 && TAPES.with(|t| t.borrow().iter().any(|t| t.replayed))
}

/// Whether this thread is tracing: helpers that compute a derivative in one fused pass check
/// it, to compute from traced ops instead while their results may reach a trace.
pub(crate) fn is_tracing() -> bool {
    TRACING.load(Ordering::Relaxed) != 0 && TAPES.with(|t| !t.borrow().is_empty())
}

/// What an op returns, as the outputs its event lists (none for an error).
pub(crate) trait Outputs {
    fn outputs(&self) -> Vec<Tensor>;
}

impl Outputs for Tensor {
    fn outputs(&self) -> Vec<Tensor> {
        vec![self.clone()]
    }
}

impl Outputs for (Tensor, Tensor) {
    fn outputs(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone()]
    }
}

impl Outputs for (Tensor, Tensor, Tensor) {
    fn outputs(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone(), self.2.clone()]
    }
}

impl<T: Outputs, E> Outputs for Result<T, E> {
    fn outputs(&self) -> Vec<Tensor> {
        self.as_ref().map(T::outputs).unwrap_or_default()
    }
}

/// Runs an op's `body` as one traced op: when a trace is running and no op encloses this
/// one, notes its event, with the attributes `attrs` makes (see [`attrs!`]).
#[inline]
pub(crate) fn op<R: Outputs>(
    variant: &'static str,
    attrs: impl Fn() -> Vec<Box<dyn Any>>,
    inputs: &[&Tensor],
    body: impl FnOnce() -> R,
) -> R {
    let Some(guard) = enter() else {
        return body();
    };
    let out = body();
    let outputs = out.outputs();
    if !outputs.is_empty() {
        record(guard, variant, &attrs, inputs, &outputs);
    }
    out
}

/// The attributes of an event, made only when a trace notes it: `attrs![axis, keepdim]`.
macro_rules! attrs {
    ($($attr:expr),* $(,)?) => {
        || vec![$(Box::new($attr) as Box<dyn std::any::Any>),*]
    };
}
pub(crate) use attrs;

/// What a trace noted: the events in the order they ran, and whether the function read
/// values it computed.
pub(crate) struct Noted {
    pub(crate) events: Vec<Event>,
    pub(crate) read: bool,
}

/// Runs `f` with every op it calls noted, and returns its result with what was noted; `watch`
/// are the inputs whose values `f` may read, `replayed` says whether the events will run
/// again on other values. Inside another trace, the outer one notes the same ops.
pub(crate) fn record_events<R>(
    watch: &[Tensor],
    replayed: bool,
    f: impl FnOnce() -> R,
) -> (R, Noted) {
    /// Ends the trace even when `f` panics.
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            TRACING.fetch_sub(1, Ordering::Relaxed);
            TAPES.with(|t| t.borrow_mut().pop());
        }
    }
    TAPES.with(|t| {
        t.borrow_mut().push(Tape {
            events: Vec::new(),
            depth: 0,
            read: false,
            watch: watch.to_vec(),
            replayed,
        })
    });
    TRACING.fetch_add(1, Ordering::Relaxed);
    let end = End;
    let out = f();
    let noted = TAPES.with(|t| {
        t.borrow_mut().last_mut().map(|tape| Noted {
            events: std::mem::take(&mut tape.events),
            read: tape.read,
        })
    });
    drop(end);
    let noted = noted.unwrap_or(Noted {
        events: Vec::new(),
        read: false,
    });
    (out, noted)
}
