//! Creating tensors: from data, constants, ranges and seeded random draws.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::{with_any_dtype, with_dtype, DType, Element, Tensor};
use crate::error::{Error, Result};
use crate::kernels::Float;

/// Seed of the default generator before any call to [`manual_seed`], so that runs are
/// reproducible out of the box.
const DEFAULT_SEED: u64 = 0x5eed_f3e0_97ad;

static DEFAULT_RNG: Mutex<Option<StdRng>> = Mutex::new(None);

/// How many times [`manual_seed`] has been called in the process.
static SEED_CALLS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// How many times this thread has drawn from the default generator.
    static DRAWS: Cell<u64> = const { Cell::new(0) };
    /// This thread's last [`manual_seed`]: its number among all the calls, and its seed.
    static LAST_SEED: Cell<(u64, u64)> = const { Cell::new((0, DEFAULT_SEED)) };
}

/// Seeds the generator that layers and initializers use when no RNG is passed explicitly.
/// The random streams of layers made from that generator (`Dropout::new`, attention's
/// dropout) start again too when this thread draws from them next, each from this seed and
/// where it was first drawn, so that `manual_seed(s)` before a forward pass makes its dropout
/// masks reproducible, as PyTorch's does. A stream given its own seed
/// (`Dropout::with_seed`) keeps going, and so do the streams other threads draw from (tests
/// running side by side leave each other's streams alone).
pub fn manual_seed(seed: u64) {
    *DEFAULT_RNG.lock().unwrap_or_else(|e| e.into_inner()) = Some(StdRng::seed_from_u64(seed));
    let call = SEED_CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    LAST_SEED.with(|last| last.set((call, seed)));
}

/// This thread's last [`manual_seed`] (its number among all the calls, 0 for none) and seed.
pub(crate) fn seed_era() -> (u64, u64) {
    LAST_SEED.with(Cell::get)
}

/// Sets what [`seed_era`] gives (a checkpoint's replay puts it back).
pub(crate) fn set_seed_era(era: (u64, u64)) {
    LAST_SEED.with(|last| last.set(era));
}

/// The number of the latest [`manual_seed`] call on any thread: a stream made or restored
/// now follows it, so only a later call starts it again.
pub(crate) fn seed_calls() -> u64 {
    SEED_CALLS.load(Ordering::Relaxed)
}

/// How many times this thread has drawn from the default generator (other threads' draws
/// move the generator too, but not this count).
pub(crate) fn default_draws() -> u64 {
    DRAWS.with(Cell::get)
}

/// The default generator as it stands (None before its first use), to set it back later.
pub(crate) fn default_rng_state() -> Option<StdRng> {
    DEFAULT_RNG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Sets the default generator to a state [`default_rng_state`] gave.
pub(crate) fn set_default_rng_state(state: Option<StdRng>) {
    *DEFAULT_RNG.lock().unwrap_or_else(|e| e.into_inner()) = state;
}

/// Runs `f` with the default generator (seeded by [`manual_seed`]).
pub fn with_default_rng<R>(f: impl FnOnce(&mut StdRng) -> R) -> R {
    DRAWS.with(|d| d.set(d.get() + 1));
    let mut guard = DEFAULT_RNG.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(|| StdRng::seed_from_u64(DEFAULT_SEED)))
}

