//! f32 matrix multiply for x86-64 with AVX-512 or AVX2: a 12×32 tile of C per micro-kernel
//! call (with 4- and 8-row and masked-column variants for the edges of C), threaded over
//! column or row blocks of C. On AVX-512 the tile is one register block (24 zmm
//! accumulators); on AVX2 + FMA it is run as 6×16 register blocks (12 ymm accumulators, what
//! fits 16 registers beside the B row and the broadcast), so the packing, the tables and the
//! threading above the micro-kernel are one driver for both. Either way each element of C is
//! the same chain of fused multiply-adds over k, so the two paths give the same bits. Other
//! machines (and f64) go through `matrixmultiply`.
//!
//! Blocking follows the usual five-loop scheme: a KC×NC block of B is packed into NR-wide
//! panels (kept in L2; on AVX2 each panel's two 16-column vectors lie one after the other,
//! [`PanelLayout`]); the micro-kernel runs one MR-row panel of A (KC×MR, kept in L1: its
//! elements are broadcast) against each B panel in turn (streamed from L2: its rows are the
//! vector loads). A is read in place when it is row- or column-major (packed otherwise, and
//! where its rows would share an L1 set, [`packs_row_major_a`]), and so is a small
//! cache-line-aligned B whose rows lie at most 2 KiB apart.

use std::ops::Range;

use super::isa::Isa;
use super::matmul::{add_row, MatRef};

const MR: usize = 12;
const NR: usize = 32;
const KC: usize = 256;
const MC: usize = 480;

/// Columns of B per packed block on the active path, for the L2 size this CPU reports.
fn nc() -> usize {
    static NC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *NC.get_or_init(|| nc_for(super::isa::l2_bytes(), Isa::active()))
}

/// Columns of B per packed block: the KC × NC block of B stays in L2 while every A micro-panel
/// of the block sweeps it, and each A micro-panel is read from memory once per block. On
/// AVX2 NC is as large as half of L2 holds (the other half for A and C), between 256 and
/// 1024 columns: on Zen 3 (512 KiB) 256 columns made 1024² 0.85–0.88 of OpenBLAS where 1024
/// made it 0.75, and on an Intel part with 2 MiB 1024 columns gained 2–5% at 2048² on one
/// thread over 256. The AVX-512 path keeps the 1024 it was measured with (on 2 MiB); on Zen 4
/// (1 MiB) 256 and 512 ran within the noise of it, as 256 and 1024 did of AVX2's 512 there.
/// Skylake-SP (1 MiB) is unmeasured.
fn nc_for(l2: Option<usize>, isa: Isa) -> usize {
    match (isa, l2) {
        (Isa::Avx512, _) => 1024,
        (_, Some(l2)) => (l2 / 2 / (KC * size_of::<f32>())).clamp(256, 1024) / NR * NR,
        (_, None) => 256,
    }
}
/// Steps of the k loop between prefetching a B row and using it.
const PREFETCH: usize = 8;

/// Whether the own kernels run: the active path ([`Isa::active`]) is AVX2 or AVX-512.
pub fn available() -> bool {
    Isa::active() >= Isa::Avx2
}

/// Below this many multiply-adds a product runs on the calling thread alone.
const PAR_MIN_MACS: usize = 1 << 20;

/// Largest row-major B (in floats, 1 MiB) read in place instead of packed: it stays in L2.
const DIRECT_B_MAX: usize = 1 << 18;

/// Longest row stride (in floats, 2 KiB) of a B read in place. Rows a page apart put every
/// step of the kernel on another page and every row of a panel in one cache set; on Zen 4 that
/// halved the AVX2 product's speed, whatever B's size, while rows 2 KiB apart ran as fast
/// in place as packed (`docs/performance.md`, "AMD Zen 4, both paths"). Strides between the
/// two are packed, unmeasured.
const DIRECT_B_MAX_STRIDE: usize = 512;

/// Where a micro-kernel finds its MR rows of A.
#[derive(Clone, Copy)]
enum APanel {
    /// Step k's MR values are contiguous, steps the given stride apart: a packed panel
    /// (stride MR), or a column-major A read in place.
    Steps(*const f32, usize),
    /// A row-major A read in place: MR rows, the given stride apart, each contiguous over k.
    Rows(*const f32, usize),
    /// Rows contiguous over k, row `i` at `base + table[i]`: a column matrix of a convolution
    /// read out of the image, each row a run of pixels one kernel tap sees.
    Scattered(*const f32, *const usize),
    /// A scattered panel read over several runs of `run` steps: during run `j`, row `i` is
    /// contiguous from `base + table[i] + starts[j]` (a weight gradient's output rows, read
    /// where they lie in the image, summed in one call instead of one call per row).
    Runs {
        base: *const f32,
        table: *const usize,
        starts: *const usize,
        run: usize,
    },
    /// Step k's MR values contiguous at `base + table[k]`: the transposed column matrix of a
    /// channels-last image, each step the taps one output position sees.
    Gathered(*const f32, *const usize),
}

impl APanel {
    /// The panel of the rows from `r0` on (for a kernel that covers a panel in blocks of
    /// rows).
    #[inline(always)]
    fn skip_rows(self, r0: usize) -> APanel {
        match self {
            APanel::Steps(p, lda) => APanel::Steps(p.wrapping_add(r0), lda),
            APanel::Rows(p, lda) => APanel::Rows(p.wrapping_add(r0 * lda), lda),
            APanel::Scattered(base, table) => APanel::Scattered(base, table.wrapping_add(r0)),
            APanel::Runs {
                base,
                table,
                starts,
                run,
            } => APanel::Runs {
                base,
                table: table.wrapping_add(r0),
                starts,
                run,
            },
            APanel::Gathered(p, table) => APanel::Gathered(p.wrapping_add(r0), table),
        }
    }

    /// Where row `i` of a panel read by rows starts (null for a panel read by steps; for a
    /// panel of runs, the offset of each run's start is still to be added).
    ///
    /// # Safety
    /// A scattered panel's table has an entry `i`.
    #[inline(always)]
    unsafe fn row(self, i: usize) -> *const f32 {
        match self {
            APanel::Steps(..) | APanel::Gathered(..) => std::ptr::null(),
            APanel::Rows(p, lda) => p.wrapping_add(i * lda),
            APanel::Scattered(base, table) | APanel::Runs { base, table, .. } => {
                // SAFETY: the caller's contract.
                base.wrapping_add(unsafe { *table.add(i) })
            }
        }
    }
}

