//! Backward with the gradient all-reduce overlapped: buckets of parameters, last layers
//! first, each summed over the ranks by a non-blocking all-reduce as soon as backward has
//! produced all of its gradients, while backward goes on with the layers below.
//!
//! Every rank starts the buckets' collectives in the same order (bucket 0 first, a bucket
//! only after the one before it), as MPI requires: a rank whose gradients arrive in another
//! order, or not at all (a parameter its shard does not reach, an empty shard), only starts
//! later, never out of turn.

use mpi::collective::SystemOperation;
use mpi::request::{LocalScope, Request};
use mpi::traits::CommunicatorCollectives;

use super::{bucket_len, ProcessGroup};
use crate::autograd::ids::IdMap;
use crate::autograd::{Gradients, Param};
use crate::tensor::{DType, Element, FloatElement, Tensor};

/// What a gradient's producer calls for each local gradient: the parameter's id and the
/// gradient.
pub(super) type Arrive<'f> = dyn FnMut(u64, &Tensor) + 'f;

/// Where one parameter's gradient sits: its bucket and its range in that bucket's buffers.
struct Place {
    bucket: usize,
    start: usize,
    len: usize,
}

/// Each parameter's first index in `params`, by identity.
fn first_index(params: &[(String, Param)]) -> IdMap<usize> {
    params
        .iter()
        .enumerate()
        .rev()
        .map(|(i, (_, p))| (p.id(), i))
        .collect()
}

/// The buckets of `params` (last parameter first, one dtype per bucket, about
/// [`super::BUCKET_BYTES`] each) and each parameter's place, by index in `params`, given
/// [`first_index`] of them.
fn plan(
    params: &[(String, Param)],
    first: &IdMap<usize>,
) -> (Vec<(DType, usize)>, Vec<Option<Place>>) {
    let mut buckets: Vec<(DType, usize)> = Vec::new();
    let mut places: Vec<Option<Place>> = params.iter().map(|_| None).collect();
    for (i, (_, p)) in params.iter().enumerate().rev() {
        // A parameter listed twice is sent once, from its first place.
        if first.get(&p.id()) != Some(&i) {
            continue;
        }
        let dtype = p.dtype();
        let limit = match dtype {
            DType::F32 => bucket_len::<f32>(),
            DType::F64 => bucket_len::<f64>(),
            DType::I64 => continue,
        };
        let len = p.numel();
        // A parameter larger than a bucket gets one of its own.
        let fits = buckets
            .last()
            .is_some_and(|&(d, used)| d == dtype && used + len <= limit.max(len));
        if !fits {
            buckets.push((dtype, 0));
        }
        let last = buckets.len() - 1;
        let start = buckets[last].1;
        buckets[last].1 += len;
        places[i] = Some(Place {
            bucket: last,
            start,
            len,
        });
    }
    (buckets, places)
}

/// One bucket's send and receive buffers, until its collective starts.
enum Buffers<'a> {
    F32(&'a mut [f32], &'a mut [f32]),
    F64(&'a mut [f64], &'a mut [f64]),
}

/// A started collective.
enum Pending<'a, 's> {
    F32(Request<'a, [f32], &'s LocalScope<'a>>),
    F64(Request<'a, [f64], &'s LocalScope<'a>>),
}

impl Pending<'_, '_> {
    fn wait(self) {
        match self {
            Pending::F32(r) => drop(r.wait()),
            Pending::F64(r) => drop(r.wait()),
        }
    }
}

/// The state the backward hook drives.
struct Overlap<'a, 's, 'g> {
    group: &'g ProcessGroup,
    scope: &'s LocalScope<'a>,
    slots: Vec<Option<Buffers<'a>>>,
    /// Gradients each bucket still waits for.
    missing: Vec<usize>,
    /// The next bucket to start: buckets start in order.
    next: usize,
    pending: Vec<Pending<'a, 's>>,
}

impl<'a, 's> Overlap<'a, 's, '_> {
    /// Writes `share · g` into its place and starts every bucket now complete in turn.
    fn arrive(&mut self, place: &Place, g: &Tensor, share: f64) {
        // A rank with no samples sends zeros, whatever it computed (an empty batch's mean
        // could be NaN, and NaN · 0 is NaN).
        let target = if share == 0.0 {
            None
        } else {
            self.slots[place.bucket].as_mut()
        };
        match target {
            Some(Buffers::F32(send, _)) => write(&mut send[place.start..][..place.len], g, share),
            Some(Buffers::F64(send, _)) => write(&mut send[place.start..][..place.len], g, share),
            None => {}
        }
        self.missing[place.bucket] -= 1;
        self.start_ready(false);
    }

