//! The random draws of a checkpointed function, so that running it again in backward draws
//! the same ones (PyTorch's `preserve_rng_state`): while a recording is open, the layers'
//! streams report where each draw came from; while a replay is open, they take those places
//! back in order instead of moving on. The default generator is set back to where it stood
//! for the replay, and returned to where it is after it; so is the thread's last
//! `manual_seed` (one called inside the function restarts no stream when it runs again).

use std::cell::RefCell;
use std::collections::VecDeque;

use rand::rngs::StdRng;

use super::create::{
    default_draws, default_rng_state, seed_era, set_default_rng_state, set_seed_era,
};

/// Where a stream's draw came from: its seed and its position.
pub type Draw = (u64, u64);

/// A draw and the stream it came from (its identity: a `manual_seed` between the run and its
/// replay may have given the stream another seed since).
type Taken = (u64, Draw);

/// What one checkpointed run drew: the streams' draws in order, and the default generator
/// and the thread's last `manual_seed` as they stood before.
pub struct Draws {
    streams: Vec<Taken>,
    default: Option<StdRng>,
    seed_era: (u64, u64),
    /// This thread's count of default-generator draws before the run.
    default_draws: u64,
}

enum Level {
    Recording(Vec<Taken>),
    Replaying(VecDeque<Taken>),
}

thread_local! {
    /// Open recordings and replays, innermost last (a checkpoint inside a checkpoint).
    static LEVELS: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
}

/// Whether a replay is open on this thread (a stream then neither moves nor starts again).
pub fn replaying() -> bool {
    LEVELS.with(|levels| {
        levels
            .borrow()
            .iter()
            .any(|l| matches!(l, Level::Replaying(_)))
    })
}

/// The place of the next draw of stream `stream`, given where it stands: its own (`advance`
/// true) unless a replay is open, which hands back the recorded one. Every recording inside
/// the innermost replay (or every one, without a replay) notes it.
pub fn stream_draw(stream: u64, here: Draw) -> (Draw, bool) {
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
                let (from, draw) = log.pop_front().unwrap_or_else(|| {
                    panic!("checkpoint: the function drew more random numbers when run again")
                });
                assert!(
                    from == stream,
                    "checkpoint: the function drew from another stream when run again"
                );
                (draw, false)
            }
            None => (here, true),
        };
        for level in &mut levels[replay.map_or(0, |r| r + 1)..] {
            if let Level::Recording(log) = level {
                log.push((stream, draw));
            }
        }
        (draw, advance)
    })
}

impl Draws {
    /// Whether the run drew a random number: from a layer's stream, or from the default
    /// generator on this thread.
    pub fn any(&self) -> bool {
        !self.streams.is_empty() || self.default_draws != default_draws()
    }
}

/// `f()`, and what it drew.
pub fn recorded<R>(f: impl FnOnce() -> R) -> (R, Draws) {
    let (default, seed_era, before) = (default_rng_state(), seed_era(), default_draws());
    let level = LevelGuard::open(Level::Recording(Vec::new()));
    let out = f();
    let Level::Recording(streams) = level.close() else {
        unreachable!("the recording opened above")
    };
    (
        out,
        Draws {
            streams,
            default,
            seed_era,
            default_draws: before,
        },
    )
}

/// `f()` drawing what `draws` recorded, the default generator where it stood then (and
/// where it is now afterwards, also when `f` fails).
pub fn replayed<R>(draws: &Draws, f: impl FnOnce() -> R) -> R {
    let _generator = GeneratorBack(Some((default_rng_state(), seed_era())));
    set_default_rng_state(draws.default.clone());
    set_seed_era(draws.seed_era);
    let level = LevelGuard::open(Level::Replaying(draws.streams.iter().copied().collect()));
    let out = f();
    level.close();
    out
}

/// An open level, closed by [`LevelGuard::close`] or, when `f` fails, by unwinding.
struct LevelGuard {
    open: bool,
}

impl LevelGuard {
    fn open(level: Level) -> LevelGuard {
        LEVELS.with(|l| l.borrow_mut().push(level));
        LevelGuard { open: true }
    }

    fn close(mut self) -> Level {
        self.open = false;
        LEVELS
            .with(|l| l.borrow_mut().pop())
            .expect("the level opened by this guard")
    }
}

impl Drop for LevelGuard {
    fn drop(&mut self) {
        if self.open {
            LEVELS.with(|l| l.borrow_mut().pop());
        }
    }
}

/// Sets the default generator and the thread's last `manual_seed` back to the states it
/// holds when dropped.
struct GeneratorBack(Option<(Option<StdRng>, (u64, u64))>);

impl Drop for GeneratorBack {
    fn drop(&mut self) {
        if let Some((state, era)) = self.0.take() {
            set_default_rng_state(state);
            set_seed_era(era);
        }
    }
}