/// Copies rows `i0..i0 + mc`, columns `p0..p0 + kc` of `a` into MR-row panels: panel `r`,
/// step `k` holds `a[i0 + r*MR + 0..MR, p0 + k]`, zero-padded past the last row.
fn pack_a(a: &MatRef<'_, f32>, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [f32]) {
    for (r, panel) in out.chunks_exact_mut(MR * kc).enumerate() {
        let rows = (mc - r * MR).min(MR);
        let base = a.offset + (i0 + r * MR) * a.rs + p0 * a.cs;
        if a.cs == 1 && rows == MR {
            // Row-major A: read MR row runs side by side, write each step's MR values
            // contiguously.
            for i in 0..MR {
                let run = &a.data[base + i * a.rs..][..kc];
                for (dst, &v) in panel.chunks_exact_mut(MR).zip(run) {
                    dst[i] = v;
                }
            }
            continue;
        }
        for (k, dst) in panel.chunks_exact_mut(MR).enumerate() {
            if a.rs == 1 {
                // Column-major A (a transposed view): each step's rows are one contiguous run.
                let run = base + k * a.cs;
                if rows == MR {
                    // A constant length: copied inline, not through a memmove call.
                    dst.copy_from_slice(&a.data[run..run + MR]);
                } else {
                    dst[..rows].copy_from_slice(&a.data[run..run + rows]);
                    dst[rows..].iter_mut().for_each(|v| *v = 0.0);
                }
            } else {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = if i < rows {
                        a.data[base + i * a.rs + k * a.cs]
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// Copies rows `p0..p0 + kc`, columns `j0..j0 + nc` of `b` into NR-column panels: panel `q`,
/// step `k` holds `b[p0 + k, j0 + q*NR + 0..NR]`, zero-padded past the last column, in 16-column
/// vectors placed by `at`.
fn pack_b(
    b: &MatRef<'_, f32>,
    (p0, kc): (usize, usize),
    (j0, nc): (usize, usize),
    out: &mut [f32],
    at: PanelLayout,
) {
    for (q, panel) in out.chunks_exact_mut(NR * kc).enumerate() {
        let cols = (nc - q * NR).min(NR);
        if b.rs == 1 && b.cs != 1 {
            pack_b_transposed(b, (p0, kc), (j0 + q * NR, cols), panel, at);
            continue;
        }
        for k in 0..kc {
            let base = b.offset + (p0 + k) * b.rs + (j0 + q * NR) * b.cs;
            if b.cs == 1 && cols == NR {
                let src: &[f32; NR] = b.data[base..base + NR].try_into().expect("NR floats");
                for (v, part) in src.chunks_exact(16).enumerate() {
                    panel[at.index(k, 16 * v)..][..16].copy_from_slice(part);
                }
                continue;
            }
            for v in 0..NR / 16 {
                let dst = &mut panel[at.index(k, 16 * v)..][..16];
                let (lo, hi) = ((16 * v).min(cols), (16 * v + 16).min(cols));
                let part = &mut dst[..hi - lo];
                if b.cs == 1 {
                    part.copy_from_slice(&b.data[base + lo..base + hi]);
                } else {
                    for (j, d) in part.iter_mut().enumerate() {
                        *d = b.data[base + (lo + j) * b.cs];
                    }
                }
                dst[hi - lo..].iter_mut().for_each(|v| *v = 0.0);
            }
        }
    }
}

/// Where a B panel keeps its 16-column vectors: step `k`'s vector `v` starts `v·vector +
/// k·row` floats in. Read in place, a step's vectors lie side by side along its row of B.
/// Packed, the AVX-512 kernel reads a whole NR-wide step at once, so the steps lie one after
/// another (`row` NR); an AVX2 block reads one vector over every step, so each vector's
/// steps lie together (`row` 16, `vector` 16·kc) and a block sweeps one contiguous run,
/// spread over every L1 set. Steps NR floats apart put the run a block reads in every other
/// set only, where it crowded out the A panel and was read twice from L2
/// (`docs/performance.md`, "AMD Zen 4, both paths").
#[derive(Clone, Copy)]
struct PanelLayout {
    row: usize,
    vector: usize,
}

impl PanelLayout {
    /// Steps `row` floats apart, each holding its vectors side by side.
    fn rows(row: usize) -> Self {
        PanelLayout { row, vector: 16 }
    }

    /// A panel of `kc` steps packed for path `isa`.
    fn packed(kc: usize, isa: Isa) -> Self {
        match isa {
            Isa::Avx2 => PanelLayout {
                row: 16,
                vector: 16 * kc,
            },
            _ => Self::rows(NR),
        }
    }

    /// Where step `k`'s column `j` lies in the panel.
    #[inline(always)]
    fn index(self, k: usize, j: usize) -> usize {
        (j / 16) * self.vector + k * self.row + j % 16
    }
}

/// One panel of a column-major B (a transposed view, such as Dense's `weight.t()`): columns
/// `j0..j0 + cols`, rows `p0..p0 + kc`. Blocks of 8 columns × 8 steps are transposed in
/// registers; the ragged edges are copied one by one.
fn pack_b_transposed(
    b: &MatRef<'_, f32>,
    (p0, kc): (usize, usize),
    (j0, cols): (usize, usize),
    panel: &mut [f32],
    at: PanelLayout,
) {
    debug_assert!(available(), "the AVX path runs only where AVX2 was found");
    // The 8×8 blocks' rows must not overlap (the transposes write through raw pointers).
    assert!(
        at.row >= 8,
        "pack_b_transposed: steps {} floats apart",
        at.row
    );
    let column = |j: usize| &b.data[b.offset + p0 + (j0 + j) * b.cs..][..kc];
    let (full_k, full_j) = (kc - kc % 8, cols - cols % 8);
    for jb in (0..full_j).step_by(8) {
        let cols8: [&[f32]; 8] = std::array::from_fn(|i| column(jb + i));
        for k0 in (0..full_k).step_by(8) {
            let src: [&[f32; 8]; 8] =
                std::array::from_fn(|i| cols8[i][k0..k0 + 8].try_into().expect("8 values"));
            let dst = panel[at.index(k0, jb)..][..7 * at.row + 8].as_mut_ptr();
            let rows = std::array::from_fn(|k| dst.wrapping_add(k * at.row));
            // SAFETY: this kernel runs only where `available()` found AVX2, which implies
            // AVX; row k's 8 floats lie in the 7·row + 8 of `panel` that `dst` starts (the
            // slice checked them), borrowed mutably, and no two rows overlap (row ≥ 8 apart,
            // asserted above).
            unsafe { transpose_8x8(&src, rows) };
        }
    }
    for k in 0..kc {
        let done = if k < full_k { full_j } else { 0 };
        for j in done..NR {
            panel[at.index(k, j)] = if j < cols { column(j)[k] } else { 0.0 };
        }
    }
}

/// `dst[j·ld_dst + i] = src[i·ld_src + j]` for `i < rows`, `j < cols`: blocks of 8 × 8 in
/// registers (on a CPU with AVX2), the ragged edges one by one. The rows of the result
/// must not overlap: `ld_dst ≥ rows` (panics otherwise).
pub(crate) fn transpose(
    src: &[f32],
    (rows, cols): (usize, usize),
    ld_src: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    assert!(
        cols <= 1 || ld_dst >= rows,
        "transpose: rows of {rows} floats only {ld_dst} apart"
    );
    transpose_to(src, (rows, cols), ld_src, dst, |j| j * ld_dst);
}

/// `dst[row_at(j) + i] = src[i·ld_src + j]` for `i < rows`, `j < cols`: [`transpose`] with
/// each row of the result placed where `row_at` says (the rows of a padded image, say). The
/// rows must not overlap; the AVX path panics where those of a strip of 8 would.
pub(crate) fn transpose_to(
    src: &[f32],
    (rows, cols): (usize, usize),
    ld_src: usize,
    dst: &mut [f32],
    row_at: impl Fn(usize) -> usize,
) {
    let (full_i, full_j) = if available() {
        // SAFETY: `available()` found AVX2, which implies AVX.
        unsafe { transpose_blocks(src, (rows, cols), ld_src, dst, &row_at) }
    } else {
        (0, 0)
    };
    for i in 0..rows {
        let s = &src[i * ld_src..][..cols];
        let done = if i < full_i { full_j } else { 0 };
        for (j, &v) in s.iter().enumerate().skip(done) {
            dst[row_at(j) + i] = v;
        }
    }
}

/// The whole 8 × 8 blocks of [`transpose_to`]; returns the rows and columns they cover.
///
/// # Safety
/// The CPU must support AVX.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx"))]
unsafe fn transpose_blocks(
    src: &[f32],
    (rows, cols): (usize, usize),
    ld_src: usize,
    dst: &mut [f32],
    row_at: &impl Fn(usize) -> usize,
) -> (usize, usize) {
    let (full_i, full_j) = (rows - rows % 8, cols - cols % 8);
    if full_i == 0 {
        return (0, 0);
    }
    let base = dst.as_mut_ptr();
    for j0 in (0..full_j).step_by(8) {
        let at: [usize; 8] = std::array::from_fn(|k| row_at(j0 + k));
        assert_disjoint_rows(at, full_i, dst.len());
        for i0 in (0..full_i).step_by(8) {
            let block: [&[f32; 8]; 8] = std::array::from_fn(|i| {
                src[(i0 + i) * ld_src + j0..][..8]
                    .try_into()
                    .expect("8 values")
            });
            let rows = at.map(|a| base.wrapping_add(a + i0));
            // SAFETY: AVX (the caller's contract); the block's 8 × 8 values are read from
            // slices; the strip's row k is at[k]..at[k] + full_i, inside `dst` (borrowed
            // mutably, `base` its start) and apart from the strip's other rows (asserted), so
            // its 8 floats from i0 + 8 ≤ full_i are too.
            unsafe { transpose_8x8(&block, rows) };
        }
    }
    (full_i, full_j)
}

/// Panics unless the rows `at[k]..at[k] + len` lie inside `len_dst` floats and no two
/// overlap: the rows the blocks of one column strip write.
fn assert_disjoint_rows(mut at: [usize; 8], len: usize, len_dst: usize) {
    at.sort_unstable();
    let inside = at[7].checked_add(len).is_some_and(|end| end <= len_dst);
    let apart = at.windows(2).all(|w| w[1] - w[0] >= len);
    assert!(
        inside && apart,
        "transpose: rows of the result overlap or leave it"
    );
}

/// `dst[k][i] = src[i][k]` for an 8 × 8 block, in eight AVX registers.
///
/// # Safety
/// The CPU must support AVX, and each `dst[k]` must be valid for writing 8 floats that no
/// other row and nothing else borrowed overlaps.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose_8x8(src: &[&[f32; 8]; 8], dst: [*mut f32; 8]) {
    use std::arch::x86_64::*;
    // SAFETY: each source holds exactly 8 values.
    let r: [__m256; 8] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(src[i].as_ptr()) });
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    let rows = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    for (row, d) in rows.into_iter().zip(dst) {
        // SAFETY: each destination is valid for 8 floats (the caller's contract).
        unsafe { _mm256_storeu_ps(d, row) };
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn transpose_8x8(src: &[&[f32; 8]; 8], dst: [*mut f32; 8]) {
    for (k, d) in dst.into_iter().enumerate() {
        for (i, s) in src.iter().enumerate() {
            // SAFETY: each destination is valid for 8 floats (the caller's contract).
            unsafe { d.add(i).write(s[k]) };
        }
    }
}

/// A raw pointer to C shared by the threads, each of which writes its own block of it.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
impl OutPtr {
    /// The element `offset` past the start. (A method, so that closures capture the whole
    /// `Send` wrapper rather than its raw-pointer field.)
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY: threads write disjoint blocks of the output; see `gemm`.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// A cache line of floats: packing buffers are made of these so that every panel starts on a
/// line boundary (a 64-byte vector load that straddles two lines costs two).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A growable packing buffer aligned to cache lines.
#[derive(Default)]
struct PackBuf(Vec<Line>);

impl PackBuf {
    /// The first `len` floats, growing the buffer if needed (contents unspecified: packing
    /// overwrites what it uses).
    fn get(&mut self, len: usize) -> &mut [f32] {
        let lines = len.div_ceil(16);
        if self.0.len() < lines {
            self.0.resize(lines, Line([0.0; 16]));
        }
        // SAFETY: `Line` is 16 f32s with no padding (repr(C), size 64), so `lines` Lines are
        // 16·lines ≥ len initialised floats.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<f32>(), len) }
    }
}

thread_local! {
    /// Packing buffers (A, B) reused across calls on this thread.
    static PACK: std::cell::RefCell<(PackBuf, PackBuf)> =
        std::cell::RefCell::new((PackBuf::default(), PackBuf::default()));
}

/// `out = a @ b` (`out` row-major `[a.rows, b.cols]`), plus `row` added to every row of it
/// when given (a layer's bias): each row panel of `out` gets it once its last k block is
/// stored, while the panel is still in cache, so `(a @ b) + row` rounds as adding it
/// afterwards would, without another pass over `out`.
///
/// # Safety
/// The caller has checked that `a.cols == b.rows > 0`, `out.len() == a.rows * b.cols`, that
/// `row` (if given) holds `b.cols` floats, that every element `a` and `b` address is in
/// bounds, and that `available()` is true.
///
/// Threads split the output into disjoint blocks (column ranges when there are enough columns,
/// else row ranges) and run the blocked product independently, each packing what it
/// reads: no synchronisation until the end.
pub(crate) unsafe fn gemm(
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    row: Option<&[f32]>,
    out: &mut [f32],
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    debug_assert!(available() && out.len() == m * n && k > 0);
    debug_assert!(row.is_none_or(|r| r.len() == n));
    let c = OutPtr(out.as_mut_ptr());
    let threads = if m * n * k < PAR_MIN_MACS {
        1
    } else {
        crate::kernels::parallel::threads()
    };
    // Each part reads all of the operand it does not split (A in place when it has a unit
    // stride and no set conflict, B packed again by every part): split the columns when A is
    // the smaller one to repeat (m ≤ n), the rows otherwise, as long as there is work enough
    // to share. Parts get near-equal shares of 16-column vectors or 4-row groups (the edge
    // kernels' granularity): 128 rows split 64 + 64, not by whole 12-row panels 60 + 68.
    let (vectors, groups) = (n.div_ceil(16), m.div_ceil(4));
    let split_cols = if m <= n {
        vectors >= 2 * threads
    } else {
        groups < 2 * threads
    };
    let (units, unit) = if split_cols {
        (vectors, 16)
    } else {
        (groups, 4)
    };
    let parts = threads.min(units);
    // Where part t's rows or columns start. Column blocks start on a cache line of C (when its
    // rows are whole lines): two threads writing one line would pass it back and forth on
    // every tile update of the shared edge column. A B that the parts read in place decides
    // instead: a block starting off its lines would have to be packed.
    let shift = if b_in_place(&b.sub_cols(0, n.div_ceil(parts))) {
        0
    } else {
        (c.0 as usize % 64) / 4
    };
    let start = |t: usize| -> usize {
        let u = t * units / parts;
        match (t, split_cols) {
            (0, _) => 0,
            (_, true) if t == parts => n,
            (_, true) => (u * unit).saturating_sub(shift).min(n),
            (_, false) => (u * unit).min(m),
        }
    };
    let block = |t: usize| {
        // SAFETY: part t writes only rows i0..i1 × columns j0..j1 of `out`, disjoint from
        // every other part (the starts increase with t); the sub-block lies inside the m × n
        // output, and the row vector (n floats) from its first column on holds its columns.
        unsafe {
            let (s0, s1) = (start(t), start(t + 1));
            if split_cols {
                let row = row.map(|r| &r[s0..s1]);
                serial(&a, &b.sub_cols(s0, s1 - s0), (c.at(s0), n), row);
            } else {
                serial(&a.sub_rows(s0, s1 - s0), &b, (c.at(s0 * n), n), row);
            }
        }
    };
    super::parallel::run_parts(parts, block);
}

/// Whether B's full panels are read in place rather than packed: a row-major B small enough
/// to stay in L2, its rows on cache lines and at most [`DIRECT_B_MAX_STRIDE`] apart.
fn b_in_place(b: &MatRef<'_, f32>) -> bool {
    b.cs == 1 && b.rows * b.cols <= DIRECT_B_MAX && b.rs <= DIRECT_B_MAX_STRIDE && line_aligned(b)
}

/// Whether every row of `m` starts on a cache line.
fn line_aligned(m: &MatRef<'_, f32>) -> bool {
    (m.ptr() as usize).is_multiple_of(64) && m.rs.is_multiple_of(16)
}

/// The step that splits `len` into the fewest blocks of at most `max`, of near-equal size
/// rounded up to a multiple of `align`.
fn even_step(len: usize, max: usize, align: usize) -> usize {
    let blocks = len.div_ceil(max).max(1);
    len.div_ceil(blocks).div_ceil(align) * align
}

/// The `kc × nc` block of B at row `p0`, column `j0`, as NR-column panels. A row-major B small
/// enough to stay in L2 is read in place (rows of a panel are NR contiguous floats, b.rs apart)
/// when its rows start on cache lines (else every vector load would straddle two) and lie
/// close enough ([`b_in_place`]); only a partial last panel is then packed.
struct BPanels<'a> {
    b: &'a MatRef<'a, f32>,
    packed: &'a [f32],
    p0: usize,
    j0: usize,
    kc: usize,
    /// How the packed panels lie.
    layout: PanelLayout,
    /// Panels before this one are read in place.
    in_place: usize,
}

impl<'a> BPanels<'a> {
    fn new(
        b: &'a MatRef<'a, f32>,
        buf: &'a mut [f32],
        (p0, kc): (usize, usize),
        (j0, nc): (usize, usize),
    ) -> Self {
        let in_place = if b_in_place(b) { nc / NR } else { 0 };
        let packed = &mut buf[..(nc.div_ceil(NR) - in_place) * NR * kc];
        let layout = PanelLayout::packed(kc, Isa::active());
        pack_b(
            b,
            (p0, kc),
            (j0 + in_place * NR, nc - in_place * NR),
            packed,
            layout,
        );
        BPanels {
            b,
            packed,
            p0,
            j0,
            kc,
            layout,
            in_place,
        }
    }

    /// Panel `q`: where its first row starts and how its vectors lie.
    fn panel(&self, q: usize) -> Strided {
        let b = self.b;
        if q < self.in_place {
            Strided(
                b.data[b.offset + self.p0 * b.rs + self.j0 + q * NR..].as_ptr(),
                PanelLayout::rows(b.rs),
            )
        } else {
            Strided(
                self.packed[(q - self.in_place) * NR * self.kc..].as_ptr(),
                self.layout,
            )
        }
    }
}

/// The `mc × kc` block of A at row `i0`, column `p0`, as MR-row panels. An A with a unit
/// stride is read in place: each step broadcasts one element from each of MR rows, from MR
/// row runs (row-major) or one column run (column-major, a transposed view). A micro-panel
/// stays in L1 across the B panels either way, so packing it would only add a copy, unless
/// its rows share an L1 set ([`packs_row_major_a`]). Otherwise only a partial last row panel
/// whose rows are not a multiple of 4 is packed (zero-padded).
struct APanels<'a> {
    a: &'a MatRef<'a, f32>,
    packed: &'a [f32],
    i0: usize,
    p0: usize,
    kc: usize,
    in_place: usize,
}

impl<'a> APanels<'a> {
    fn new(
        a: &'a MatRef<'a, f32>,
        buf: &'a mut [f32],
        (i0, mc): (usize, usize),
        (p0, kc): (usize, usize),
    ) -> Self {
        let direct = (a.cs == 1 && !packs_row_major_a(a.rs, Isa::active())) || a.rs == 1;
        // A last panel of whole 4-row groups is read in place too: the edge kernels read no
        // row past it.
        let whole_groups = usize::from(mc % MR > 0 && (mc % MR).is_multiple_of(4));
        let in_place = if direct { mc / MR + whole_groups } else { 0 };
        let packed = &mut buf[..(mc.div_ceil(MR) - in_place) * MR * kc];
        pack_a(
            a,
            i0 + in_place * MR,
            mc.saturating_sub(in_place * MR),
            p0,
            kc,
            packed,
        );
        APanels {
            a,
            packed,
            i0,
            p0,
            kc,
            in_place,
        }
    }

    /// Row panel `r`.
    fn panel(&self, r: usize) -> APanel {
        let a = self.a;
        if r >= self.in_place {
            return APanel::Steps(
                self.packed[(r - self.in_place) * MR * self.kc..].as_ptr(),
                MR,
            );
        }
        let p = a.data[a.offset + (self.i0 + r * MR) * a.rs + self.p0 * a.cs..].as_ptr();
        if a.cs == 1 {
            APanel::Rows(p, a.rs)
        } else {
            APanel::Steps(p, a.cs)
        }
    }
}

/// Whether a row-major A whose rows lie `rs` floats apart is packed on path `isa`: rows a
/// multiple of 4 KiB apart (the span of an L1's sets) all map to one set, and the AVX-512
/// kernel's 12 rows outnumber the ways of an 8-way L1 (Zen 4's), so that every step would
/// miss it. The AVX2 kernel reads 6 rows at a time, which fit, and packing there was slower;
/// Intel's 12-way L1s hold 12 such rows but are unmeasured with A packed
/// (`docs/performance.md`, "AMD Zen 4, both paths"). A broadcast row (`rs` 0) is one line.
fn packs_row_major_a(rs: usize, isa: Isa) -> bool {
    isa == Isa::Avx512 && rs > 0 && rs.is_multiple_of(4096 / size_of::<f32>())
}

/// The blocked product on one thread: `c[0..a.rows, 0..b.cols] = a @ b (+ row)`, row stride
/// `ldc`.
///
/// # Safety
/// `c` must address a.rows rows of b.cols elements with row stride `ldc`, used by no one else
/// meanwhile, and `row` (if given) hold b.cols floats; the own kernels are [`available`].
unsafe fn serial(
    a: &MatRef<'_, f32>,
    b: &MatRef<'_, f32>,
    (c, ldc): (*mut f32, usize),
    row: Option<&[f32]>,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    PACK.with(|cell| {
        // A re-entrant call (work stolen while this thread waits) gets fresh buffers.
        let mut fresh = (PackBuf::default(), PackBuf::default());
        let mut guard = cell.try_borrow_mut();
        let (ap, bp) = match guard.as_deref_mut() {
            Ok(bufs) => bufs,
            Err(_) => &mut fresh,
        };
        let nc_max = nc();
        let bp = bp.get(KC * nc_max.min(n.div_ceil(NR) * NR));
        let ap = ap.get(KC * MC.min(m.div_ceil(MR) * MR));
        // Blocks of equal size, at most the cache sizes: 784 splits as 4 × 196, not
        // 3 × 256 + 16 (a thin last block would be mostly overhead).
        let (kc_step, mc_step) = (even_step(k, KC, 1), even_step(m, MC, MR));
        for j0 in (0..n).step_by(nc_max) {
            let nc = (n - j0).min(nc_max);
            for p0 in (0..k).step_by(kc_step) {
                let kc = (k - p0).min(kc_step);
                let b_panels = BPanels::new(b, bp, (p0, kc), (j0, nc));
                for i0 in (0..m).step_by(mc_step) {
                    let mc = (m - i0).min(mc_step);
                    let a_panels = APanels::new(a, ap, (i0, mc), (p0, kc));
                    // The A micro-panel (broadcast operand) stays in L1 while the B panels
                    // stream from L2.
                    for r in 0..mc.div_ceil(MR) {
                        let (rows, a_panel) = ((mc - r * MR).min(MR), a_panels.panel(r));
                        for q in 0..nc.div_ceil(NR) {
                            let cols = (nc - q * NR).min(NR);
                            // SAFETY: the tile (rows × cols at row i0 + r·MR, column
                            // j0 + q·NR) is inside this call's block of C; the B panel holds kc
                            // steps of NR floats where its layout puts them (in place: a full
                            // panel inside b; packed: kc·NR floats of bp); the A panel holds
                            // MR rows of kc steps (in place: a full row panel inside a;
                            // packed: kc·MR floats of ap).
                            unsafe {
                                let tile = c.add((i0 + r * MR) * ldc + j0 + q * NR);
                                tile_kernel(
                                    kc,
                                    a_panel,
                                    b_panels.panel(q),
                                    (tile, CRows::Apart(ldc)),
                                    rows,
                                    cols,
                                    p0 > 0,
                                );
                            }
                        }
                        // The row joins the panel's rows once the last k block has stored
                        // them (still in cache): a step of its own, since the micro-kernels
                        // lost their accumulator registers when it was written into their
                        // stores, and one call per row of the panel, not per tile.
                        if let Some(row) = row.filter(|_| p0 + kc == k) {
                            // SAFETY: the panel's rows (rows × nc at row i0 + r·MR, column j0)
                            // are inside this call's block of C, which no one else touches.
                            unsafe {
                                let panel = c.add((i0 + r * MR) * ldc + j0);
                                add_row_to_rows((panel, ldc), rows, &row[j0..j0 + nc]);
                            }
                        }
                    }
                }
            }
        }
    });
}

/// `row` added to each of `rows` rows of `row.len()` floats, `ldc` apart from `c`.
///
/// # Safety
/// Those rows are valid for writes and used by no one else meanwhile.
unsafe fn add_row_to_rows((c, ldc): (*mut f32, usize), rows: usize, row: &[f32]) {
    for i in 0..rows {
        // SAFETY: the caller's contract.
        add_row(
            unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), row.len()) },
            row,
        );
    }
}

