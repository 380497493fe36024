//! Fused scaled dot-product attention: `softmax(q kᵀ · scale + mask) v` for many heads at
//! once, as FlashAttention computes it. Each thread takes a block of query rows of one head
//! and walks the keys in blocks: a block's scores and its weighted values are small matrix
//! products (the gemm kernels), and an online softmax (a running maximum and sum per row,
//! which rescale what is accumulated so far when a block raises the maximum) means a thread
//! never holds more than one block of the `[L, S]` scores. The backward recomputes the
//! probabilities block by block instead of storing them.
//!
//! Dropout on the probabilities needs no stored mask either: whether weight `(head, i, j)` is
//! kept is a hash of a key and the weight's position ([`DropPattern`]), which the forward
//! and the backward compute alike wherever the block is.

use ferrograd_derive::isa_dispatch;

use super::gemv::dot_inline as dot;
use super::matmul::{gemm_into, MatRef};
use super::parallel::run_tasks_with;
use super::reduce::{max_lanes, sum_lanes};
use super::Float;

/// Query rows per block: the rows one thread scores together (at most; see [`query_block`]).
const QUERY_BLOCK: usize = 64;
/// Keys per block: a thread holds `QUERY_BLOCK × KEY_BLOCK` scores at a time.
const KEY_BLOCK: usize = 64;

/// One attention problem: `heads` independent heads, each with `l` queries and `s` keys of
/// width `e`, and values of width `ev`.
#[derive(Clone, Copy, Debug)]
pub struct AttentionDims {
    pub heads: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
}

/// An operand of many heads read where it lies: head `h`'s row `r` starts at `starts[h] + r ·
/// rs` in `data`, its elements contiguous. A strided view (the queries of a `[N, T, 3E]`
/// projection, split and transposed to `[N, H, T, E / H]`) is read without a copy, and a
/// broadcast one without repeating it.
pub struct Heads<'a, T> {
    pub data: &'a [T],
    pub starts: Vec<usize>,
    pub rs: usize,
}

impl<'a, T> Heads<'a, T> {
    /// `heads` contiguous `[rows, width]` matrices one after the other.
    #[cfg(test)]
    fn dense(data: &'a [T], heads: usize, rows: usize, width: usize) -> Self {
        Heads {
            data,
            starts: (0..heads).map(|h| h * rows * width).collect(),
            rs: width,
        }
    }

    /// Panics naming `what` unless there are `heads` heads whose `rows` rows of `width`
    /// elements all lie in `data`.
    fn check(&self, what: &str, heads: usize, rows: usize, width: usize) {
        let fits = |&start: &usize| {
            let last = (rows.saturating_sub(1).checked_mul(self.rs))
                .and_then(|r| r.checked_add(start)?.checked_add(width));
            rows == 0 || width == 0 || last.is_some_and(|end| end <= self.data.len())
        };
        assert!(
            self.starts.len() == heads && self.starts.iter().all(fits),
            "attention: {what} does not hold {heads} heads of [{rows}, {width}]"
        );
    }

    /// Rows `first..first + rows` of `head`, `width` wide, as a gemm operand.
    fn rows(&self, head: usize, first: usize, rows: usize, width: usize) -> MatRef<'a, T> {
        MatRef {
            data: self.data,
            offset: self.starts[head] + first * self.rs,
            rows,
            cols: width,
            rs: self.rs,
            cs: 1,
        }
    }

    /// Row `r` of `head`, `width` wide.
    fn row(&self, head: usize, r: usize, width: usize) -> &'a [T] {
        &self.data[self.starts[head] + r * self.rs..][..width]
    }
}

/// The inputs of one forward pass: `q` `[heads, l, e]`, `k` `[heads, s, e]`, `v` `[heads,
/// s, ev]`, and an additive `mask` `[heads, l, s]` (contiguous) if any.
pub struct AttentionInputs<'a, T> {
    pub q: Heads<'a, T>,
    pub k: Heads<'a, T>,
    pub v: Heads<'a, T>,
    pub mask: Option<&'a [T]>,
}

