//! Random streams of layers that draw during training (Dropout's masks): a seed and a count of
//! draws, which is all it takes to save a stream and resume it exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::tensor::{create, draws};

/// A layer's source of randomness. Draw `n` uses a generator keyed by the seed and `n` side by
/// side, so streams of different seeds or positions never overlap, and `(seed, draws)` is the
/// whole state. Clones share the stream.
#[derive(Clone, Debug)]
pub struct RngStream(Arc<Mutex<Stream>>);

#[derive(Debug)]
struct Stream {
    /// This stream among all made in the process (what a checkpoint's replay checks).
    id: u64,
    state: StreamState,
    /// For a stream seeded from the default generator, the seed it was first given: a
    /// [`manual_seed`](crate::tensor::manual_seed) starts it again from a seed made of the
    /// new one and this.
    origin: Option<u64>,
    /// The number of the latest `manual_seed` call the state follows.
    era: u64,
}

/// Streams made so far, for their ids.
static STREAMS: AtomicU64 = AtomicU64::new(0);

/// Where a stream stands: its seed and the number of draws taken so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamState {
    /// The seed the stream was made with.
    pub seed: u64,
    /// Draws taken so far: the next draw is number `draws`.
    pub draws: u64,
}

/// A generator keyed by `a`, `b` and a tag, side by side.
fn keyed(a: u64, b: u64, tag: &[u8; 16]) -> StdRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&a.to_le_bytes());
    key[8..16].copy_from_slice(&b.to_le_bytes());
    key[16..].copy_from_slice(tag);
    StdRng::from_seed(key)
}

impl Stream {
    /// The state, started again if this thread called `manual_seed` after the call the
    /// state follows.
    fn current(&mut self) -> &mut StreamState {
        let (era, seed) = create::seed_era();
        if era > self.era {
            self.era = era;
            if let Some(origin) = self.origin {
                let restart = keyed(seed, origin, b"ferrograd:reseed").gen();
                self.state = StreamState {
                    seed: restart,
                    draws: 0,
                };
            }
        }
        &mut self.state
    }
}

impl RngStream {
    /// A stream at its start (no draws yet) for `seed`, its own: `manual_seed` leaves it be.
    pub fn new(seed: u64) -> RngStream {
        Self::made(seed, None)
    }

    /// A stream seeded by `seed` drawn from the default generator: `manual_seed` starts it
    /// again, as PyTorch's reseeds every dropout.
    pub(crate) fn from_default_generator(seed: u64) -> RngStream {
        Self::made(seed, Some(seed))
    }

    fn made(seed: u64, origin: Option<u64>) -> RngStream {
        RngStream(Arc::new(Mutex::new(Stream {
            id: STREAMS.fetch_add(1, Ordering::Relaxed),
            state: StreamState { seed, draws: 0 },
            origin,
            era: create::seed_calls(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stream> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The generator for the next draw (and the stream moves on by one). Inside a
    /// checkpointed function run again in backward, the draw it made the first time (and the
    /// stream stays where it is).
    pub fn next_rng(&self) -> StdRng {
        let mut stream = self.lock();
        let id = stream.id;
        // A checkpoint's replay draws what the first run drew, whatever the seed since.
        let s = if draws::replaying() {
            &mut stream.state
        } else {
            stream.current()
        };
        let ((seed, draws), advance) = draws::stream_draw(id, (s.seed, s.draws));
        if advance {
            s.draws += 1;
        }
        keyed(seed, draws, b"ferrograd:layer.")
    }

    /// Where the stream stands now, to save it.
    pub fn state(&self) -> StreamState {
        let mut stream = self.lock();
        if draws::replaying() {
            stream.state
        } else {
            *stream.current()
        }
    }

    /// Moves the stream (and every clone) to `state`, to resume a saved one.
    pub fn set_state(&self, state: StreamState) {
        let mut stream = self.lock();
        stream.era = stream.era.max(create::seed_calls());
        stream.state = state;
    }
}

impl std::fmt::Display for StreamState {
    /// `seed:draws`, the form checkpoints store.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.seed, self.draws)
    }
}

impl std::str::FromStr for StreamState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parse = |part: Option<&str>| part.and_then(|p| p.parse::<u64>().ok());
        let mut parts = s.split(':');
        match (parse(parts.next()), parse(parts.next()), parts.next()) {
            (Some(seed), Some(draws), None) => Ok(StreamState { seed, draws }),
            _ => Err(format!("random stream state {s:?} is not seed:draws")),
        }
    }
}