/// One tile of C (`rows` ≤ MR rows, `cols` ≤ NR columns) from the A and B panels. The kernel
/// runs on the fewest rows (4, 8 or 12) and 16-column vectors that cover the tile; masked
/// stores keep it inside the tile's columns.
///
/// # Safety
/// `c` must address `rows` rows of `cols` valid elements where `c_rows` puts them (a table
/// holds `rows` entries), not accessed by anyone else meanwhile, and the CPU must support
/// AVX2 and FMA (AVX-512F where that path is active). The A panel must hold `rows` rounded
/// up to 4 rows (packed panels are zero-padded; an in-place one has them), the B panel `kc`
/// rows of the floats its vectors cover.
#[inline]
unsafe fn tile_kernel<B: BRows>(
    kc: usize,
    a: APanel,
    b: B,
    (c, c_rows): (*mut f32, CRows),
    rows: usize,
    cols: usize,
    accumulate: bool,
) {
    let wide = cols > 16;
    let last = cols - if wide { 16 } else { 0 };
    let mask = ((1u32 << last) - 1) as u16;
    let t = Tile {
        kc,
        b,
        c,
        c_rows,
        rows,
        mask,
        accumulate,
    };
    // SAFETY: forwarded contract.
    unsafe {
        match a {
            APanel::Steps(..) => sized_kernel::<BY_STEPS, B>(a, t, wide),
            APanel::Rows(..) | APanel::Scattered(..) => sized_kernel::<BY_ROWS, B>(a, t, wide),
            APanel::Gathered(..) => sized_kernel::<BY_TABLE, B>(a, t, wide),
            APanel::Runs { .. } => sized_kernel::<BY_RUNS, B>(a, t, wide),
        }
    }
}