impl<T> AttentionInputs<'_, T> {
    /// Panics unless every operand holds what `d` says.
    fn check(&self, d: AttentionDims) {
        self.q.check("q", d.heads, d.l, d.e);
        self.k.check("k", d.heads, d.s, d.e);
        self.v.check("v", d.heads, d.s, d.ev);
        if let Some(m) = self.mask {
            assert_eq!(m.len(), d.heads * d.l * d.s, "attention: mask size");
        }
    }
}

/// Rows `first..first + rows` of a row-major matrix of width `width`, as a gemm operand.
fn rows_of<T>(data: &[T], first: usize, rows: usize, width: usize) -> MatRef<'_, T> {
    MatRef {
        data,
        offset: first * width,
        rows,
        cols: width,
        rs: width,
        cs: 1,
    }
}

/// Query rows `i0..i0 + qb` of one head against its keys `j0..j0 + kb`.
#[derive(Clone, Copy)]
struct Block {
    head: usize,
    i0: usize,
    qb: usize,
    j0: usize,
    kb: usize,
}

/// Which attention weights dropout keeps: weight `(head, i, j)` is kept when the SplitMix64
/// hash of the key and its position `(head · l + i) · s + j` is at least `threshold` (a
/// fraction `p` of the 2⁶⁴ hashes lies below), and a kept weight is scaled by 1 / (1 − p).
#[derive(Clone, Copy, Debug)]
pub struct DropPattern {
    key: u64,
    threshold: u64,
    keep_scale: f64,
}

impl DropPattern {
    /// Drops with probability `p` in [0, 1], in the pattern `key` fixes.
    pub fn new(p: f64, key: u64) -> DropPattern {
        assert!(
            (0.0..=1.0).contains(&p),
            "attention dropout: p = {p} must be in [0, 1]"
        );
        DropPattern {
            key,
            // The cast saturates: p = 1 drops every weight.
            threshold: (p * 18_446_744_073_709_551_616.0) as u64,
            keep_scale: if p < 1.0 { 1.0 / (1.0 - p) } else { 0.0 },
        }
    }

    /// Whether the weight at flat position `at` is kept.
    #[inline]
    fn keeps(&self, at: u64) -> bool {
        let mut z = self
            .key
            .wrapping_add(at.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) >= self.threshold
    }

    /// Row `i` of `head`'s weights for keys `j0..j0 + row.len()`, dropped and scaled in place.
    fn apply<T: Float>(
        &self,
        d: AttentionDims,
        (head, i, j0): (usize, usize, usize),
        row: &mut [T],
    ) {
        let first = ((head * d.l + i) * d.s + j0) as u64;
        let scale = T::from_f64(self.keep_scale);
        for (j, v) in (first..).zip(row.iter_mut()) {
            *v = if self.keeps(j) { *v * scale } else { T::zero() };
        }
    }

    /// Ones `[heads, l, s]` in `out` made the pattern's factors: 1 / (1 − p) where a weight
    /// is kept, 0 where it is dropped (for the derivative written with tensor ops).
    pub fn factors_into<T: Float>(&self, d: AttentionDims, out: &mut [T]) {
        assert_eq!(
            out.len(),
            d.heads * d.l * d.s,
            "attention dropout: factors size"
        );
        for (r, row) in out.chunks_exact_mut(d.s.max(1)).enumerate() {
            self.apply(d, (r / d.l.max(1), r % d.l.max(1), 0), row);
        }
    }
}

/// How the scores are made and the weights used: the scale on `q kᵀ`, causal masking, and
/// dropout on the weights.
#[derive(Clone, Copy, Debug)]
pub struct Settings<T> {
    pub scale: T,
    pub causal: bool,
    pub dropout: Option<DropPattern>,
}

