//! Running a few equal parts of one kernel call on all cores, with the calling thread taking
//! its share.
//!
//! A plain rayon `for_each` from a thread outside the pool hands every part to the pool's
//! workers and puts the caller to sleep until they are done: the workers must first be woken,
//! and the caller woken again at the end. On a virtual machine each wake-up can cost tens of
//! microseconds, as much as a whole matrix product of the MLP's size, and a training step
//! makes a hundred such calls with short serial stretches between them, after each of which a
//! worker would have gone back to sleep. So, as OpenMP runtimes do, the workers stay warm: a
//! call enlists pool workers as *helpers* that, between calls, keep looking for the next
//! call's parts for a few milliseconds (running any other rayon work meanwhile) before they
//! give their workers back. The caller publishes its parts in one slot and starts on them
//! (after spawning any helper missing), and the helpers take the rest as they come.
//!
//! One calling thread holds the slot at a time; another that finds it taken runs its parts
//! through a rayon scope. A call made inside a part that the caller or a helper runs is run
//! serially there when the outer call has a part for every thread (the cores are busy with
//! them); with fewer, it goes through a rayon scope too, whose idle workers join in. One made
//! from inside the pool goes through rayon's own join.
//!
//! Every parallel loop of the kernels and ops goes through here, and the closures cross into
//! this machinery as trait objects: rayon's join and iterator plumbing is then compiled once,
//! not once per loop, element type and instruction set (that had been about half of the
//! library's generated code, and of its compile time).

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// How long a caller spins for the parts still running on other threads before it starts
/// yielding its core (or, on the scope path, blocks). They started at about the same time as
/// its own, so they end soon after it.
const SPIN: Duration = Duration::from_micros(200);

/// How long a helper keeps looking for parts after the last call before it gives its worker
/// back to the pool (OpenMP's "block time"): longer than the serial stretches between the
/// kernel calls of a training step, short enough that an idle process goes quiet at once.
const KEEP_WARM: Duration = Duration::from_millis(5);

/// How long a helper lives at most: a helper runs as an ordinary rayon job, so a worker
/// waiting inside rayon (in a part's parallel iterator) may pick one up from the queue and
/// then waits under it until it retires.
const LIFETIME: Duration = Duration::from_millis(100);

/// One call's parts, on the calling thread's stack while it is published.
struct Job<'a> {
    part: &'a (dyn Fn(usize) + Sync),
    parts: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl<'a> Job<'a> {
    fn new(part: &'a (dyn Fn(usize) + Sync), parts: usize) -> Self {
        Job {
            part,
            parts,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
        }
    }

    /// Claims and runs parts until none is left; a panicking part is kept for the caller to
    /// raise. Returns whether it ran any.
    fn work(&self) -> bool {
        let _inside = Flag::set(&IN_PART, self.parts);
        let mut ran = false;
        // A plain load first: helpers that find nothing left do not write the shared line
        // (nor can the count run past `parts` by more than one claim per thread).
        while self.next.load(Ordering::Relaxed) < self.parts {
            let t = self.next.fetch_add(1, Ordering::Relaxed);
            if t >= self.parts {
                break;
            }
            if let Err(e) = panic::catch_unwind(AssertUnwindSafe(|| (self.part)(t))) {
                let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                if slot.is_none() {
                    *slot = Some(e);
                }
            }
            self.done.fetch_add(1, Ordering::Release);
            ran = true;
        }
        ran
    }

    /// Raises the panic of a part, if one panicked (once every part has finished).
    fn finish(self) {
        if let Some(e) = self.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            panic::resume_unwind(e);
        }
    }
}