/// How a micro-kernel reads its A panel (a const parameter: each form compiles to its own
/// loop): step by step a fixed stride apart, row by row, step by step through a table, or
/// row by row over several runs ([`APanel::Runs`]).
const BY_STEPS: u8 = 0;
const BY_ROWS: u8 = 1;
const BY_TABLE: u8 = 2;
const BY_RUNS: u8 = 3;

/// The micro-kernel for the fewest rows (4, 8 or 12) covering `t.rows`, over one or two
/// vectors of columns, on the active path.
///
/// # Safety
/// As [`micro_kernel`], for the row count chosen (never more than the panel holds).
#[inline]
unsafe fn sized_kernel<const BY: u8, B: BRows>(a: APanel, t: Tile<B>, wide: bool) {
    // SAFETY: forwarded contract.
    unsafe {
        match (t.rows.div_ceil(4), wide) {
            (3, true) => path_kernel::<12, 2, BY, B>(a, t),
            (3, false) => path_kernel::<12, 1, BY, B>(a, t),
            (2, true) => path_kernel::<8, 2, BY, B>(a, t),
            (2, false) => path_kernel::<8, 1, BY, B>(a, t),
            (_, true) => path_kernel::<4, 2, BY, B>(a, t),
            (_, false) => path_kernel::<4, 1, BY, B>(a, t),
        }
    }
}

/// An M×16·V tile: one AVX-512 register block, or on AVX2 blocks of at most 6 rows and 16
/// columns (two rows of 6 for M = 12, of 4 for M = 8), each 16-column vector of the tile in
/// turn.
///
/// # Safety
/// As [`micro_kernel`]; AVX2 and FMA on the AVX2 path.
#[inline(always)]
unsafe fn path_kernel<const M: usize, const V: usize, const BY: u8, B: BRows>(
    a: APanel,
    t: Tile<B>,
) {
    if Isa::active() == Isa::Avx512 {
        // SAFETY: forwarded contract; the AVX-512 path is active only where the CPU has it.
        return unsafe { micro_kernel::<M, V, BY, B>(a, t) };
    }
    let block = if M == 12 { 6 } else { 4 };
    for v in 0..V {
        let mask = if v + 1 == V { t.mask } else { u16::MAX };
        for r0 in (0..M).step_by(block).take_while(|&r0| r0 < t.rows) {
            let sub = t.block(r0, 16 * v, (t.rows - r0).min(block), mask);
            if sub.accumulate {
                // SAFETY: a table of C rows holds the tile's rows from r0 on (`micro_kernel`'s
                // contract, which this fn's caller keeps).
                unsafe { prefetch_rows(&sub) };
            }
            let a = a.skip_rows(r0);
            // SAFETY: the block's rows r0..r0 + block lie within the M rows the panel holds,
            // its 16 columns within the 16·V the B rows hold; it stores only the rows and
            // columns of the tile (rows capped, the tile's mask on its last vector).
            unsafe {
                match (block, mask > 0xFF) {
                    (6, true) => avx2_kernel::<6, 2, BY, B>(a, sub, 16 * v),
                    (6, false) => avx2_kernel::<6, 1, BY, B>(a, sub, 16 * v),
                    (_, true) => avx2_kernel::<4, 2, BY, B>(a, sub, 16 * v),
                    (_, false) => avx2_kernel::<4, 1, BY, B>(a, sub, 16 * v),
                }
            }
        }
    }
}