impl<T: Float> Settings<T> {
    /// A block of `qb × kb` values, one per weight (the weights themselves, normalised or
    /// not, or their gradients `dP`), times the weights' dropout factors.
    fn drop_weights(&self, d: AttentionDims, at: Block, p: &mut [T]) {
        if let Some(pattern) = &self.dropout {
            for (r, row) in p.chunks_exact_mut(at.kb).enumerate() {
                pattern.apply(d, (at.head, at.i0 + r, at.j0), row);
            }
        }
    }
}

/// The block's scores `q kᵀ · scale + mask` into `scores` (`qb × kb`, row-major), −∞ where
/// `causal` hides a key from a row (row `i` sees keys `0..=i`).
#[inline(always)]
fn block_scores<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    at: Block,
    Settings { scale, causal, .. }: Settings<T>,
    scores: &mut [T],
) {
    let q = x.q.rows(at.head, at.i0, at.qb, d.e);
    let k = x.k.rows(at.head, at.j0, at.kb, d.e).t();
    gemm_into(q, k, scores);
    for (r, row) in scores.chunks_exact_mut(at.kb).enumerate() {
        let i = at.i0 + r;
        match x.mask {
            Some(m) => {
                let m = &m[(at.head * d.l + i) * d.s + at.j0..][..at.kb];
                row.iter_mut()
                    .zip(m)
                    .for_each(|(v, &m)| *v = *v * scale + m);
            }
            None => row.iter_mut().for_each(|v| *v = *v * scale),
        }
        if causal {
            let seen = (i + 1).saturating_sub(at.j0).min(at.kb);
            row[seen..].fill(T::neg_infinity());
        }
    }
}

/// Query rows per block for `d`. Every row of a block scores the keys its last row sees, so
/// under a causal mask the block on the diagonal scores up to twice what its rows use: with a
/// short sequence that block is most of the work, and half blocks skip a quarter of it
/// (measured: a GPT's 64 positions, 4 heads of 32, forward and backward 7–10% faster; at 128
/// positions 2–4% faster; at 256 full blocks are 5% faster, and at 512 10–14%).
fn query_block(d: AttentionDims, causal: bool) -> usize {
    if causal && d.l <= 2 * KEY_BLOCK {
        QUERY_BLOCK / 2
    } else {
        QUERY_BLOCK
    }
}

/// The keys the rows `i0..i0 + qb` see, together: all `s`, or with `causal` up to the last
/// row's.
fn keys_seen(d: AttentionDims, i0: usize, qb: usize, causal: bool) -> usize {
    if causal {
        d.s.min(i0 + qb)
    } else {
        d.s
    }
}

/// The blocks of keys `0..end` for query rows `i0..i0 + qb` of `head`.
fn key_blocks(head: usize, (i0, qb): (usize, usize), end: usize) -> impl Iterator<Item = Block> {
    (0..end).step_by(KEY_BLOCK).map(move |j0| Block {
        head,
        i0,
        qb,
        j0,
        kb: KEY_BLOCK.min(end - j0),
    })
}

/// Folds one row of a block's scores into the row's running maximum and sum: the row becomes
/// e^(score − max). Returns the factor by which what earlier blocks accumulated shrinks (the
/// maximum rose; 1 when it did not). A row whose every key in the block is hidden adds
/// nothing and is left as zeros; one hidden from every key ends with a sum of 0. A NaN
/// score makes the sum NaN, also where every other key is hidden (the maximum passes over
/// NaN), so that NaN is never taken for a hidden row.
#[inline(always)]
fn fold_row<T: Float>(row: &mut [T], max: &mut T, sum: &mut T) -> T {
    let block_max = max_lanes(row);
    if block_max == T::neg_infinity() {
        if row.iter().any(|v| v.is_nan()) {
            *sum = T::nan();
        }
        row.fill(T::zero());
        return T::one();
    }
    let mut shrink = T::one();
    if block_max > *max {
        shrink = (*max - block_max).exp(); // 0 at first (max −∞)
        *sum = *sum * shrink;
        *max = block_max;
    }
    let m = *max;
    row.iter_mut().for_each(|v| *v = *v - m);
    T::exp_in_place(row);
    *sum += sum_lanes(row);
    shrink
}