    /// Starts the next buckets whose gradients are all in (all of them when `all`: backward
    /// is over, and what has not arrived stays zero).
    fn start_ready(&mut self, all: bool) {
        while self.next < self.slots.len() && (all || self.missing[self.next] == 0) {
            let world = &self.group.world;
            let op = SystemOperation::sum();
            let started = match self.slots[self.next].take() {
                Some(Buffers::F32(send, recv)) => {
                    let send: &'a [f32] = send;
                    Pending::F32(world.immediate_all_reduce_into(self.scope, send, recv, op))
                }
                Some(Buffers::F64(send, recv)) => {
                    let send: &'a [f64] = send;
                    Pending::F64(world.immediate_all_reduce_into(self.scope, send, recv, op))
                }
                None => unreachable!("each bucket starts once"),
            };
            self.pending.push(started);
            self.next += 1;
        }
    }
}

fn write<T: FloatElement>(out: &mut [T], g: &Tensor, share: f64) {
    assert_eq!(
        g.numel(),
        out.len(),
        "all_reduce_mean: a gradient of {} elements for a parameter of {}",
        g.numel(),
        out.len()
    );
    let s = T::from_f64(share);
    for (o, &v) in out.iter_mut().zip(g.contiguous_data::<T>().iter()) {
        *o = v * s;
    }
}

/// Cuts `flat` (one buffer per dtype, buckets end to end) into per-bucket pairs of slices.
fn split<'a, T>(
    mut send: &'a mut [T],
    mut recv: &'a mut [T],
    lens: impl Iterator<Item = usize>,
) -> Vec<(&'a mut [T], &'a mut [T])> {
    let mut out = Vec::new();
    for len in lens {
        let (s, rest_s) = std::mem::take(&mut send).split_at_mut(len);
        let (r, rest_r) = std::mem::take(&mut recv).split_at_mut(len);
        out.push((s, r));
        send = rest_s;
        recv = rest_r;
    }
    out
}

impl ProcessGroup {
    /// Backward of `loss` (`None` for a rank whose shard of this step is empty) and
    /// [`ProcessGroup::all_reduce_mean`] of the gradients of `params`, overlapped: each bucket
    /// of gradients is summed over the ranks while backward computes the next. The result is
    /// the same as `all_reduce_mean(params, &loss.backward(), samples)`, to rounding.
    ///
    /// Every rank must call this with the same parameters in the same order.
    pub fn backward_all_reduce_mean(
        &self,
        loss: Option<&Tensor>,
        params: &[(String, Param)],
        samples: usize,
    ) -> Gradients {
        if self.size() == 1 {
            return loss.map(Tensor::backward).unwrap_or_default();
        }
        self.reduce_in_buckets(params, samples, &mut |arrive| {
            if let Some(loss) = loss.filter(|_| samples > 0) {
                drop(loss.backward_with_hook(arrive));
            }
        })
    }

    /// For each parameter, whether some rank has a gradient for it (above 0): one small
    /// collective after the buckets.
    fn arrived_anywhere(&self, arrived: &[bool]) -> Vec<f64> {
        let local: Vec<f64> = arrived.iter().map(|&a| f64::from(u8::from(a))).collect();
        let mut any = vec![0.0; local.len()];
        if !local.is_empty() {
            self.world
                .all_reduce_into(&local[..], &mut any[..], SystemOperation::sum());
        }
        any
    }

