//! The tape a trace reads: while a function runs eagerly under [`record_events`], each op it
//! calls notes one [`Event`] (its graph variant's name, its attributes, its inputs and its
//! outputs), and the ops that op calls inside itself note nothing. The graph layer turns the
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
}

/// The events of the trace running on this thread, and how deep inside ops the caller is.
struct Tape {
    events: Vec<Event>,
    depth: usize,
}

thread_local! {
    static TAPE: RefCell<Option<Tape>> = const { RefCell::new(None) };
}

/// How many threads are tracing: ops test this before touching the thread-local tape.
static TRACING: AtomicUsize = AtomicUsize::new(0);

/// An op's place on the tape while it runs: only the outermost op notes its event; dropping
/// the guard leaves the op.
struct Traced {
    outermost: bool,
}

impl Drop for Traced {
    fn drop(&mut self) {
        TAPE.with(|t| {
            if let Some(tape) = t.borrow_mut().as_mut() {
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
    TAPE.with(|t| {
        let mut t = t.borrow_mut();
        let tape = t.as_mut()?;
        tape.depth += 1;
        Some(Traced {
            outermost: tape.depth == 1,
        })
    })
}

/// Notes an op's event, if it is the outermost op running.
fn record(
    traced: Traced,
    variant: &'static str,
    attrs: Vec<Box<dyn Any>>,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
) {
    if !traced.outermost {
        return;
    }
    TAPE.with(|t| {
        if let Some(tape) = t.borrow_mut().as_mut() {
            tape.events.push(Event {
                variant,
                attrs,
                inputs,
                outputs,
            });
        }
    });
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
    attrs: impl FnOnce() -> Vec<Box<dyn Any>>,
    inputs: &[&Tensor],
    body: impl FnOnce() -> R,
) -> R {
    let Some(guard) = enter() else {
        return body();
    };
    let out = body();
    let outputs = out.outputs();
    if !outputs.is_empty() {
        let inputs = inputs.iter().map(|&t| t.clone()).collect();
        record(guard, variant, attrs(), inputs, outputs);
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

/// Runs `f` with every op it calls noted, and returns its result with the events in the
/// order they ran. A trace inside a trace is refused: its events would be lost to the outer.
pub(crate) fn record_events<R>(f: impl FnOnce() -> R) -> Result<(R, Vec<Event>), String> {
    let fresh = TAPE.with(|t| {
        let mut t = t.borrow_mut();
        if t.is_some() {
            return false;
        }
        *t = Some(Tape {
            events: Vec::new(),
            depth: 0,
        });
        true
    });
    if !fresh {
        return Err("a trace is already running on this thread".into());
    }
    /// Ends the trace even when `f` panics.
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            TRACING.fetch_sub(1, Ordering::Relaxed);
            TAPE.with(|t| t.borrow_mut().take());
        }
    }
    TRACING.fetch_add(1, Ordering::Relaxed);
    let end = End;
    let out = f();
    let events = TAPE.with(|t| {
        t.borrow_mut()
            .as_mut()
            .map(|tape| std::mem::take(&mut tape.events))
    });
    drop(end);
    Ok((out, events.unwrap_or_default()))
}