/// 1 / a row's sum of exponentials, or 0 for a row hidden from every key (sum 0): its
/// weights are all 0, so its output is 0 and no gradient flows through it, as PyTorch's
/// attention has it (a softmax would give 0/0).
#[inline(always)]
fn normaliser<T: Float>(total: T) -> T {
    if total == T::zero() {
        T::zero()
    } else {
        T::one() / total
    }
}

/// Writes `out` `[heads, l, ev]`. With `causal`, query `i` sees keys `0..=i` (PyTorch's
/// top-left `is_causal`). A row whose every score is −∞ (hidden from every key) is 0, as
/// PyTorch's is, and so is every row when there are no keys at all (`s` = 0). With dropout,
/// each row's normalised weights are dropped and scaled before they weigh the values.
pub fn attention_forward<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    settings: Settings<T>,
    out: &mut [T],
) {
    x.check(d);
    assert_eq!(out.len(), d.heads * d.l * d.ev, "attention: output size");
    if d.heads * d.l * d.ev == 0 {
        return; // nothing to write
    }
    let rows = query_block(d, settings.causal);
    let blocks: Vec<(usize, usize, &mut [T])> = out
        .chunks_mut(d.l * d.ev)
        .enumerate()
        .flat_map(|(head, o)| {
            o.chunks_mut(rows * d.ev)
                .enumerate()
                .map(move |(b, o)| (head, b * rows, o))
        })
        .collect();
    run_tasks_with(blocks, |w: &mut Scratch<T>, (head, i0, o)| {
        attend_block(x, d, settings, (head, i0), o, w.fit(d))
    });
}

/// A task's working memory: one block of scores and one of their derivatives, a product
/// block, and per-row statistics. The tasks of one call reuse each other's (every use writes
/// before it reads), so a block's buffers are not allocated and zeroed again.
#[derive(Default)]
struct Scratch<T> {
    scores: Vec<T>,
    grads: Vec<T>,
    product: Vec<T>,
    max: Vec<T>,
    sum: Vec<T>,
}

impl<T: Float> Scratch<T> {
    /// The buffers, at least as long as the blocks of `d` need.
    fn fit(&mut self, d: AttentionDims) -> &mut Self {
        let width = d.e.max(d.ev);
        let grow = |v: &mut Vec<T>, len: usize| {
            if v.len() < len {
                v.resize(len, T::zero());
            }
        };
        grow(&mut self.scores, QUERY_BLOCK * KEY_BLOCK);
        grow(&mut self.grads, QUERY_BLOCK * KEY_BLOCK);
        grow(&mut self.product, QUERY_BLOCK.max(KEY_BLOCK) * width);
        grow(&mut self.max, QUERY_BLOCK);
        grow(&mut self.sum, QUERY_BLOCK);
        self
    }
}