/// Asks for the C rows of an AVX2 block that its k loop will add to, before the loop: they
/// were last touched a whole k block ago and come from L3, and the kernel loads them only
/// after its last step, where nothing else hides their latency (measured on AVX2 beside
/// OpenBLAS: 1040² and 2064² 3–8% faster with one thread; 2048² with two, 0.84 and 0.90 →
/// 0.95 and 0.93 of OpenBLAS). On the AVX-512 path the same prefetches changed nothing.
/// Inside the kernel they made LLVM keep the accumulators in memory, so they are issued
/// here, before the call.
///
/// # Safety
/// Where the tile's rows come from a table, it holds `t.rows` entries.
#[inline(always)]
unsafe fn prefetch_rows<B: BRows>(t: &Tile<B>) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..t.rows {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: row i has a table entry (the contract); the row is only prefetched (SSE,
        // which every x86-64 has), and a prefetch never faults.
        unsafe {
            let first = t.c.wrapping_add(t.c_rows.offset(i));
            // A row's 16 floats span one cache line, or two when they do not start on one.
            _mm_prefetch::<_MM_HINT_T0>(first as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(15) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = t;
}

/// Where a micro-kernel finds row `k` of its B panel.
trait BRows: Copy {
    /// Whether rows past the panel's last are computable (wrapping arithmetic, never read)
    /// and so may be prefetched: where packed panels lie one after another, the next one's
    /// first rows come in while this one ends.
    const PAST_END: bool;

    /// Row `k`'s floats from column `col` on (`col` a multiple of 16 below the panel's
    /// width).
    ///
    /// # Safety
    /// `k` is below the panel's rows (plus [`PREFETCH`] where `PAST_END`: such rows are
    /// only prefetched, never read).
    unsafe fn at(self, k: usize, col: usize) -> *const f32;
}

/// Steps laid out as [`PanelLayout`] says: a packed panel, or a row-major B read in place.
#[derive(Clone, Copy)]
struct Strided(*const f32, PanelLayout);

impl BRows for Strided {
    const PAST_END: bool = true;

    #[inline(always)]
    unsafe fn at(self, k: usize, col: usize) -> *const f32 {
        self.0.wrapping_add(self.1.index(k, col))
    }
}

/// Row `k` at `base + offsets[k]` (a table of one entry per row): a column matrix of a
/// convolution read out of the image itself, each row a run of pixels one kernel tap sees.
#[derive(Clone, Copy)]
struct Offsets {
    base: *const f32,
    table: *const usize,
}

impl BRows for Offsets {
    const PAST_END: bool = false;

    #[inline(always)]
    unsafe fn at(self, k: usize, col: usize) -> *const f32 {
        // SAFETY: k is below the panel's rows (the caller's contract), so the entry is in the
        // table.
        self.base.wrapping_add(unsafe { *self.table.add(k) } + col)
    }
}

/// The k loop of the micro-kernels: `step(k)` for every k below `kc`, in order, with
/// `prefetch(k + PREFETCH)` beside step k while that row exists, or beside every step where
/// rows `past_end` may be prefetched (the B panel streams from L2). With `two`, two steps
/// per trip: one step's loop bookkeeping and table lookups would otherwise crowd the 12
/// fused multiply-adds of an AVX2 block out of the front end (measured: large squares and
/// the convolutions gain; a column-major A read by steps in place lost 5%, so panels read
/// by steps, packed ones included, run one per trip).
#[inline(always)]
fn k_loop(
    kc: usize,
    (past_end, two): (bool, bool),
    mut prefetch: impl FnMut(usize),
    mut step: impl FnMut(usize),
) {
    let ahead = if past_end {
        kc
    } else {
        kc.saturating_sub(PREFETCH)
    };
    let mut k = 0;
    while two && k + 2 <= ahead {
        prefetch(k + PREFETCH);
        step(k);
        prefetch(k + 1 + PREFETCH);
        step(k + 1);
        k += 2;
    }
    while k < ahead {
        prefetch(k + PREFETCH);
        step(k);
        k += 1;
    }
    while two && k + 2 <= kc {
        step(k);
        step(k + 1);
        k += 2;
    }
    while k < kc {
        step(k);
        k += 1;
    }
}

/// The k loop of a micro-kernel reading its A panel `BY`: `step(k, ka)` for every step k
/// below `kc` in order, `ka` being where step k lies along the panel's rows (k itself, or
/// for a panel of runs k's place in its run plus the run's start), with prefetches as in
/// [`k_loop`].
///
/// # Safety
/// A panel of runs has `starts` entries for `kc / run` runs, and `run` divides `kc`.
#[inline(always)]
unsafe fn panel_k_loop<const BY: u8, B: BRows>(
    a: APanel,
    kc: usize,
    mut prefetch: impl FnMut(usize),
    mut step: impl FnMut(usize, usize),
) {
    let APanel::Runs { starts, run, .. } = a else {
        return k_loop(kc, (B::PAST_END, BY != BY_STEPS), prefetch, |k| step(k, k));
    };
    debug_assert!(
        run > 0 && kc.is_multiple_of(run),
        "panel_k_loop: {kc} steps in runs of {run}"
    );
    // One loop per run, two steps per trip: the accumulators stay in registers across the
    // runs (with a run inside `k_loop`'s four loops they went through the stack every trip).
    let mut ahead = |k: usize| {
        // Within the panel, a run's prefetches may reach into the next runs.
        if B::PAST_END || k + PREFETCH < kc {
            prefetch(k + PREFETCH);
        }
    };
    for j in 0..kc / run {
        // SAFETY: j < kc / run (the caller's contract).
        let (k0, start) = (j * run, unsafe { *starts.add(j) });
        let mut k = 0;
        while k + 2 <= run {
            ahead(k0 + k);
            step(k0 + k, start + k);
            ahead(k0 + k + 1);
            step(k0 + k + 1, start + k + 1);
            k += 2;
        }
        if k < run {
            ahead(k0 + k);
            step(k0 + k, start + k);
        }
    }
}

/// Rows of the A panel that starts with `left` rows to go: 12 while more than 16 remain, then
/// on AVX-512 two of 8 rather than 12 + 4 (a 4-row tile shares each B load among 4 rows
/// only). On AVX2 an 8-row panel runs as two blocks of 4 rows anyway, so 12 (two of 6) + 4 is
/// the better split.
fn panel_rows(left: usize) -> usize {
    match left {
        17.. => MR,
        13..=16 if Isa::active() == Isa::Avx512 => 8,
        _ => left.min(MR),
    }
}

/// The output positions of a convolution as its images see them: `images` planes of `rows`
/// output rows of `run` positions each; row `r`'s pixels for any kernel tap lie `row_step`
/// floats after row `r − 1`'s, and image `i`'s `image_step` floats after image `i − 1`'s.
/// Position `q = (i·rows + r)·run + s` is output `(r, s)` of image `i`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Runs {
    pub images: usize,
    pub image_step: usize,
    pub rows: usize,
    pub run: usize,
    pub row_step: usize,
}

impl Runs {
    /// Positions in all the planes, or None when the count overflows.
    fn plane(&self) -> Option<usize> {
        self.images.checked_mul(self.rows)?.checked_mul(self.run)
    }

    /// Where the run of output row `r` (counted over all the images) starts.
    fn row_start(&self, r: usize) -> usize {
        (r / self.rows) * self.image_step + (r % self.rows) * self.row_step
    }

    /// Whether a run fills at least 3/5 of the 16-float vectors a product computes it in:
    /// then the products read runs in place (the forward one output row at a time, the
    /// weight gradient several rows per call); shorter runs (the
    /// 7×7 maps of a DCGAN would waste more than half of every vector) are packed several
    /// rows to a panel.
    pub(crate) fn fills_vectors(&self) -> bool {
        self.run * 5 >= self.run.next_multiple_of(16) * 3
    }

    /// Floats of `base` the runs of a tap at `offset` reach, or None on overflow.
    fn reach(&self, offset: usize, vector: bool) -> Option<usize> {
        let last = if vector {
            self.run.checked_next_multiple_of(16)?
        } else {
            self.run
        };
        self.images
            .checked_sub(1)?
            .checked_mul(self.image_step)?
            .checked_add(self.rows.checked_sub(1)?.checked_mul(self.row_step)?)?
            .checked_add(offset)?
            .checked_add(last)
    }

    /// The pieces of runs that positions `q0..q0 + len` consist of: `(at, n)`, `n` pixels
    /// from `at` past a tap's start, in order. The same for every tap, so computed once per
    /// block of positions.
    fn pieces(&self, q0: usize, len: usize) -> Vec<(usize, usize)> {
        let (mut pieces, mut q, end) = (Vec::new(), q0, q0 + len);
        while q < end {
            let (r, s) = (q / self.run, q % self.run);
            let n = (self.run - s).min(end - q);
            pieces.push((self.row_start(r) + s, n));
            q += n;
        }
        pieces
    }
}

/// Copies the `pieces` of the tap whose runs start at `row` one after another into `dst`.
fn gather(row: &[f32], pieces: &[(usize, usize)], dst: &mut [f32]) {
    let mut out = dst;
    for &(at, n) in pieces {
        let (piece, rest) = out.split_at_mut(n);
        // Runs this short are copied inline: a memmove call would cost more than them.
        for (d, &v) in piece.iter_mut().zip(&row[at..at + n]) {
            *d = v;
        }
        out = rest;
    }
}

/// `c[i, q] = Σ_k a[i, k] · base[offsets[k] + start(r) + s]` for `i < m` and every position
/// `q = (r, s)` of `runs`: a convolution's output planes (`c` is `[m, images·rows·run]`,
/// images side by side) from its weight `a` and its column matrix, never built: row `k` of
/// that matrix is the runs of pixels kernel tap `k` sees, starting at `offsets[k]` in the
/// (padded) image `base`. `a` is `m` rounded up to 4 rows of `offsets.len()` weights, `lda`
/// apart (its panels are read in place; the rows past `m` are never stored). Long runs are
/// read in place, one output row per product; short ones are packed, 32 positions to a
/// panel. Runs on the calling thread.
///
/// Panics unless the own kernels are [`available`] and the operands fit: `base` must hold
/// every run rounded up to 16 floats (vectors read whole; only stores are masked).
pub(crate) fn offset_rows_product(
    (a, lda): (&[f32], usize),
    m: usize,
    offsets: &[usize],
    base: &[f32],
    runs: Runs,
    c: &mut [f32],
) {
    let (k, plane) = (offsets.len(), runs.plane().unwrap_or(usize::MAX));
    if m == 0 || plane == 0 {
        return;
    }
    // Checked: sizes that wrap around must fail the test, not pass it.
    let reach = offsets.iter().max().and_then(|&o| runs.reach(o, true));
    let a_len = m
        .checked_next_multiple_of(4)
        .and_then(|r| r.checked_mul(lda));
    let c_len = m.checked_mul(plane);
    assert!(
        available()
            && runs.plane().is_some()
            && k > 0
            && lda >= k
            && a_len.is_some_and(|l| l <= a.len())
            && reach.is_some_and(|r| r <= base.len())
            && c_len.is_some_and(|l| l <= c.len()),
        "offset_rows_product: operands do not fit"
    );
    let kc_step = even_step(k, KC, 1);
    let mut panel = if runs.fills_vectors() {
        Vec::new()
    } else {
        vec![0.0f32; kc_step * NR]
    };
    for p0 in (0..k).step_by(kc_step) {
        let kc = (k - p0).min(kc_step);
        if runs.fills_vectors() {
            for r in 0..runs.images * runs.rows {
                for s0 in (0..runs.run).step_by(NR) {
                    let b = Offsets {
                        base: base[runs.row_start(r) + s0..].as_ptr(),
                        table: offsets[p0..].as_ptr(),
                    };
                    let q0 = r * runs.run + s0;
                    row_panels(
                        a,
                        (m, lda, p0, kc),
                        b,
                        c,
                        (q0, (runs.run - s0).min(NR), plane),
                    );
                }
            }
        } else {
            for q0 in (0..plane).step_by(NR) {
                let width = (plane - q0).min(NR);
                let pieces = runs.pieces(q0, width);
                for (s, dst) in panel.chunks_exact_mut(NR).take(kc).enumerate() {
                    gather(&base[offsets[p0 + s]..], &pieces, &mut dst[..width]);
                }
                let b = Strided(panel.as_ptr(), PanelLayout::rows(NR));
                row_panels(a, (m, lda, p0, kc), b, c, (q0, width, plane));
            }
        }
    }
}

/// The row panels of [`offset_rows_product`] against one B panel of `width` columns, stored
/// at column `q0` of `c` (row stride `ldc`); steps `p0..p0 + kc` of `a` (`m` rows `lda`
/// apart).
fn row_panels<B: BRows>(
    a: &[f32],
    (m, lda, p0, kc): (usize, usize, usize, usize),
    b: B,
    c: &mut [f32],
    (q0, width, ldc): (usize, usize, usize),
) {
    let mut r0 = 0;
    while r0 < m {
        let rows = panel_rows(m - r0);
        // SAFETY: the A panel (rows rounded up to 4, kc steps from p0) lies in `a`, which
        // holds m rounded up to 4 rows lda apart (asserted by the caller); the B panel's kc rows
        // hold 16·⌈width/16⌉ floats (in place: inside `base` by the caller's reach assert;
        // packed: NR floats each); the tile's `rows` rows of `width` columns at (r0, q0) lie
        // in `c` (m·ldc asserted, q0 + width ≤ ldc), borrowed exclusively; an AVX path was
        // asserted.
        unsafe {
            let a_panel = APanel::Rows(a[r0 * lda + p0..].as_ptr(), lda);
            let tile = (c[r0 * ldc + q0..].as_mut_ptr(), CRows::Apart(ldc));
            tile_kernel(kc, a_panel, b, tile, rows, width, p0 > 0);
        }
        r0 += rows;
    }
}

/// `c[i·ldc + j] += Σ_q base[offsets[i] + start(r) + s] · b[q·ldb + j]` for
/// `i < offsets.len()`, `j < cols` and every position `q = (r, s)` of `runs`: the product of
/// a convolution's column matrix (read out of the image as in [`offset_rows_product`]) with
/// `b` (an output gradient, positions by channels), that is its weight gradient for one
/// image, taps by output channels. Long runs are read in place, short ones are packed; either
/// way up to [`KC`] positions (or one run, where a run is longer) go to one call of the
/// micro-kernel. Runs on the calling thread.
///
/// Panics unless the own kernels are [`available`] and the operands fit: `b`'s rows are read
/// in whole vectors, so `ldb` must cover `cols` rounded up to 16.
pub(crate) fn offset_runs_product_acc(
    (base, offsets): (&[f32], &[usize]),
    runs: Runs,
    (b, ldb): (&[f32], usize),
    (cols, ldc): (usize, usize),
    c: &mut [f32],
) {
    let (m, plane) = (offsets.len(), runs.plane().unwrap_or(usize::MAX));
    if m == 0 || cols == 0 || plane == 0 {
        return;
    }
    // Checked: sizes that wrap around must fail the test, not pass it.
    let reach = offsets.iter().max().and_then(|&o| runs.reach(o, false));
    let b_len = runs.plane().and_then(|p| p.checked_mul(ldb));
    let c_len = (m - 1).checked_mul(ldc).and_then(|v| v.checked_add(cols));
    assert!(
        available()
            && reach.is_some_and(|r| r <= base.len())
            && cols.checked_next_multiple_of(16).is_some_and(|w| ldb >= w)
            && b_len.is_some_and(|l| l <= b.len())
            && ldc >= cols
            && c_len.is_some_and(|l| l <= c.len()),
        "offset_runs_product_acc: operands do not fit"
    );
    // Whole panels of 4 rows: the kernel reads a row for every one it could hold.
    let mut table = offsets.to_vec();
    table.resize(m.next_multiple_of(4), offsets[0]);
    let in_place = runs.fills_vectors();
    // In place, a block is whole runs (output rows), as many as fit KC steps.
    let kc_step = if in_place {
        runs.run * (KC / runs.run).max(1)
    } else {
        KC.min(plane)
    };
    let starts: Vec<usize> = if in_place {
        (0..plane / runs.run).map(|r| runs.row_start(r)).collect()
    } else {
        Vec::new()
    };
    let mut panel = if in_place {
        Vec::new()
    } else {
        vec![0.0f32; MR * kc_step]
    };
    let blocks: Vec<Vec<(usize, usize)>> = if in_place {
        Vec::new()
    } else {
        (0..plane)
            .step_by(kc_step)
            .map(|p0| runs.pieces(p0, (plane - p0).min(kc_step)))
            .collect()
    };
    let mut r0 = 0;
    while r0 < m {
        let rows = panel_rows(m - r0);
        for (block, p0) in (0..plane).step_by(kc_step).enumerate() {
            let kc = (plane - p0).min(kc_step);
            let a_panel = if in_place {
                APanel::Runs {
                    base: base.as_ptr(),
                    table: table[r0..].as_ptr(),
                    starts: starts[p0 / runs.run..].as_ptr(),
                    run: runs.run,
                }
            } else {
                let four = rows.next_multiple_of(4);
                for (i, dst) in panel.chunks_exact_mut(kc).take(four).enumerate() {
                    gather(&base[table[r0 + i]..], &blocks[block], dst);
                }
                APanel::Rows(panel.as_ptr(), kc)
            };
            for j0 in (0..cols).step_by(NR) {
                let width = (cols - j0).min(NR);
                // SAFETY: the panel's rows rounded up to 4 are readable for kc steps (in
                // place: table entries padded above, kc / run runs with their starts, each
                // run inside `base` by the reach assert; packed: rows·kc ≤ MR·kc_step
                // floats of `panel`); B rows
                // p0..p0 + kc hold 16·⌈width/16⌉ ≤ ldb floats from j0 within `b` (plane·ldb
                // asserted); the tile's rows × width at (r0, j0) lie in `c` (asserted),
                // borrowed exclusively; an AVX path was asserted.
                unsafe {
                    let b_panel = Strided(b[p0 * ldb + j0..].as_ptr(), PanelLayout::rows(ldb));
                    let tile = (c[r0 * ldc + j0..].as_mut_ptr(), CRows::Apart(ldc));
                    tile_kernel(kc, a_panel, b_panel, tile, rows, width, true);
                }
            }
        }
        r0 += rows;
    }
}

/// The column matrix of a convolution over channels-last images, never built: row `q` (an
/// output position) is the runs of floats that position's kernel taps see, run `t` of it
/// `run` floats from `base[at[q] + runs[t]]` (neighbouring taps of a kernel row side by side,
/// each with all its channels). Run `t` is read only for the positions in `spans[t]`; the
/// others see only padding there. Its floats meet rows `b_rows[t]..b_rows[t] + run` of the
/// other operand.
/// `at` holds 3 entries past the last position (any valid offsets), so that a panel rounded
/// up to whole groups of 4 rows stays inside it.
#[derive(Clone, Copy)]
pub(crate) struct Gathered<'a> {
    pub base: &'a [f32],
    pub at: &'a [usize],
    pub positions: usize,
    pub runs: &'a [usize],
    pub spans: &'a [Range<usize>],
    pub b_rows: &'a [usize],
    pub run: usize,
}

impl Gathered<'_> {
    /// Whether every float a product reads (whole runs, and up to `slack` past each) lies in
    /// `base`, the tables are whole, and the sizes do not overflow.
    fn fits(&self, slack: usize) -> bool {
        let last = |t: &[usize]| t.iter().max().copied();
        let reach = last(self.at)
            .zip(last(self.runs))
            .and_then(|(a, r)| a.checked_add(r)?.checked_add(self.run)?.checked_add(slack));
        self.run > 0
            && self.at.len() == self.positions.saturating_add(3)
            && self.spans.len() == self.runs.len()
            && self.b_rows.len() == self.runs.len()
            && self
                .spans
                .iter()
                .all(|s| s.start <= s.end && s.end <= self.positions)
            && reach.is_some_and(|r| r <= self.base.len())
    }

    /// Whether the rows `b_rows[t]..b_rows[t] + run` of an operand of `len` floats, `ld`
    /// apart, lie inside it.
    fn rows_fit(&self, len: usize, ld: usize) -> bool {
        let end = self
            .b_rows
            .iter()
            .max()
            .and_then(|r| r.checked_add(self.run));
        end.and_then(|e| e.checked_mul(ld))
            .is_some_and(|e| e <= len)
    }
}