impl Tensor {
    /// A tensor of `shape` holding `data` in row-major order. Panics when the lengths differ.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Tensor {
        Tensor::try_from_vec(data, shape).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::from_vec`] that returns an error instead of panicking.
    pub fn try_from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let numel = super::checked_numel(shape).ok_or_else(|| {
            Error::Shape(format!(
                "from_vec: shape {shape:?} has more elements than fit in memory"
            ))
        })?;
        if data.len() != numel {
            return Err(Error::Shape(format!(
                "from_vec: {} elements cannot fill shape {:?} ({} elements)",
                data.len(),
                shape,
                numel
            )));
        }
        Ok(Tensor::from_data(data, shape))
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_data(vec![value], &[])
    }

    /// `value` everywhere (cast as [`Element::cast_from_f64`] says for an integer dtype).
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        let n = super::numel_or_panic("full", shape);
        if n == 1 {
            let storage = with_any_dtype!(dtype, T => T::inline(T::cast_from_f64(value)));
            return Tensor::from_parts(storage, super::Layout::contiguous(shape), None);
        }
        with_any_dtype!(dtype, T => {
            let data: Vec<T> = super::filled("full", n, T::cast_from_f64(value));
            Tensor::from_data(data, shape)
        })
    }

    /// Zeros of `shape` and `dtype`, untracked.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 0.0, dtype)
    }

    /// Ones of `shape` and `dtype`, untracked.
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1.0, dtype)
    }

    /// Zeros of this tensor's shape and dtype.
    pub fn zeros_like(&self) -> Tensor {
        Tensor::zeros(self.shape(), self.dtype())
    }

    /// Ones of this tensor's shape and dtype.
    pub fn ones_like(&self) -> Tensor {
        Tensor::ones(self.shape(), self.dtype())
    }

    /// `steps` evenly spaced values from `start` to `end`, both included (numpy's and
    /// PyTorch's `linspace`).
    pub fn linspace(start: f64, end: f64, steps: usize, dtype: DType) -> Tensor {
        assert!(
            (end - start).is_finite(),
            "linspace: bounds {start} and {end} must be finite, as their difference"
        );
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        with_any_dtype!(dtype, T => {
            let mut data: Vec<T> = super::filled("linspace", steps, T::ZERO);
            for (i, d) in data.iter_mut().enumerate() {
                // The last of several values is `end` exactly; a single one is `start`.
                let v = if i > 0 && i + 1 == steps { end } else { start + i as f64 * step };
                *d = T::cast_from_f64(v);
            }
            Tensor::from_data(data, &[steps])
        })
    }

    /// `start, start + step, ...` up to but excluding `end`, as a 1-d tensor (`DType::I64`
    /// gives indices, as PyTorch's integer `arange`).
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Tensor {
        assert!(
            start.is_finite() && end.is_finite() && step.is_finite() && step != 0.0,
            "arange: {start}..{end} by {step} needs finite bounds and a finite, non-zero step"
        );
        let count = ((end - start) / step).ceil().max(0.0);
        assert!(
            count.is_finite() && count < (isize::MAX as usize / 8) as f64,
            "arange: {start}..{end} by {step} is not a finite range that fits in memory"
        );
        let n = count as usize;
        with_any_dtype!(dtype, T => {
            let mut data: Vec<T> = super::filled("arange", n, T::ZERO);
            for (i, d) in data.iter_mut().enumerate() {
                *d = T::cast_from_f64(start + i as f64 * step);
            }
            Tensor::from_data(data, &[n])
        })
    }

    /// Standard normal draws from `rng`: the same seed gives the same tensor.
    pub fn randn(shape: &[usize], dtype: DType, rng: &mut impl Rng) -> Tensor {
        let n = super::numel_or_panic("randn", shape);
        with_dtype!(dtype, T => {
            let mut data: Vec<T> = super::filled("randn", n, T::ZERO);
            data.iter_mut().for_each(|v| *v = T::from_f64(StandardNormal.sample(rng)));
            Tensor::from_data(data, shape)
        })
    }

    /// Standard normal draws from the default generator (seeded by [`manual_seed`]), for
    /// code that does not carry a generator of its own (PyTorch's `torch.randn`).
    pub fn randn_default(shape: &[usize], dtype: DType) -> Tensor {
        with_default_rng(|rng| Tensor::randn(shape, dtype, rng))
    }

    /// Uniform draws in `[low, high)` from the default generator (PyTorch's `torch.rand`
    /// scaled).
    pub fn rand_uniform_default(shape: &[usize], low: f64, high: f64, dtype: DType) -> Tensor {
        with_default_rng(|rng| Tensor::rand_uniform(shape, low, high, dtype, rng))
    }

    /// Uniform draws in `[low, high)` from `rng`.
    pub fn rand_uniform(
        shape: &[usize],
        low: f64,
        high: f64,
        dtype: DType,
        rng: &mut impl Rng,
    ) -> Tensor {
        assert!(
            low < high,
            "rand_uniform: low {low} must be below high {high}"
        );
        let n = super::numel_or_panic("rand_uniform", shape);
        with_dtype!(dtype, T => {
            let mut data: Vec<T> = super::filled("rand_uniform", n, T::ZERO);
            data.iter_mut().for_each(|v| *v = T::from_f64(rng.gen_range(low..high)));
            Tensor::from_data(data, shape)
        })
    }
}