/// Query rows `i0..` of `head` (as many as `out`, `[qb, ev]`, holds), through every block of
/// the keys they see.
#[isa_dispatch]
fn attend_block<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    settings: Settings<T>,
    (head, i0): (usize, usize),
    out: &mut [T],
    w: &mut Scratch<T>,
) {
    let qb = out.len() / d.ev;
    let end = keys_seen(d, i0, qb, settings.causal);
    if end <= KEY_BLOCK {
        return attend_one_block(x, d, settings, (head, i0), out, w);
    }
    out.fill(T::zero());
    let (max, sum) = (&mut w.max[..qb], &mut w.sum[..qb]);
    max.fill(T::neg_infinity());
    sum.fill(T::zero());
    for at in key_blocks(head, (i0, qb), end) {
        let kb = at.kb;
        let scores = &mut w.scores[..qb * kb];
        block_scores(x, d, at, settings, scores);
        for (r, row) in scores.chunks_exact_mut(kb).enumerate() {
            let shrink = fold_row(row, &mut max[r], &mut sum[r]);
            if shrink != T::one() {
                // What the earlier blocks accumulated, rescaled to the new maximum.
                out[r * d.ev..][..d.ev]
                    .iter_mut()
                    .for_each(|o| *o = *o * shrink);
            }
        }
        // Dropping an unnormalised weight drops the normalised one: the row's sum keeps it.
        settings.drop_weights(d, at, scores);
        let weighted = &mut w.product[..qb * d.ev];
        let v = x.v.rows(head, at.j0, kb, d.ev);
        gemm_into(rows_of(scores, 0, qb, kb), v, weighted);
        out.iter_mut()
            .zip(weighted.iter())
            .for_each(|(o, &p)| *o += p);
    }
    // (No key at all leaves every sum 0: the empty sum is 0, as `[L, 0] @ [0, Ev]` is.)
    for (o, &total) in out.chunks_exact_mut(d.ev).zip(sum.iter()) {
        let inv = normaliser(total);
        o.iter_mut().for_each(|o| *o = *o * inv);
    }
}

/// [`attend_block`] for rows that see one block of keys or fewer (every row of a short
/// sequence): the weighted sum is written by one product, with no running maximum to rescale
/// it by (the same values as the general form, which starts from zero and adds that product).
#[inline(always)]
fn attend_one_block<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    settings: Settings<T>,
    (head, i0): (usize, usize),
    out: &mut [T],
    w: &mut Scratch<T>,
) {
    let qb = out.len() / d.ev;
    let at = Block {
        head,
        i0,
        qb,
        j0: 0,
        kb: keys_seen(d, i0, qb, settings.causal),
    };
    if at.kb == 0 {
        // No key at all: the empty sum is 0, as `[L, 0] @ [0, Ev]` is.
        out.fill(T::zero());
        return;
    }
    let (scores, sum) = (&mut w.scores[..qb * at.kb], &mut w.sum[..qb]);
    block_scores(x, d, at, settings, scores);
    for (row, total) in scores.chunks_exact_mut(at.kb).zip(sum.iter_mut()) {
        *total = T::zero();
        fold_row(row, &mut T::neg_infinity(), total);
    }
    settings.drop_weights(d, at, scores);
    let v = x.v.rows(head, 0, at.kb, d.ev);
    gemm_into(rows_of(scores, 0, qb, at.kb), v, out);
    for (o, &total) in out.chunks_exact_mut(d.ev).zip(sum.iter()) {
        let inv = normaliser(total);
        o.iter_mut().for_each(|o| *o = *o * inv);
    }
}

/// Where [`attention_backward`] writes: `dq` `[heads, l, e]`, `dk` `[heads, s, e]`, `dv`
/// `[heads, s, ev]` (every element written), and `dmask` `[heads, l, s]` when the mask's
/// gradient is wanted (zeroed by the caller: entries of hidden weights are not written).
pub struct AttentionGrads<'a, T> {
    pub dq: &'a mut [T],
    pub dk: &'a mut [T],
    pub dv: &'a mut [T],
    pub dmask: Option<&'a mut [T]>,
}

