//! The random draws of a checkpointed function, so that running it again in backward draws
//! the same ones (PyTorch's `preserve_rng_state`): while a recording is open, the layers'
//! streams report where each draw came from; while a replay is open, they take those places
//! back in order instead of moving on. The default generator is set back to where it stood
//! for the replay, and returned to where it is after it.

use std::cell::RefCell;
use std::collections::VecDeque;

use rand::rngs::StdRng;

use super::create::{default_rng_state, set_default_rng_state};

/// Where a stream's draw came from: its seed and its position.
pub type Draw = (u64, u64);

/// What one checkpointed run drew: the streams' draws in order and the default generator as
/// it stood before.
pub struct Draws {
    streams: Vec<Draw>,
    default: Option<StdRng>,
}

enum Level {
    Recording(Vec<Draw>),
    Replaying(VecDeque<Draw>),
}

thread_local! {
    /// Open recordings and replays, innermost last (a checkpoint inside a checkpoint).
    static LEVELS: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
}

/// The place of a stream's next draw, given where the stream stands: the stream's own
/// (`advance` true) unless a replay is open, which hands back the recorded one. Every
/// recording inside the innermost replay (or every one, without a replay) notes it.
pub fn stream_draw(here: Draw) -> (Draw, bool) {
    LEVELS.with(|levels| {
        let mut levels = levels.borrow_mut();
        let replay = levels
            .iter()
            .rposition(|l| matches!(l, Level::Replaying(_)));
        let (draw, advance) = match replay {
            Some(r) => {
                let Level::Replaying(log) = &mut levels[r] else {
                    unreachable!("rposition found a replay")
                };
                let draw = log.pop_front().unwrap_or_else(|| {
                    panic!("checkpoint: the function drew more random numbers when run again")
                });
                assert!(
                    draw.0 == here.0,
                    "checkpoint: the function drew from another stream when run again"
                );
                (draw, false)
            }
            None => (here, true),
        };
        for level in &mut levels[replay.map_or(0, |r| r + 1)..] {
            if let Level::Recording(log) = level {
                log.push(draw);
            }
        }
        (draw, advance)
    })
}

/// `f()`, and what it drew.
pub fn recorded<R>(f: impl FnOnce() -> R) -> (R, Draws) {
    let default = default_rng_state();
    LEVELS.with(|l| l.borrow_mut().push(Level::Recording(Vec::new())));
    let out = LevelGuard::run(f);
    let Some(Level::Recording(streams)) = out.1 else {
        unreachable!("the recording opened above")
    };
    (out.0, Draws { streams, default })
}

/// `f()` drawing what `draws` recorded, the default generator where it stood then (and
/// where it is now afterwards).
pub fn replayed<R>(draws: &Draws, f: impl FnOnce() -> R) -> R {
    let now = default_rng_state();
    set_default_rng_state(draws.default.clone());
    LEVELS.with(|l| {
        l.borrow_mut()
            .push(Level::Replaying(draws.streams.iter().copied().collect()))
    });
    let (out, _) = LevelGuard::run(f);
    set_default_rng_state(now);
    out
}

/// Closes the innermost level when `f` returns or unwinds.
struct LevelGuard(Option<Level>);

impl LevelGuard {
    fn run<R>(f: impl FnOnce() -> R) -> (R, Option<Level>) {
        let mut guard = LevelGuard(None);
        let out = f();
        guard.0 = LEVELS.with(|l| l.borrow_mut().pop());
        (out, guard.0.take())
    }
}

impl Drop for LevelGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            LEVELS.with(|l| l.borrow_mut().pop());
        }
    }
}
