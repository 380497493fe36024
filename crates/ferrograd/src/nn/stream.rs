//! Random streams of layers that draw during training (Dropout's masks): a seed and a count of
//! draws, which is all it takes to save a stream and resume it exactly.

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::tensor::draws;

/// A layer's source of randomness. Draw `n` uses a generator keyed by the seed and `n` side by
/// side, so streams of different seeds or positions never overlap, and `(seed, draws)` is the
/// whole state. Clones share the stream.
#[derive(Clone, Debug)]
pub struct RngStream(Arc<Mutex<StreamState>>);

/// Where a stream stands: its seed and the number of draws taken so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamState {
    /// The seed the stream was made with.
    pub seed: u64,
    /// Draws taken so far: the next draw is number `draws`.
    pub draws: u64,
}

impl RngStream {
    /// A stream at its start (no draws yet) for `seed`.
    pub fn new(seed: u64) -> RngStream {
        RngStream(Arc::new(Mutex::new(StreamState { seed, draws: 0 })))
    }

    /// The generator for the next draw (and the stream moves on by one). Inside a
    /// checkpointed function run again in backward, the draw it made the first time (and the
    /// stream stays where it is).
    pub fn next_rng(&self) -> StdRng {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let ((seed, draws), advance) = draws::stream_draw((s.seed, s.draws));
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&draws.to_le_bytes());
        key[16..].copy_from_slice(b"ferrograd:layer.");
        if advance {
            s.draws += 1;
        }
        StdRng::from_seed(key)
    }

    /// Where the stream stands now, to save it.
    pub fn state(&self) -> StreamState {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the stream (and every clone) to `state`, to resume a saved one.
    pub fn set_state(&self, state: StreamState) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = state;
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
