//! Running a few equal parts of one kernel call on all cores, with the calling thread taking
//! its share.
//!
//! A plain rayon `for_each` from a thread outside the pool hands every part to the pool's
//! workers and puts the caller to sleep until they are done: the workers must first be woken,
//! and the caller woken again at the end. On a virtual machine each wake-up can cost tens of
//! microseconds, as much as a whole matrix product of the MLP's size. Here the caller starts
//! on the parts at once, the pool's workers join in as they wake, and the caller waits for the
//! last part by spinning for a short while before it falls back to a blocking wait.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// How long the caller spins for the parts still running on other threads before it blocks.
/// They started at about the same time as its own, so they end soon after it.
const SPIN: Duration = Duration::from_micros(200);

/// Runs `part(0..parts)`, each index once, on the calling thread and the rayon pool.
pub(crate) fn run_parts(parts: usize, part: impl Fn(usize) + Sync) {
    if parts <= 1 {
        (0..parts).for_each(part);
        return;
    }
    if rayon::current_thread_index().is_some() {
        // Inside the pool, rayon's own wait runs other work meanwhile: nothing to gain, and a
        // spinning worker could hold up the very part it waits for.
        (0..parts).into_par_iter().for_each(&part);
        return;
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    // Claims and runs parts until none is left: whoever comes first takes the next one, so a
    // worker that wakes late finds less to do (or nothing) instead of delaying the end.
    let work = || loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        if t >= parts {
            break;
        }
        part(t);
        done.fetch_add(1, Ordering::Release);
    };
    rayon::in_place_scope(|scope| {
        for _ in 1..parts.min(rayon::current_num_threads()) {
            scope.spawn(|_| work());
        }
        work();
        let start = Instant::now();
        while done.load(Ordering::Acquire) < parts && start.elapsed() < SPIN {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
        // Leaving the scope waits (blocking) for whatever is still running.
    });
}

/// Runs `task` once on each part (parts carry their own borrows, such as disjoint chunks of
/// an output) on the calling thread and the pool, as [`run_parts`] does, and returns the
/// results in the parts' order. The kernels' parallel loops go through this rather than a
/// rayon iterator, which from a thread outside the pool would put the caller to sleep until
/// the workers had woken and finished.
pub(crate) fn run_tasks<P: Send, R: Send>(parts: Vec<P>, task: impl Fn(P) -> R + Sync) -> Vec<R> {
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

/// `f(i, chunk)` for every `size`-element chunk of `xs` (the last may be shorter), through
/// [`run_tasks`].
pub(crate) fn for_each_chunk<T: Send>(
    xs: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let parts: Vec<(usize, &mut [T])> = xs.chunks_mut(size.max(1)).enumerate().collect();
    run_tasks(parts, |(i, c)| f(i, c));
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
    fn works_from_inside_the_pool() {
        let total = AtomicUsize::new(0);
        (0..4).into_par_iter().for_each(|_| {
            run_parts(3, |t| {
                total.fetch_add(t + 1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 6);
    }
}