/// The gradients of [`attention_forward`]'s inputs for the output gradient `up` `[heads, l,
/// ev]`, given that forward's output `out`. With `P = softmax(S)` recomputed block by block
/// and `D` the dropout factors (1 without dropout): `dv = (P ⊙ D)ᵀ up`, `dP = (up vᵀ) ⊙ D`,
/// `dS = P ⊙ (dP − rowsum(up ⊙ out))` (the row sum equals `rowsum(dP ⊙ P)`),
/// `dq = dS k · scale`, `dk = dSᵀ q · scale`, `dmask = dS`. Heads run in parallel; each is
/// one thread's, so no two threads write the same gradient.
pub fn attention_backward<T: Float>(
    x: &AttentionInputs<'_, T>,
    (out, up): (&Heads<'_, T>, &Heads<'_, T>),
    d: AttentionDims,
    settings: Settings<T>,
    g: AttentionGrads<'_, T>,
) {
    assert!(
        d.l * d.s * d.e * d.ev > 0,
        "attention backward: empty axes take the general path"
    );
    x.check(d);
    up.check("the output gradient", d.heads, d.l, d.ev);
    out.check("the output", d.heads, d.l, d.ev);
    assert_eq!(g.dq.len(), d.heads * d.l * d.e, "attention: dq size");
    assert_eq!(g.dk.len(), d.heads * d.s * d.e, "attention: dk size");
    assert_eq!(g.dv.len(), d.heads * d.s * d.ev, "attention: dv size");
    let dmask: Vec<Option<&mut [T]>> = match g.dmask {
        Some(m) => {
            assert_eq!(m.len(), d.heads * d.l * d.s, "attention: dmask size");
            m.chunks_mut(d.l * d.s).map(Some).collect()
        }
        None => (0..d.heads).map(|_| None).collect(),
    };
    let heads: Vec<_> =
        g.dq.chunks_mut(d.l * d.e)
            .zip(g.dk.chunks_mut(d.s * d.e))
            .zip(g.dv.chunks_mut(d.s * d.ev))
            .zip(dmask)
            .enumerate()
            .collect();
    let rows = query_block(d, settings.causal);
    run_tasks_with(heads, |w: &mut Scratch<T>, (head, (((dq, dk), dv), dm))| {
        let mut grads = AttentionGrads {
            dq,
            dk,
            dv,
            dmask: dm,
        };
        let w = w.fit(d);
        // The last block of rows first: it sees every key that any row sees, so its share of
        // each `dk`, `dv` row is the first (written, not added), and a key no row sees gets
        // zeros here.
        let seen = keys_seen(d, 0, d.l, settings.causal);
        grads.dk[seen * d.e..].fill(T::zero());
        grads.dv[seen * d.ev..].fill(T::zero());
        let starts: Vec<usize> = (0..d.l).step_by(rows).collect();
        for (n, &i0) in starts.iter().rev().enumerate() {
            let at = (head, i0, rows.min(d.l - i0));
            backward_block(x, (out, up), d, settings, (at, n == 0), &mut grads, w);
        }
    });
}

/// Each of the rows' largest score (`w.max`) and sum of exponentials relative to it
/// (`w.sum`) over the keys `0..end`, block by block. With one block, `w.scores` is left
/// holding the exponentials (zeros in a row that sees no key).
#[inline(always)]
fn row_statistics<T: Float>(
    x: &AttentionInputs<'_, T>,
    d: AttentionDims,
    settings: Settings<T>,
    (head, i0, qb): (usize, usize, usize),
    end: usize,
    w: &mut Scratch<T>,
) {
    let (max, sum) = (&mut w.max[..qb], &mut w.sum[..qb]);
    max.fill(T::neg_infinity());
    sum.fill(T::zero());
    for at in key_blocks(head, (i0, qb), end) {
        let scores = &mut w.scores[..qb * at.kb];
        block_scores(x, d, at, settings, scores);
        for (r, row) in scores.chunks_exact_mut(at.kb).enumerate() {
            fold_row(row, &mut max[r], &mut sum[r]);
        }
    }
}

/// `acc = a @ b` when `first`, else `acc += a @ b` (through `scratch`, as long as `acc`).
#[inline(always)]
fn product_into<T: Float>(
    (a, b): (MatRef<'_, T>, MatRef<'_, T>),
    acc: &mut [T],
    first: bool,
    scratch: &mut [T],
) {
    if first {
        gemm_into(a, b, acc);
    } else {
        gemm_into(a, b, scratch);
        acc.iter_mut().zip(&*scratch).for_each(|(a, &b)| *a += b);
    }
}