    /// The mean of the ranks' gradients as [`ProcessGroup::all_reduce_mean`] defines it, in
    /// buckets: `feed` hands each local gradient to `arrive` (parameter id, gradient), from a
    /// backward pass as it runs or from gradients already computed, and each bucket is summed
    /// over the ranks by a non-blocking collective once all of its gradients are in.
    pub(super) fn reduce_in_buckets(
        &self,
        params: &[(String, Param)],
        samples: usize,
        feed: &mut dyn FnMut(&mut Arrive<'_>),
    ) -> Gradients {
        let [total] = self.all_reduce_sum([samples as f64]);
        let share = if total > 0.0 {
            samples as f64 / total
        } else {
            0.0
        };
        let index = first_index(params);
        let (buckets, places) = plan(params, &index);
        let len_of = |dtype: DType| -> usize {
            buckets
                .iter()
                .filter(|(d, _)| *d == dtype)
                .map(|(_, n)| n)
                .sum()
        };
        let (mut send32, mut recv32) = (
            vec![0f32; len_of(DType::F32)],
            vec![0f32; len_of(DType::F32)],
        );
        let (mut send64, mut recv64) = (
            vec![0f64; len_of(DType::F64)],
            vec![0f64; len_of(DType::F64)],
        );
        let mut arrived = vec![false; params.len()];
        // The buffers are cut into buckets outside the scope: the collectives borrow them for
        // as long as the scope lasts.
        let slots = bucket_buffers(&buckets, &mut send32, &mut recv32, &mut send64, &mut recv64);
        mpi::request::scope(|scope| {
            let mut missing = vec![0; buckets.len()];
            for p in places.iter().flatten() {
                missing[p.bucket] += 1;
            }
            let mut state = Overlap {
                group: self,
                scope,
                slots,
                missing,
                next: 0,
                pending: Vec::new(),
            };
            // A panic in backward must not leave collectives in flight (MPI still owns their
            // buffers, and the other ranks wait for them): finish them, then let it go on.
            let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                feed(&mut |id, g| {
                    let Some(&i) = index.get(&id) else { return };
                    if let Some(place) = places[i].as_ref().filter(|_| !arrived[i]) {
                        arrived[i] = true;
                        state.arrive(place, g, share);
                    }
                })
            }));
            state.start_ready(true);
            for p in state.pending.drain(..) {
                p.wait();
            }
            if let Err(panic) = fed {
                std::panic::resume_unwind(panic);
            }
        });
        let any = self.arrived_anywhere(&arrived);
        let starts = bucket_starts(&buckets);
        let mut grads = Gradients::default();
        for (_, p) in params {
            let i = index[&p.id()];
            let Some(place) = places[i].as_ref().filter(|_| any[i] > 0.0) else {
                continue;
            };
            let offset = starts[place.bucket] + place.start;
            let g = match p.dtype() {
                DType::F32 => piece(&recv32[offset..][..place.len], &p.shape()),
                _ => piece(&recv64[offset..][..place.len], &p.shape()),
            };
            grads.insert(p, g);
        }
        grads
    }
}

/// Each bucket's slices of the dtype's send and receive buffers, in bucket order.
fn bucket_buffers<'a>(
    buckets: &[(DType, usize)],
    send32: &'a mut [f32],
    recv32: &'a mut [f32],
    send64: &'a mut [f64],
    recv64: &'a mut [f64],
) -> Vec<Option<Buffers<'a>>> {
    let lens = |dtype: DType| {
        buckets
            .iter()
            .filter(move |(d, _)| *d == dtype)
            .map(|(_, n)| *n)
    };
    let mut parts32 = split(send32, recv32, lens(DType::F32)).into_iter();
    let mut parts64 = split(send64, recv64, lens(DType::F64)).into_iter();
    buckets
        .iter()
        .map(|(dtype, _)| {
            Some(match dtype {
                DType::F32 => {
                    let (s, r) = parts32.next().expect("one part per bucket");
                    Buffers::F32(s, r)
                }
                _ => {
                    let (s, r) = parts64.next().expect("one part per bucket");
                    Buffers::F64(s, r)
                }
            })
        })
        .collect()
}

fn piece<T: Element + Copy>(values: &[T], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape)
}

/// Where each bucket starts in its dtype's buffer.
fn bucket_starts(buckets: &[(DType, usize)]) -> Vec<usize> {
    buckets
        .iter()
        .scan([0usize; 2], |used, &(dtype, n)| {
            let at = &mut used[usize::from(dtype == DType::F64)];
            *at += n;
            Some(*at - n)
        })
        .collect()
}