/// `c[c_at[q] + j] += Σ_t Σ_p a[q, (t, p)] · b[(b_rows[t] + p)·ldb + j]` (`p` along run `t`)
/// for every position `q` of `a` and `j < cols`: a convolution of channels-last images by its
/// weight `b` (row-major, `ldb` apart; run `t` meets rows `b_rows[t]..`), each position's
/// output channels stored from `c_at[q]` (zeroed by the caller). Each A panel is 12
/// positions' runs read in place. Runs on the calling thread.
///
/// Panics unless the own kernels are [`available`] and the operands fit: `b`'s rows are read
/// in whole vectors, so `ldb` must cover `cols` rounded up to 16; each position's `cols`
/// outputs must lie in `c`.
pub(crate) fn gathered_rows_product(
    a: Gathered<'_>,
    (b, ldb): (&[f32], usize),
    cols: usize,
    (c, c_at): (&mut [f32], &[usize]),
) {
    let outputs_fit = c_at.len() >= a.positions
        && c_at[..a.positions]
            .iter()
            .all(|&at| at.checked_add(cols).is_some_and(|end| end <= c.len()));
    assert!(
        available()
            && cols > 0
            && a.fits(0)
            && cols.checked_next_multiple_of(16).is_some_and(|w| ldb >= w)
            && a.rows_fit(b.len(), ldb)
            && outputs_fit,
        "gathered_rows_product: operands do not fit"
    );
    let kc_step = even_step(a.run, KC, 1);
    for ((&run_at, span), &b_row) in a.runs.iter().zip(a.spans).zip(a.b_rows) {
        for p0 in (0..a.run).step_by(kc_step) {
            let kc = (a.run - p0).min(kc_step);
            let mut r0 = span.start;
            while r0 < span.end {
                let rows = panel_rows(span.end - r0);
                let a_panel =
                    APanel::Scattered(a.base[run_at + p0..].as_ptr(), a.at[r0..].as_ptr());
                let c_rows = CRows::At(c_at[r0..r0 + rows].as_ptr());
                for j0 in (0..cols).step_by(NR) {
                    let width = (cols - j0).min(NR);
                    // SAFETY: the panel's rows rounded up to 4 (at most 3 past the span's
                    // end) have entries in `at` (3 past the positions, asserted), each run of
                    // kc floats from p0 inside `base` (the reach asserted); B rows
                    // b_row + p0.. hold 16·⌈width/16⌉ ≤ ldb floats from j0 within `b` (the
                    // rows asserted); the tile's rows (r0 + rows ≤ the span's end ≤ the
                    // positions) have entries in `c_at`, and each row's `cols` floats from
                    // its entry lie in `c` (asserted), borrowed exclusively; an AVX path was
                    // asserted.
                    unsafe {
                        let b_panel = Strided(
                            b[(b_row + p0) * ldb + j0..].as_ptr(),
                            PanelLayout::rows(ldb),
                        );
                        let tile = (c[j0..].as_mut_ptr(), c_rows);
                        tile_kernel(kc, a_panel, b_panel, tile, rows, width, true);
                    }
                }
                r0 += rows;
            }
        }
    }
}