/// Waits until `finished()`: spinning for [`SPIN`], then yielding the core between looks.
fn wait_until(finished: impl Fn() -> bool) {
    let start = Instant::now();
    while !finished() {
        if start.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The slot through which one calling thread at a time offers its parts to the helpers.
struct Slot {
    /// Held by the thread whose job is (or is about to be) published.
    owner: AtomicBool,
    /// The published job, or null.
    job: AtomicPtr<Job<'static>>,
    /// Helpers between reading `job` and being done with it: the caller waits for none
    /// before its job goes out of scope.
    users: AtomicUsize,
    /// Helpers spawned and not yet gone (queued in the pool or running).
    helpers: AtomicUsize,
}

static SLOT: Slot = Slot {
    owner: AtomicBool::new(false),
    job: AtomicPtr::new(ptr::null_mut()),
    users: AtomicUsize::new(0),
    helpers: AtomicUsize::new(0),
};

thread_local! {
    /// How many parts the call has whose part this thread is running (0 outside any): a call
    /// made from inside one runs serially when the outer call has a part for every thread,
    /// as the cores are then busy with them.
    static IN_PART: Cell<usize> = const { Cell::new(0) };
    /// The most threads a parallel loop called from this thread has run on, since
    /// [`take_threads_used`] last read it (for the profiler).
    static USED: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread is a helper. A helper that runs other rayon work may pick up
    /// another queued helper: that one leaves at once, so that helpers do not stack on one
    /// thread.
    static HELPING: Cell<bool> = const { Cell::new(false) };
}

/// Sets a thread-local value until dropped (also when a part unwinds), then restores it.
struct Flag<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);

impl<T: Copy + 'static> Flag<T> {
    fn set(key: &'static std::thread::LocalKey<Cell<T>>, value: T) -> Flag<T> {
        Flag(key, key.with(|c| c.replace(value)))
    }
}

impl<T: Copy + 'static> Drop for Flag<T> {
    fn drop(&mut self) {
        self.0.with(|c| c.set(self.1));
    }
}

/// A helper registered as reading the published job; dropping it (also on unwinding)
/// deregisters it.
struct User(&'static Slot);

impl Drop for User {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::Release);
    }
}

impl Slot {
    /// Runs parts of the published job, if there is one with parts left. Returns whether it
    /// ran any.
    fn help(&'static self) -> bool {
        let p = self.job.load(Ordering::Acquire);
        if p.is_null() {
            return false;
        }
        self.users.fetch_add(1, Ordering::SeqCst);
        let _user = User(self);
        // Read again after registering: the caller withdraws its job before it waits for the
        // users to leave, so a job still published now stays alive until `_user` drops. (A
        // newer job at the same address passes too, and is just as published.)
        if self.job.load(Ordering::SeqCst) != p {
            return false;
        }
        // SAFETY: `p` is published, and its caller keeps it alive until `users` is back to
        // zero (see `Published::drop`).
        unsafe { &*p }.work()
    }

