//! The profiler's recording: every op of the op layer, every derivative rule the backward
//! engine runs, and the ranges a caller names, each with its wall time, its thread, the bytes
//! of the tensors it made, the floating-point operations the products and convolutions in it
//! report, and the most threads its kernels ran on. Off, a scope costs one relaxed atomic
//! load; the report is built in `crate::profiler`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Whether a profile is being recorded.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The events recorded since the profile started, and when it started.
static EVENTS: Mutex<Option<(Instant, Vec<Event>)>> = Mutex::new(None);

/// A number per recording thread, in the order threads first record.
static NEXT_THREAD: AtomicU64 = AtomicU64::new(0);

/// A scope open on this thread, with what its closed children took.
struct Open {
    name: Cow<'static, str>,
    children_ns: u64,
    bytes: u64,
    children_bytes: u64,
    flops: u64,
    children_flops: u64,
    /// The kernels' thread count seen by the scopes around this one before it opened.
    outer_threads: usize,
}

thread_local! {
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    /// The scopes open on this thread, innermost last.
    static OPEN: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
}

/// One recorded scope.
#[derive(Clone, Debug)]
pub struct Event {
    /// The op (`matmul`), the rule (`matmul backward`) or the range a caller named.
    pub name: String,
    /// Nanoseconds from the profile's start to the scope's.
    pub start_ns: u64,
    /// Nanoseconds the scope took, its nested scopes included.
    pub total_ns: u64,
    /// Nanoseconds the scope took outside its nested scopes.
    pub self_ns: u64,
    /// The recording thread's number.
    pub thread: u64,
    /// How many scopes were open around it.
    pub depth: usize,
    /// Bytes of the tensors the scope made, its nested scopes' included.
    pub bytes: u64,
    /// Bytes of the tensors the scope made outside its nested scopes.
    pub self_bytes: u64,
    /// Floating-point operations its products and convolutions reported, nested included.
    pub flops: u64,
    /// The most threads a kernel inside it ran on (0 for none that splits its work).
    pub threads: usize,
}

/// Starts recording (dropping what an earlier profile left); false if one is already on.
pub(crate) fn start() -> bool {
    let mut events = EVENTS.lock().unwrap_or_else(PoisonError::into_inner);
    if ACTIVE.load(Ordering::Acquire) {
        return false;
    }
    *events = Some((Instant::now(), Vec::new()));
    ACTIVE.store(true, Ordering::Release);
    true
}

/// Stops recording and gives the events, in the order their scopes closed.
pub(crate) fn stop() -> Vec<Event> {
    let mut events = EVENTS.lock().unwrap_or_else(PoisonError::into_inner);
    ACTIVE.store(false, Ordering::Release);
    events.take().map(|(_, e)| e).unwrap_or_default()
}

/// A scope that records itself when dropped.
pub struct Scope {
    begun: Instant,
    depth: usize,
}

/// Opens a scope named `name` if a profile is being recorded. The same name directly inside
/// itself (`matmul` calling `try_matmul`) is one scope.
#[inline]
pub fn scope(name: impl Into<Cow<'static, str>>) -> Option<Scope> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    let name = name.into();
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if open.last().is_some_and(|o| o.name == name) {
            return None;
        }
        open.push(Open {
            name,
            children_ns: 0,
            bytes: 0,
            children_bytes: 0,
            flops: 0,
            children_flops: 0,
            outer_threads: crate::kernels::parallel::take_threads_used(),
        });
        Some(Scope {
            begun: Instant::now(),
            depth: open.len() - 1,
        })
    })
}

/// Adds `bytes` of new tensors to the innermost open scope.
#[inline]
pub(crate) fn note_bytes(bytes: usize) {
    if ACTIVE.load(Ordering::Relaxed) {
        OPEN.with(|open| {
            if let Some(o) = open.borrow_mut().last_mut() {
                o.bytes += bytes as u64;
            }
        });
    }
}

/// Adds the floating-point operations of a product (a multiply and an add for each term:
/// twice the product of `factors`) to the innermost open scope.
#[inline]
pub(crate) fn note_product_flops(factors: impl IntoIterator<Item = usize>) {
    if ACTIVE.load(Ordering::Relaxed) {
        // Saturating: hostile shapes (a zero-size axis beside huge ones) must not overflow.
        let flops = factors
            .into_iter()
            .fold(2u64, |acc, f| acc.saturating_mul(f as u64));
        OPEN.with(|open| {
            if let Some(o) = open.borrow_mut().last_mut() {
                o.flops = o.flops.saturating_add(flops);
            }
        });
    }
}

/// [`scope`] with a name built only when a profile is being recorded.
#[inline]
pub fn scope_with(name: impl FnOnce() -> String) -> Option<Scope> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    scope(name())
}

impl Drop for Scope {
    fn drop(&mut self) {
        let end = Instant::now();
        let total = end.duration_since(self.begun).as_nanos() as u64;
        let threads = crate::kernels::parallel::take_threads_used();
        let Some(own) = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            // Scopes close innermost first; a panic unwinding through them keeps that order.
            open.truncate(self.depth + 1);
            let own = open.pop()?;
            crate::kernels::parallel::restore_threads_used(own.outer_threads.max(threads));
            if let Some(parent) = open.last_mut() {
                parent.children_ns += total;
                parent.children_bytes += own.bytes + own.children_bytes;
                parent.children_flops += own.flops + own.children_flops;
            }
            Some(own)
        }) else {
            return;
        };
        let mut events = EVENTS.lock().unwrap_or_else(PoisonError::into_inner);
        // The profile may have stopped (and another started) while the scope was open.
        if let Some((origin, list)) = events.as_mut() {
            if self.begun < *origin {
                return;
            }
            list.push(Event {
                name: own.name.into_owned(),
                start_ns: self.begun.duration_since(*origin).as_nanos() as u64,
                total_ns: total,
                self_ns: total.saturating_sub(own.children_ns),
                thread: THREAD.with(|t| *t),
                depth: self.depth,
                bytes: own.bytes + own.children_bytes,
                self_bytes: own.bytes,
                flops: own.flops + own.children_flops,
                threads,
            });
        }
    }
}