/// `c[k·ldc + j] += Σ_q a[q, k] · b[q·ldb + j]` for every column `k` of `a` and `j < cols`:
/// the weight gradient of a convolution of channels-last images (`b` is the output
/// gradient, positions by channels; `c` taps by output channels, run `t`'s from row
/// `b_rows[t]`). Each step of an A panel is 12 of a position's taps read in place. Runs on
/// the calling thread.
///
/// Panics unless the own kernels are [`available`] and the operands fit: the panels read up
/// to 3 floats past a run, so `base` must hold them; `b`'s rows are read in whole vectors,
/// so `ldb` must cover `cols` rounded up to 16.
pub(crate) fn gathered_steps_product_acc(
    a: Gathered<'_>,
    (b, ldb): (&[f32], usize),
    cols: usize,
    (c, ldc): (&mut [f32], usize),
) {
    let b_len = a.positions.checked_mul(ldb);
    assert!(
        available()
            && cols > 0
            && a.fits(3)
            && cols.checked_next_multiple_of(16).is_some_and(|w| ldb >= w)
            && b_len.is_some_and(|l| l <= b.len())
            && ldc >= cols
            && a.rows_fit(c.len(), ldc),
        "gathered_steps_product_acc: operands do not fit"
    );
    for ((&run_at, span), &c_row) in a.runs.iter().zip(a.spans).zip(a.b_rows) {
        for p0 in span.clone().step_by(KC) {
            let kc = (span.end - p0).min(KC);
            let mut r0 = 0;
            while r0 < a.run {
                let rows = panel_rows(a.run - r0);
                let a_panel = APanel::Gathered(a.base[run_at + r0..].as_ptr(), a.at[p0..].as_ptr());
                for j0 in (0..cols).step_by(NR) {
                    let width = (cols - j0).min(NR);
                    // SAFETY: steps p0..p0 + kc (inside the span) have entries in `at`; each
                    // reads the panel's rows rounded up to 4, at most 3 floats past the run,
                    // inside `base` (the reach with that slack asserted); B rows p0..p0 + kc
                    // hold 16·⌈width/16⌉ ≤ ldb floats from j0 within `b` (positions·ldb
                    // asserted); the tile's rows × width at (c_row + r0, j0) lie in `c`
                    // (the rows asserted), borrowed exclusively; an AVX path was asserted.
                    unsafe {
                        let b_panel = Strided(b[p0 * ldb + j0..].as_ptr(), PanelLayout::rows(ldb));
                        let tile = (c[(c_row + r0) * ldc + j0..].as_mut_ptr(), CRows::Apart(ldc));
                        tile_kernel(kc, a_panel, b_panel, tile, rows, width, true);
                    }
                }
                r0 += rows;
            }
        }
    }
}

/// Where the rows of a tile of C lie: `ldc` floats apart, or at the offsets of a table (one
/// entry per row of the tile), as the output pixels of a convolution's phase do.
#[derive(Clone, Copy)]
enum CRows {
    Apart(usize),
    At(*const usize),
}

impl CRows {
    /// Where row `i` of the tile starts, in floats past its first element.
    ///
    /// # Safety
    /// A table holds an entry `i`.
    #[inline(always)]
    unsafe fn offset(self, i: usize) -> usize {
        match self {
            CRows::Apart(ldc) => i * ldc,
            // SAFETY: the caller's contract.
            CRows::At(table) => unsafe { *table.add(i) },
        }
    }
}

/// What a micro-kernel call needs besides its A panel.
#[derive(Clone, Copy)]
struct Tile<B> {
    /// Steps of the k loop.
    kc: usize,
    /// B panel: kc rows of (up to) NR floats.
    b: B,
    /// C tile and where its rows lie.
    c: *mut f32,
    c_rows: CRows,
    /// Rows of C stored (≤ the kernel's M).
    rows: usize,
    /// Columns of the last 16-wide vector stored.
    mask: u16,
    /// Add to C instead of overwriting it.
    accumulate: bool,
}

impl<B: BRows> Tile<B> {
    /// The block of this tile that starts `r0` rows and `col0` columns in: `rows` rows, the
    /// columns of its 16-wide vector that `mask` selects (the B panel is not moved: the
    /// kernel reads its vector at `col0`).
    #[inline(always)]
    fn block(self, r0: usize, col0: usize, rows: usize, mask: u16) -> Tile<B> {
        let (c, c_rows) = match self.c_rows {
            CRows::Apart(ldc) => (self.c.wrapping_add(r0 * ldc + col0), self.c_rows),
            CRows::At(table) => (self.c.wrapping_add(col0), CRows::At(table.wrapping_add(r0))),
        };
        Tile {
            c,
            c_rows,
            rows,
            mask,
            ..self
        }
    }
}