/// The gradients from query rows `i0..i0 + qb` of `head`: their `dq` rows, and their share of
/// the `dk`, `dv` rows (and `dmask` entries) of every key they see, written when `first`
/// (these rows are the first to reach those keys) and added otherwise. `g` holds this head's
/// gradients.
#[isa_dispatch]
fn backward_block<T: Float>(
    x: &AttentionInputs<'_, T>,
    (out, up): (&Heads<'_, T>, &Heads<'_, T>),
    d: AttentionDims,
    settings: Settings<T>,
    ((head, i0, qb), first): ((usize, usize, usize), bool),
    g: &mut AttentionGrads<'_, T>,
    w: &mut Scratch<T>,
) {
    let end = keys_seen(d, i0, qb, settings.causal);
    let single = end <= KEY_BLOCK;
    row_statistics(x, d, settings, (head, i0, qb), end, w);
    // rowsum(dP ⊙ P) = rowsum(up ⊙ out): one dot product per row, from the forward's output.
    let delta: Vec<T> = (i0..i0 + qb)
        .map(|r| dot(up.row(head, r, d.ev), out.row(head, r, d.ev)))
        .collect();
    let (u, q) = (up.rows(head, i0, qb, d.ev), x.q.rows(head, i0, qb, d.e));
    let Scratch {
        scores,
        grads,
        product,
        max,
        sum,
    } = w;
    for at in key_blocks(head, (i0, qb), end) {
        let (j0, kb) = (at.j0, at.kb);
        let p = &mut scores[..qb * kb];
        if !single {
            block_scores(x, d, at, settings, p);
            for (row, &m) in p.chunks_exact_mut(kb).zip(max.iter()) {
                row.iter_mut().for_each(|v| *v = *v - m);
                T::exp_in_place(row);
            }
        }
        // A row hidden from every key (max −∞: NaN above) gets weights 0.
        for (row, &total) in p.chunks_exact_mut(kb).zip(sum.iter()) {
            let inv = normaliser(total);
            if inv == T::zero() {
                row.fill(T::zero());
            } else {
                row.iter_mut().for_each(|v| *v = *v * inv);
            }
        }
        let (k, v) = (x.k.rows(head, j0, kb, d.e), x.v.rows(head, j0, kb, d.ev));
        let ds = &mut grads[..qb * kb];
        gemm_into(u, v.t(), ds); // dP, before the dropout factors
        settings.drop_weights(d, at, ds);
        for ((row, pr), &dl) in ds.chunks_exact_mut(kb).zip(p.chunks_exact(kb)).zip(&delta) {
            row.iter_mut()
                .zip(pr)
                .for_each(|(g, &p)| *g = p * (*g - dl));
        }
        settings.drop_weights(d, at, p); // the weights the values saw
        if let Some(dm) = g.dmask.as_deref_mut() {
            for (r, row) in ds.chunks_exact(kb).enumerate() {
                dm[(i0 + r) * d.s + j0..][..kb].copy_from_slice(row);
            }
        }
        let dv = &mut g.dv[j0 * d.ev..][..kb * d.ev];
        let pt = rows_of(p, 0, qb, kb).t();
        product_into((pt, u), dv, first, &mut product[..kb * d.ev]);
        ds.iter_mut().for_each(|v| *v = *v * settings.scale);
        let dq = &mut g.dq[i0 * d.e..][..qb * d.e];
        let ds_rows = rows_of(ds, 0, qb, kb);
        product_into((ds_rows, k), dq, j0 == 0, &mut product[..qb * d.e]);
        let dk = &mut g.dk[j0 * d.e..][..kb * d.e];
        product_into((ds_rows.t(), q), dk, first, &mut product[..kb * d.e]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written out: scores, a softmax per row, a weighted sum of values.
    fn direct(
        x: &AttentionInputs<'_, f64>,
        d: AttentionDims,
        scale: f64,
        causal: bool,
    ) -> Vec<f64> {
        let mut out = vec![0.0; d.heads * d.l * d.ev];
        for h in 0..d.heads {
            for i in 0..d.l {
                let s: Vec<f64> = (0..d.s)
                    .map(|j| {
                        let qk: f64 = (0..d.e)
                            .map(|c| {
                                x.q.data[(h * d.l + i) * d.e + c]
                                    * x.k.data[(h * d.s + j) * d.e + c]
                            })
                            .sum();
                        let m = x.mask.map_or(0.0, |m| m[(h * d.l + i) * d.s + j]);
                        if causal && j > i {
                            f64::NEG_INFINITY
                        } else {
                            qk * scale + m
                        }
                    })
                    .collect();
                let top = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|v| (v - top).exp()).collect();
                let total: f64 = p.iter().sum();
                for c in 0..d.ev {
                    out[(h * d.l + i) * d.ev + c] = (0..d.s)
                        .map(|j| p[j] / total * x.v.data[(h * d.s + j) * d.ev + c])
                        .sum();
                }
            }
        }
        out
    }

    #[test]
    fn operands_must_hold_their_heads() {
        let data = [0.0f64; 20];
        let fits = Heads {
            data: &data,
            starts: vec![0, 12],
            rs: 4,
        };
        fits.check("q", 2, 2, 4); // the last row ends at 12 + 4 + 4 = 20
        let short = Heads { rs: 5, ..fits };
        let e = std::panic::catch_unwind(|| short.check("q", 2, 2, 4)).unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert_eq!(msg, "attention: q does not hold 2 heads of [2, 4]");
        let few = Heads::dense(&data, 1, 2, 4);
        assert!(std::panic::catch_unwind(|| few.check("k", 2, 2, 4)).is_err());
        Heads::dense(&data, 0, 0, 4).check("v", 0, 0, 4);
        let huge = Heads {
            data: &data,
            starts: vec![usize::MAX],
            rs: 1,
        };
        assert!(std::panic::catch_unwind(|| huge.check("v", 1, 2, 1)).is_err());
    }

    #[test]
    fn blocks_of_keys_give_the_softmax_of_the_whole_row() {
        // More keys than a block, a mask with −∞ entries, scores far apart; queries in one
        // block, in half blocks (a short causal sequence) and in full ones.
        let f = |n: usize, a: f64| {
            (0..n)
                .map(|i| (a * i as f64).sin() * 3.0)
                .collect::<Vec<_>>()
        };
        for (l, causal) in [5, 70, 140]
            .into_iter()
            .flat_map(|l| [(l, false), (l, true)])
        {
            let d = AttentionDims {
                heads: 2,
                l,
                s: 150,
                e: 3,
                ev: 4,
            };
            let (q, k, v) = (f(2 * l * 3, 0.7), f(900, 0.3), f(1200, 0.11));
            let mut mask = f(2 * l * 150, 0.05);
            mask[7] = f64::NEG_INFINITY;
            mask[200] = f64::NEG_INFINITY;
            for m in [None, Some(&mask[..])] {
                let x = AttentionInputs {
                    q: Heads::dense(&q, d.heads, d.l, d.e),
                    k: Heads::dense(&k, d.heads, d.s, d.e),
                    v: Heads::dense(&v, d.heads, d.s, d.ev),
                    mask: m,
                };
                let mut out = vec![0.0; 2 * l * 4];
                let settings = Settings {
                    scale: 0.4,
                    causal,
                    dropout: None,
                };
                attention_forward(&x, d, settings, &mut out);
                for (a, b) in out.iter().zip(direct(&x, d, 0.4, causal)) {
                    assert!((a - b).abs() < 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
    }
}