    /// A helper's life: parts of published jobs, else other rayon work, until no part has
    /// come for [`KEEP_WARM`] or it has lived [`LIFETIME`].
    fn helper(&'static self) {
        if HELPING.with(Cell::get) || IN_PART.with(Cell::get) > 0 {
            // Picked up by a thread already helping or inside a part; the next call enlists
            // a helper again.
            self.helpers.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let _helping = Flag::set(&HELPING, true);
        let (born, mut last) = (Instant::now(), Instant::now());
        // Only parts keep a helper warm, and it retires after a while whatever it does (the
        // next call enlists another): a worker waiting inside rayon that picked it up from
        // the queue gets back to its own wait soon.
        while last.elapsed() < KEEP_WARM && born.elapsed() < LIFETIME {
            if self.help() {
                last = Instant::now();
            } else if rayon::yield_now() != Some(rayon::Yield::Executed) {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
        }
        self.helpers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Spawns helpers until `want` are about (a call published after a helper's last look
    /// runs with one fewer; the caller takes any part nobody does).
    fn enlist(&'static self, want: usize) {
        while self.helpers.load(Ordering::SeqCst) < want {
            self.helpers.fetch_add(1, Ordering::SeqCst);
            rayon::spawn(move || self.helper());
        }
    }
}

/// The slot held by this thread; dropping it (also on unwinding) withdraws any published
/// job, waits until no helper still reads it, and frees the slot.
struct Published;

impl Drop for Published {
    fn drop(&mut self) {
        SLOT.job.store(ptr::null_mut(), Ordering::SeqCst);
        wait_until(|| SLOT.users.load(Ordering::SeqCst) == 0);
        SLOT.owner.store(false, Ordering::Release);
    }
}

/// The most threads one kernel call uses; 0 for no limit but the pool's size.
static THREAD_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// Caps the threads of each kernel call at `n` (at least 1); the pool's size is the most
/// there can be.
pub fn set_thread_limit(n: usize) {
    THREAD_LIMIT.store(n.max(1), Ordering::Relaxed);
}

/// The threads a kernel call spreads its parts over: the rayon pool's, or fewer under
/// [`set_thread_limit`].
pub fn threads() -> usize {
    let pool = rayon::current_num_threads();
    match THREAD_LIMIT.load(Ordering::Relaxed) {
        0 => pool,
        n => n.min(pool),
    }
}

/// Runs `part(0..parts)`, each index once, on the calling thread and the rayon pool. A part
/// may itself use rayon, but must not wait for work that only another part would do.
pub(crate) fn run_parts(parts: usize, part: impl Fn(usize) + Sync) {
    run_dyn_parts(parts, &part);
}

/// [`run_parts`] behind one vtable, so that the machinery below (and rayon's, which it
/// instantiates) is compiled once rather than once per calling closure.
fn run_dyn_parts(parts: usize, part: &(dyn Fn(usize) + Sync)) {
    let threads = threads();
    if parts <= 1 || threads <= 1 || IN_PART.with(Cell::get) >= threads {
        note_threads(1);
        (0..parts).for_each(part);
        return;
    }
    note_threads(parts.min(threads));
    if rayon::current_thread_index().is_some() {
        // Inside the pool, rayon's own wait runs other work meanwhile: nothing to gain, and a
        // spinning worker could hold up the very part it waits for.
        (0..parts).into_par_iter().for_each(part);
        return;
    }
    let job = Job::new(part, parts);
    if SLOT
        .owner
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Another thread's call holds the helpers.
        return run_parts_in_scope(job);
    }
    // Declared after `job`, so dropped before it even when unwinding: the job is withdrawn
    // and no helper reads it by the time it goes out of scope. Only its lifetime is erased.
    let published = Published;
    let erased = &job as *const Job<'_> as *mut Job<'static>;
    SLOT.job.store(erased, Ordering::SeqCst);
    SLOT.enlist(parts.min(threads) - 1);
    job.work();
    // Every part is claimed now; once no helper reads the job, every part has finished.
    drop(published);
    job.finish();
}

/// [`run_parts`] through a rayon scope, for a caller that finds the helpers taken: it starts
/// on the parts at once and the pool's workers join in as they wake.
fn run_parts_in_scope(job: Job<'_>) {
    let parts = job.parts;
    rayon::in_place_scope(|scope| {
        for _ in 1..parts.min(threads()) {
            scope.spawn(|_| {
                job.work();
            });
        }
        job.work();
        let start = Instant::now();
        while job.done.load(Ordering::Acquire) < parts && start.elapsed() < SPIN {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
        // Leaving the scope waits (blocking) for whatever is still running.
    });
    job.finish();
}

/// Runs `task` once on each part (parts carry their own borrows, such as disjoint chunks of
/// an output) on the calling thread and the pool, as [`run_parts`] does, and returns the
/// results in the parts' order. The kernels' parallel loops go through this rather than a
/// rayon iterator, which from a thread outside the pool would put the caller to sleep until
/// the workers had woken and finished.
pub(crate) fn run_tasks<P: Send, R: Send>(parts: Vec<P>, task: impl Fn(P) -> R + Sync) -> Vec<R> {
    run_dyn_tasks(parts, &task)
}

/// [`run_tasks`] behind one vtable: compiled once per part and result type, not per closure.
fn run_dyn_tasks<P: Send, R: Send>(parts: Vec<P>, task: &(dyn Fn(P) -> R + Sync)) -> Vec<R> {
    let slots: Vec<Mutex<(Option<P>, Option<R>)>> = parts
        .into_iter()
        .map(|p| Mutex::new((Some(p), None)))
        .collect();
    run_parts(slots.len(), |i| {
        let mut slot = slots[i].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = slot.0.take() {
            slot.1 = Some(task(p));
        }
    });
    slots
        .into_iter()
        .map(|s| {
            let (_, r) = s.into_inner().unwrap_or_else(|e| e.into_inner());
            r.expect("run_parts runs every part")
        })
        .collect()
}

/// [`run_tasks`] with a scratch value for each task (buffers a part reuses rather than
/// allocates): a task takes one that an earlier task on any thread put back, or a new one.
/// At most as many exist as tasks ran at once.
pub(crate) fn run_tasks_with<S: Default + Send, P: Send, R: Send>(
    parts: Vec<P>,
    task: impl Fn(&mut S, P) -> R + Sync,
) -> Vec<R> {
    let spare: Mutex<Vec<S>> = Mutex::new(Vec::new());
    let spare = || spare.lock().unwrap_or_else(|e| e.into_inner());
    run_tasks(parts, |p| {
        let mut scratch = spare().pop().unwrap_or_default();
        let r = task(&mut scratch, p);
        spare().push(scratch);
        r
    })
}

/// `f(i, chunk)` for every `size`-element chunk of `xs` (the last may be shorter), through
/// [`run_tasks`].
pub(crate) fn for_each_chunk<T: Send>(
    xs: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    for_each_dyn_chunk(xs, size, &f);
}

/// [`for_each_chunk`] behind one vtable: compiled once per element type, not per closure.
/// Many small chunks (a plane each, say) go a run of them per part, enough parts to balance
/// the threads, so that handing out a part costs nothing beside its work.
fn for_each_dyn_chunk<T: Send>(xs: &mut [T], size: usize, f: &(dyn Fn(usize, &mut [T]) + Sync)) {
    let size = size.max(1);
    let per_part = chunks_per_part(xs.len().div_ceil(size));
    let parts: Vec<(usize, &mut [T])> = xs.chunks_mut(per_part * size).enumerate().collect();
    run_tasks(parts, |(p, part)| {
        for (k, c) in part.chunks_mut(size).enumerate() {
            f(p * per_part + k, c);
        }
    });
}

/// How many of `chunks` small pieces of work one part should take, as [`for_each_chunk`]
/// groups them.
pub(crate) fn chunks_per_part(chunks: usize) -> usize {
    chunks.div_ceil(PARTS_PER_THREAD * threads()).max(1)
}

/// Parts per thread that [`for_each_chunk`] makes at most: the last to finish waits for one
/// part of many, whatever the threads' speeds.
const PARTS_PER_THREAD: usize = 8;

/// Records that a loop ran on `n` threads, for [`take_threads_used`].
fn note_threads(n: usize) {
    USED.with(|u| u.set(u.get().max(n)));
}

/// The most threads a parallel loop called from this thread has run on since the last call,
/// reset to 0 (the profiler brackets each op with it).
pub(crate) fn take_threads_used() -> usize {
    USED.with(|u| u.replace(0))
}

/// Sets what [`take_threads_used`] gives next, for the profiler to hand a nested op's count
/// on to the op around it.
pub(crate) fn restore_threads_used(n: usize) {
    USED.with(|u| u.set(n));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_once() {
        for parts in [0, 1, 2, 3, 17] {
            let counts: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
            run_parts(parts, |t| {
                counts[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn callers_on_several_threads_each_run_every_part_once() {
        // One of them holds the helpers at a time; the others take the scope path.
        std::thread::scope(|s| {
            for caller in 0..4 {
                s.spawn(move || {
                    for round in 0..200 {
                        let parts = 2 + (caller + round) % 7;
                        let counts: Vec<AtomicUsize> =
                            (0..parts).map(|_| AtomicUsize::new(0)).collect();
                        run_parts(parts, |t| {
                            counts[t].fetch_add(1, Ordering::Relaxed);
                        });
                        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
                    }
                });
            }
        });
    }

    #[test]
    fn a_call_inside_a_part_runs_every_inner_part_once() {
        let total = AtomicUsize::new(0);
        run_parts(4, |_| {
            run_parts(3, |t| {
                total.fetch_add(t + 1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 6);
    }

    #[test]
    fn a_call_inside_one_of_fewer_parts_than_threads_runs_every_inner_part_once() {
        // Two outer parts: on more than two threads the inner calls spread over the idle ones
        // (a scope from the caller, rayon's join from a helper); on two, they run serially.
        let total = AtomicUsize::new(0);
        for _ in 0..50 {
            run_parts(2, |_| {
                run_parts(5, |t| {
                    total.fetch_add(t + 1, Ordering::Relaxed);
                });
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 50 * 2 * 15);
    }

    #[test]
    fn a_panicking_part_reaches_the_caller_and_the_helpers_stay_usable() {
        // Whichever thread runs part 3 (the caller or a helper), its panic is the caller's.
        for _ in 0..20 {
            let caught = std::panic::catch_unwind(|| {
                run_parts(8, |t| {
                    std::thread::sleep(Duration::from_micros(50));
                    assert!(t != 3, "part three fails");
                })
            });
            let message = caught.expect_err("the panic propagates");
            let text = message
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| message.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("");
            assert!(text.contains("part three fails"), "{text}");
        }
        let counts: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
        run_parts(5, |t| {
            counts[t].fetch_add(1, Ordering::Relaxed);
        });
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn helpers_take_parts_and_a_part_may_use_rayon() {
        // On a busy machine a helper may come late to one call: over ten calls, one comes.
        let mut most = 0;
        for _ in 0..10 {
            let threads: Mutex<std::collections::HashSet<std::thread::ThreadId>> = Mutex::default();
            let total = AtomicUsize::new(0);
            run_parts(8, |t| {
                // Long enough parts that a helper wakes in time to take some.
                std::thread::sleep(Duration::from_millis(2));
                let sum: usize = (0..100).into_par_iter().map(|i| i * t).sum();
                total.fetch_add(sum, Ordering::Relaxed);
                let mut seen = threads.lock().unwrap();
                seen.insert(std::thread::current().id());
            });
            assert_eq!(total.load(Ordering::Relaxed), 4950 * 28);
            most = most.max(threads.lock().unwrap().len());
        }
        assert!(
            most >= rayon::current_num_threads().min(2),
            "{most} threads ran parts"
        );
    }

    #[test]
    fn works_from_inside_the_pool() {
        let total = AtomicUsize::new(0);
        (0..4).into_par_iter().for_each(|_| {
            run_parts(3, |t| {
                total.fetch_add(t + 1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 6);
    }

    #[test]
    fn many_small_chunks_each_reach_f_once_with_their_index() {
        // More chunks than parts (so runs of them share a part), and a short last one.
        for (len, size) in [(10_007, 3), (64, 64), (65, 64), (0, 5), (7, 0)] {
            let mut xs = vec![0usize; len];
            for_each_chunk(&mut xs, size, |i, c| {
                assert!(c.len() <= size.max(1));
                c.iter_mut().for_each(|x| *x += i + 1);
            });
            let expected: Vec<usize> = (0..len).map(|k| k / size.max(1) + 1).collect();
            assert_eq!(xs, expected, "len {len}, size {size}");
        }
    }

    #[test]
    fn tasks_with_scratch_return_in_order_and_reuse_their_buffers() {
        let made = AtomicUsize::new(0);
        #[derive(Default)]
        struct Scratch(Option<Vec<u64>>);
        let out = run_tasks_with((0..200u64).collect(), |s: &mut Scratch, p| {
            let buf = s.0.get_or_insert_with(|| {
                made.fetch_add(1, Ordering::Relaxed);
                Vec::new()
            });
            buf.clear();
            buf.extend(0..=p);
            buf.iter().sum::<u64>()
        });
        assert_eq!(
            out,
            (0..200u64).map(|p| p * (p + 1) / 2).collect::<Vec<_>>()
        );
        // One buffer per task running at once, never one per task.
        let made = made.load(Ordering::Relaxed);
        assert!(
            made >= 1 && made <= rayon::current_num_threads() + 1,
            "{made} buffers"
        );
    }
}