/// C[0..rows, 0..8·W] (+)= A · B over `kc` steps on AVX2: M·W ymm accumulators, M ≤ 6 and
/// W ≤ 2 (6×16 is the full block: 12 accumulators, two B vectors and a broadcast fill 15 of
/// the 16 registers). B is read from its 16-column vector at `col0` ([`BRows::at`]). Each
/// element is the same chain of fused multiply-adds over k as in [`micro_kernel`], then the
/// same addition to C, so the two paths agree to the bit.
///
/// # Safety
/// As [`micro_kernel`], with 8·W floats at `col0` of each B step, the columns of C those of
/// the low 8·W bits of `t.mask`, and a CPU with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_kernel<const M: usize, const W: usize, const BY: u8, B: BRows>(
    a: APanel,
    t: Tile<B>,
    col0: usize,
) {
    use std::arch::x86_64::*;
    let b = t.b;
    let (steps, lda, table) = match a {
        APanel::Steps(p, lda) => (p, lda, std::ptr::null()),
        APanel::Gathered(p, table) => (p, 0, table),
        _ => (std::ptr::null(), 0, std::ptr::null()),
    };
    // SAFETY: a scattered panel's table holds M entries (the contract).
    let rows: [*const f32; M] = std::array::from_fn(|i| unsafe { a.row(i) });
    let mut acc = [[_mm256_setzero_ps(); W]; M];
    // SAFETY: the loop prefetches only rows below kc, or past it where B allows (and a
    // prefetch never faults).
    let prefetch = |k| unsafe { _mm_prefetch::<_MM_HINT_T0>(b.at(k, col0) as *const i8) };
    let step = |k, ka: usize| {
        // SAFETY: k < kc (ka within its run), so the panel reads are in bounds.
        unsafe {
            let bk_row = b.at(k, col0);
            let bk: [__m256; W] = std::array::from_fn(|w| _mm256_loadu_ps(bk_row.add(8 * w)));
            let step = if BY == BY_TABLE {
                steps.wrapping_add(*table.add(k))
            } else {
                steps.wrapping_add(k * lda)
            };
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*if BY == BY_ROWS || BY == BY_RUNS {
                    rows[i].add(ka)
                } else {
                    step.add(i)
                });
                for w in 0..W {
                    row[w] = _mm256_fmadd_ps(ai, bk[w], row[w]);
                }
            }
        }
    };
    // SAFETY: a panel of runs holds kc / run of them (the contract).
    unsafe { panel_k_loop::<BY, B>(a, t.kc, prefetch, step) };
    // Lane j of a mask vector is on where bit j of the column mask is.
    let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (i, row) in acc.iter().enumerate().take(t.rows) {
        for (w, &r) in row.iter().enumerate() {
            let bits = i32::from((t.mask >> (8 * w)) as u8);
            // SAFETY: row i < rows of the block holds the columns its mask bits select at
            // c + (i·ldc or table entry i) + 8·w.
            unsafe {
                let ci = t.c.add(t.c_rows.offset(i) + 8 * w);
                if bits == 0xFF {
                    let r = if t.accumulate {
                        _mm256_add_ps(r, _mm256_loadu_ps(ci))
                    } else {
                        r
                    };
                    _mm256_storeu_ps(ci, r);
                } else if bits != 0 {
                    let on = _mm256_and_si256(_mm256_set1_epi32(bits), lanes);
                    let mask = _mm256_cmpeq_epi32(on, lanes);
                    let r = if t.accumulate {
                        _mm256_add_ps(r, _mm256_maskload_ps(ci, mask))
                    } else {
                        r
                    };
                    _mm256_maskstore_ps(ci, mask, r);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn avx2_kernel<const M: usize, const W: usize, const BY: u8, B: BRows>(
    _: APanel,
    _: Tile<B>,
    _: usize,
) {
    unreachable!("the AVX2 path is only taken on x86-64")
}

/// C[0..rows, 0..16·V] (+)= A · B over `kc` steps, M·V zmm accumulators. M = 12, V = 2 is the
/// full 12×32 tile; smaller M and V serve the edges of C.
///
/// # Safety
/// `a` holds M rows of kc floats (`BY_ROWS`: in place `lda` apart, or scattered with M table
/// entries; `BY_RUNS`: M table entries, `run` dividing kc, kc / run `starts` entries, and
/// `run` floats readable from `base + table[i] + starts[j]`), or kc steps of M adjacent
/// floats (`BY_STEPS`: `lda` apart; `BY_TABLE`: kc table entries); `t.b` gives kc rows of
/// 16·V floats each; `t.c` addresses `t.rows` ≤ M rows of the columns that the full vectors
/// and `t.mask` select, where `t.c_rows` puts them (a table: `t.rows` entries); the CPU
/// supports AVX-512F (and AVX2, FMA for [`path_kernel`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn micro_kernel<const M: usize, const V: usize, const BY: u8, B: BRows>(
    a: APanel,
    t: Tile<B>,
) {
    use std::arch::x86_64::*;
    let b = t.b;
    let (steps, lda, table) = match a {
        APanel::Steps(p, lda) => (p, lda, std::ptr::null()),
        APanel::Gathered(p, table) => (p, 0, table),
        _ => (std::ptr::null(), 0, std::ptr::null()),
    };
    // SAFETY: a scattered panel's table holds M entries (the contract).
    let rows: [*const f32; M] = std::array::from_fn(|i| unsafe { a.row(i) });
    let mut acc = [[_mm512_setzero_ps(); V]; M];
    let prefetch = |k| {
        for v in 0..V {
            // SAFETY: the loop prefetches only rows below kc, or past it where B allows (and a
            // prefetch never faults).
            let ahead = unsafe { b.at(k, 16 * v) };
            _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
        }
    };
    let step = |k, ka: usize| {
        // SAFETY: k < kc (ka within its run), so the panel reads are in bounds.
        unsafe {
            let bk: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(b.at(k, 16 * v)));
            // Steps: step k's values are adjacent, a stride or a table entry away.
            let step = if BY == BY_TABLE {
                steps.wrapping_add(*table.add(k))
            } else {
                steps.wrapping_add(k * lda)
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // Rows: row i of A is contiguous over k.
                let ai = _mm512_set1_ps(if BY == BY_ROWS || BY == BY_RUNS {
                    *rows[i].add(ka)
                } else {
                    *step.add(i)
                });
                for v in 0..V {
                    row[v] = _mm512_fmadd_ps(ai, bk[v], row[v]);
                }
            }
        }
    };
    // SAFETY: a panel of runs holds kc / run of them (the contract).
    unsafe { panel_k_loop::<BY, B>(a, t.kc, prefetch, step) };
    for (i, row) in acc.iter().enumerate().take(t.rows) {
        for (v, &r) in row.iter().enumerate() {
            let mask = if v + 1 == V { t.mask } else { 0xFFFF };
            // SAFETY: row i < rows of the tile holds the columns `mask` selects at
            // c + (i·ldc or table entry i) + 16·v.
            unsafe {
                let ci = t.c.add(t.c_rows.offset(i) + 16 * v);
                let r = if t.accumulate {
                    _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, ci))
                } else {
                    r
                };
                _mm512_mask_storeu_ps(ci, mask, r);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn micro_kernel<const M: usize, const V: usize, const BY: u8, B: BRows>(
    _: APanel,
    _: Tile<B>,
) {
    unreachable!("the AVX-512 path is only taken on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_b_block_is_half_of_l2_on_avx2_and_whole_panels() {
        let avx2 = |kib: usize| nc_for(Some(kib << 10), Isa::Avx2);
        assert_eq!(
            [256, 512, 1024, 1280, 2048, 32 << 10].map(avx2),
            [256, 256, 512, 640, 1024, 1024]
        );
        assert_eq!(nc_for(None, Isa::Avx2), 256);
        for l2 in [None, Some(512 << 10), Some(2 << 20)] {
            assert_eq!(nc_for(l2, Isa::Avx512), 1024);
        }
        for kib in (64..=4096).step_by(64) {
            assert!(avx2(kib).is_multiple_of(NR) && avx2(kib) >= 256);
        }
    }

    /// `src` (`rows × cols`, row-major) transposed by `transpose_to` into rows placed `gap`
    /// apart plus an extra gap after every `per_line` of them (the rows of a padded image),
    /// against the same placement done one element at a time; the gaps must stay untouched.
    fn check_placed(rows: usize, cols: usize, per_line: usize, gap: usize) {
        let src: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
        let row_at = |j: usize| (j + j / per_line * 2) * (rows + gap) + 1;
        let len = row_at(cols.saturating_sub(1)) + rows + gap + 1;
        let mut got = vec![-1.0; len];
        transpose_to(&src, (rows, cols), cols, &mut got, row_at);
        let mut want = vec![-1.0; len];
        for i in 0..rows {
            for j in 0..cols {
                want[row_at(j) + i] = src[i * cols + j];
            }
        }
        assert_eq!(got, want, "{rows} × {cols}, {per_line} a line, gap {gap}");
    }

    /// `rows × cols` row-major over a cache-line-aligned buffer, rows `rs` floats apart.
    fn aligned_matrix(buf: &mut PackBuf, rows: usize, cols: usize, rs: usize) -> MatRef<'_, f32> {
        let data = buf.get(rows * rs);
        data.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
        MatRef {
            data,
            offset: 0,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    #[test]
    fn b_is_read_in_place_only_with_rows_at_most_2_kib_apart() {
        let mut buf = PackBuf::default();
        assert!(b_in_place(&aligned_matrix(&mut buf, 256, 512, 512)));
        assert!(!b_in_place(&aligned_matrix(&mut buf, 256, 528, 528)));
        assert!(!b_in_place(&aligned_matrix(&mut buf, 128, 1024, 1024)));
        // 1 MiB with rows 2 KiB apart is still read in place; more than 1 MiB never.
        assert!(b_in_place(&aligned_matrix(&mut buf, 512, 512, 512)));
        assert!(!b_in_place(&aligned_matrix(&mut buf, 520, 512, 512)));
    }

    #[test]
    fn a_is_packed_where_its_rows_would_share_one_l1_set_on_avx512_only() {
        for rs in [1024, 2048, 3072] {
            assert!(packs_row_major_a(rs, Isa::Avx512), "{rs}");
            assert!(!packs_row_major_a(rs, Isa::Avx2), "{rs}");
        }
        for rs in [0, 512, 1040, 1536] {
            assert!(!packs_row_major_a(rs, Isa::Avx512), "{rs}");
        }
    }

    #[test]
    fn row_major_a_packs_into_steps_of_mr_zero_padded() {
        // Rows 3..33 of a row-major A (two full panels and a partial one of 6 rows), columns
        // 5..261: panel r, step k holds rows 3 + 12r + 0..12 of column 5 + k, zeros past row 33.
        let mut buf = PackBuf::default();
        let a = aligned_matrix(&mut buf, 40, 1024, 1024);
        let (i0, mc, p0, kc): (usize, usize, usize, usize) = (3, 30, 5, 256);
        let mut out = vec![f32::NAN; mc.div_ceil(MR) * MR * kc];
        pack_a(&a, i0, mc, p0, kc, &mut out);
        for (r, panel) in out.chunks_exact(MR * kc).enumerate() {
            for (k, step) in panel.chunks_exact(MR).enumerate() {
                for (i, &v) in step.iter().enumerate() {
                    let row = r * MR + i;
                    let want = if row < mc {
                        ((i0 + row) * 1024 + p0 + k) as f32
                    } else {
                        0.0
                    };
                    assert_eq!(v, want, "panel {r}, step {k}, row {i}");
                }
            }
        }
    }

    #[test]
    fn b_packs_each_vector_where_the_path_reads_it() {
        // Steps 3..28 (not a multiple of 8) and columns 5..75 (two full panels and one of 6
        // columns) of B, row-major and column-major (the register-transpose branch), in the
        // layout of each path: every float of the panels written, the padding zero.
        let (p0, kc, j0, nc): (usize, usize, usize, usize) = (3, 25, 5, 70);
        let data: Vec<f32> = (0..40 * 80).map(|v| v as f32).collect();
        let row_major = MatRef {
            data: &data,
            offset: 0,
            rows: 40,
            cols: 80,
            rs: 80,
            cs: 1,
        };
        let column_major = MatRef {
            rs: 1,
            cs: 40,
            ..row_major
        };
        // The transposes need AVX, which the portable path does not assume.
        let cases = if available() { 2 } else { 1 };
        for (b, ld) in [(row_major, 80), (column_major, 40)]
            .into_iter()
            .take(cases)
        {
            for isa in [Isa::Avx2, Isa::Avx512] {
                let layout = PanelLayout::packed(kc, isa);
                let mut out = vec![f32::NAN; nc.div_ceil(NR) * NR * kc];
                pack_b(&b, (p0, kc), (j0, nc), &mut out, layout);
                for (q, panel) in out.chunks_exact(NR * kc).enumerate() {
                    for k in 0..kc {
                        for j in 0..NR {
                            let col = q * NR + j;
                            let (at, i) = (p0 + k, j0 + col);
                            let want = if col < nc {
                                (if ld == 80 { at * 80 + i } else { i * 40 + at }) as f32
                            } else {
                                0.0
                            };
                            let got = panel[layout.index(k, j)];
                            assert_eq!(got, want, "{isa:?}, rs {}: panel {q}, step {k}, {j}", b.rs);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transpose_places_every_row_where_told() {
        // Whole 8 × 8 blocks and ragged edges, strips of 8 rows of the result that straddle
        // a line of the padded image, and rows exactly as long as their spacing.
        for (rows, cols) in [(8, 8), (16, 24), (13, 29), (7, 40), (64, 49), (3, 5)] {
            for per_line in [1, 5, 7, 14] {
                for gap in [0, 3] {
                    check_placed(rows, cols, per_line, gap);
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "transpose")]
    fn transpose_refuses_rows_of_the_result_that_overlap() {
        let src = vec![0.0; 16 * 16];
        let mut dst = vec![0.0; 16 * 16];
        transpose(&src, (16, 16), 16, &mut dst, 8);
    }
}
