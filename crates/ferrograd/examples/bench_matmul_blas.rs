//! f32 matmul against a BLAS library in the same process: the square sizes, one product whose
//! B has rows 4 KiB apart, and the MLP's shapes (or with `--gpt` a GPT block's), our product
//! and the library's `cblas_sgemm` alternated so that both see the same machine (a shared VM
//! drifts by tens of percent within a minute; two separate runs cannot be compared to a few
//! percent).
//!
//! ```text
//! cargo run --release --example bench_matmul_blas -- LIB [--threads 1|2] [--seconds S] [--gpt]
//!     [--evict MIB]
//! ```
//! LIB is a CBLAS shared library, e.g. the OpenBLAS inside numpy's wheel
//! (`python -c "import numpy, glob, os; print(glob.glob(os.path.dirname(numpy.__file__) +
//! '.libs/libscipy_openblas*'))"`) or a system `libopenblas.so`. Its thread count is set to
//! `--threads` and so is ours.
//!
//! With one thread the two products alternate call by call. With two, they alternate in
//! blocks of 100 ms with a pause after each, because a BLAS leaves its worker threads spinning
//! for a while after each call, which would take a core from the product that runs next.
//! Printed per shape: GFLOP/s of each (best block or call, and the 10th percentile), and the
//! ratio ours / library on both.
//!
//! A product called again and again finds its operands in cache. In a training step they
//! come from memory: a GPT's activations outgrow the caches between the layer that writes
//! them and the one that reads them. `--evict MIB` writes that many MiB before every timed
//! call (the writes not timed), so that A, B and C come from memory. Use it with one thread:
//! with two, only the calling core writes (the other core's L2 keeps its share), and our
//! helper threads go back to the pool during the writes while the library's keep spinning.

use std::ffi::{c_char, c_void, CString};
use std::hint::black_box;
use std::time::{Duration, Instant};

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// `cblas_sgemm(layout, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)` with
/// integers of type `I`.
type CblasSgemm<I> = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    I,
    I,
    I,
    f32,
    *const f32,
    I,
    *const f32,
    I,
    f32,
    *mut f32,
    I,
);

/// `cblas_sgemm` with 32-bit (LP64) or 64-bit (ILP64) integers.
enum Sgemm {
    Lp64(CblasSgemm<i32>),
    Ilp64(CblasSgemm<i64>),
}

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
const TRANS: i32 = 112;

struct Blas {
    sgemm: Sgemm,
}

impl Blas {
    /// Opens `path` and finds its sgemm (plain, or with OpenBLAS's 64-bit-integer suffixes) and
    /// sets its thread count.
    fn open(path: &str, threads: usize) -> Result<Blas, String> {
        let cpath = CString::new(path).map_err(|e| e.to_string())?;
        // SAFETY: dlopen with a valid C string; the handle is kept for the process lifetime.
        let lib = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW) };
        if lib.is_null() {
            return Err(format!("cannot open {path}"));
        }
        let sym = |name: &str| -> *mut c_void {
            let c = CString::new(name).unwrap();
            // SAFETY: lib is a live handle, c a valid C string.
            unsafe { libc::dlsym(lib, c.as_ptr() as *const c_char) }
        };
        // SAFETY: the symbols found have the CBLAS signatures named by their suffix.
        unsafe {
            for name in [
                "openblas_set_num_threads",
                "scipy_openblas_set_num_threads64_",
            ] {
                let f = sym(name);
                if !f.is_null() {
                    let set = std::mem::transmute::<*mut c_void, extern "C" fn(i32)>(f);
                    set(threads as i32);
                }
            }
            let lp = sym("cblas_sgemm");
            if !lp.is_null() {
                return Ok(Blas {
                    sgemm: Sgemm::Lp64(std::mem::transmute::<*mut c_void, CblasSgemm<i32>>(lp)),
                });
            }
            for name in ["cblas_sgemm64_", "scipy_cblas_sgemm64_"] {
                let ilp = sym(name);
                if !ilp.is_null() {
                    return Ok(Blas {
                        sgemm: Sgemm::Ilp64(std::mem::transmute::<*mut c_void, CblasSgemm<i64>>(
                            ilp,
                        )),
                    });
                }
            }
        }
        Err(format!("{path} has no cblas_sgemm"))
    }

    /// `c = op(a) @ op(b)`, row-major, `a` stored `[m, k]` (or `[k, m]` when `ta`), `b`
    /// `[k, n]` (or `[n, k]` when `tb`).
    #[allow(clippy::too_many_arguments)]
    fn sgemm(
        &self,
        ta: bool,
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
    ) {
        let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
        let (ta, tb) = (
            if ta { TRANS } else { NO_TRANS },
            if tb { TRANS } else { NO_TRANS },
        );
        assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
        // SAFETY: the buffers hold the matrices the dimensions and leading dimensions describe.
        unsafe {
            match self.sgemm {
                Sgemm::Lp64(f) => f(
                    ROW_MAJOR,
                    ta,
                    tb,
                    m as i32,
                    n as i32,
                    k as i32,
                    1.0,
                    a.as_ptr(),
                    lda as i32,
                    b.as_ptr(),
                    ldb as i32,
                    0.0,
                    c.as_mut_ptr(),
                    n as i32,
                ),
                Sgemm::Ilp64(f) => f(
                    ROW_MAJOR,
                    ta,
                    tb,
                    m as i64,
                    n as i64,
                    k as i64,
                    1.0,
                    a.as_ptr(),
                    lda as i64,
                    b.as_ptr(),
                    ldb as i64,
                    0.0,
                    c.as_mut_ptr(),
                    n as i64,
                ),
            }
        }
    }
}

/// Best and 10th-percentile rate of a list of GFLOP/s samples.
fn best_p10(mut rates: Vec<f64>) -> (f64, f64) {
    rates.sort_by(|x, y| y.total_cmp(x));
    (rates[0], rates[rates.len() / 10])
}

/// GFLOP/s of each call of `f` until `until` (at least one call), each call after writing
/// every byte of `evict` (untimed).
fn calls(f: &mut dyn FnMut(), flops: f64, until: Instant, evict: &mut [u8]) -> Vec<f64> {
    let mut rates = Vec::new();
    while Instant::now() < until || rates.is_empty() {
        evict.iter_mut().for_each(|x| *x = x.wrapping_add(1));
        black_box(&mut *evict);
        let t = Instant::now();
        f();
        rates.push(flops / t.elapsed().as_secs_f64() / 1e9);
    }
    rates
}

/// Our f32 matmul against a BLAS library's `cblas_sgemm`, loaded at run time.
#[derive(clap::Parser)]
struct Args {
    /// The BLAS shared library to load (e.g. libopenblas.so.0).
    lib: String,
    /// Threads for both sides.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seconds of measurement per shape (default: 3 with one thread, 8 with more).
    #[arg(long)]
    seconds: Option<f64>,
    /// The products of the GPT of `examples/gpt` (a block's, batch 12 × context 64, width
    /// 128) instead of the squares and the MLP's shapes.
    #[arg(long)]
    gpt: bool,
    /// MiB written before every timed call, to push the operands out of the caches.
    #[arg(long, default_value_t = 0, value_name = "MIB")]
    evict: usize,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (lib, threads) = (&args.lib, args.threads.max(1));
    let secs = args.seconds.unwrap_or(if threads == 1 { 3.0 } else { 8.0 });
    let blas = Blas::open(lib, threads).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    // The global pool, so that products are called from outside it, as a training loop does.
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("the thread pool is configured once");
    println!(
        "f32 matmul, {threads} thread(s), ours against {lib}: GFLOP/s best / p10, ratio ours/BLAS"
    );
    let mut rng = StdRng::seed_from_u64(0);
    // name, m, k, n, A given transposed (a view of [k, m]), B given transposed.
    let gpt = [
        ("qkv  768x128 @ 128x384 (Wᵀ)", 768, 128, 384, false, true),
        ("fc   768x128 @ 128x512 (Wᵀ)", 768, 128, 512, false, true),
        ("proj 768x512 @ 512x128 (Wᵀ)", 768, 512, 128, false, true),
        ("dX   768x384 @ 384x128 (W)", 768, 384, 128, false, false),
        ("dX   768x128 @ 128x512 (W)", 768, 128, 512, false, false),
        ("dW   384x768 @ 768x128 (dYᵀ)", 384, 768, 128, true, false),
        ("dW   128x768 @ 768x512 (dYᵀ)", 128, 768, 512, true, false),
    ];
    let squares_and_mlp = [
        ("128²", 128, 128, 128, false, false),
        ("1024²", 1024, 1024, 1024, false, false),
        ("2048²", 2048, 2048, 2048, false, false),
        ("1040²", 1040, 1040, 1040, false, false),
        ("1024x256 @ 256x1024", 1024, 256, 1024, false, false),
        ("fwd1 128x784 @ 784x400", 128, 784, 400, false, false),
        ("fwd2 128x400 @ 400x100", 128, 400, 100, false, false),
        ("dW1  784x128 @ 128x400 (xᵀ)", 784, 128, 400, true, false),
        ("dW2  400x128 @ 128x100 (h1ᵀ)", 400, 128, 100, true, false),
        ("dX2  128x100 @ 100x400 (W2ᵀ)", 128, 100, 400, false, true),
        ("dX1  128x400 @ 400x784 (W1ᵀ)", 128, 400, 784, false, true),
    ];
    let shapes: &[_] = if args.gpt { &gpt } else { &squares_and_mlp };
    for &(name, m, k, n, ta, tb) in shapes {
        let case = Case {
            name,
            m,
            k,
            n,
            ta,
            tb,
        };
        compare(&blas, &case, (threads, secs, args.evict), &mut rng);
    }
}

/// One product: `[m, k] @ [k, n]`, A and/or B given transposed (views of `[k, m]`, `[n, k]`).
struct Case {
    name: &'static str,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
}

/// Checks that both libraries agree on `case`, then times them for `secs` seconds,
/// interleaved, each call after writing `evict` MiB, and prints the best and
/// 10th-percentile rates.
fn compare(
    blas: &Blas,
    case: &Case,
    (threads, secs, evict): (usize, f64, usize),
    rng: &mut StdRng,
) {
    let Case {
        name,
        m,
        k,
        n,
        ta,
        tb,
    } = *case;
    let sa = if ta { [k, m] } else { [m, k] };
    let sb = if tb { [n, k] } else { [k, n] };
    let (a_st, b_st) = (
        Tensor::randn(&sa, DType::F32, rng),
        Tensor::randn(&sb, DType::F32, rng),
    );
    let a = if ta { a_st.t() } else { a_st.clone() };
    let b = if tb { b_st.t() } else { b_st.clone() };
    let (av, bv) = (a_st.to_vec::<f32>(), b_st.to_vec::<f32>());
    let mut c = vec![0f32; m * n];
    let flops = 2.0 * (m * k * n) as f64;
    // Same result first.
    let want = a.matmul(&b).to_vec::<f32>();
    blas.sgemm(ta, tb, m, n, k, &av, &bv, &mut c);
    let err = want
        .iter()
        .zip(&c)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        err <= 1e-3 * (k as f32).sqrt(),
        "{name}: results differ by {err}"
    );
    let mut ours = || drop(black_box(a.matmul(&b)));
    let mut theirs = || {
        blas.sgemm(ta, tb, m, n, k, &av, &bv, &mut c);
        black_box(&c);
    };
    let (mut ro, mut rt) = (Vec::new(), Vec::new());
    let mut junk = vec![0u8; evict << 20];
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        if threads == 1 {
            ro.extend(calls(&mut ours, flops, Instant::now(), &mut junk));
            rt.extend(calls(&mut theirs, flops, Instant::now(), &mut junk));
        } else {
            // The pause after the BLAS block outlasts its threads' spinning (OpenBLAS:
            // 2^28 cycles, about 0.1 s); rayon's threads go idle within milliseconds.
            for (f, rates, pause) in [
                (&mut ours as &mut dyn FnMut(), &mut ro, 20),
                (&mut theirs, &mut rt, 150),
            ] {
                let until = Instant::now() + Duration::from_millis(100);
                let block = calls(f, flops, until, &mut junk);
                rates.push(block.len() as f64 / block.iter().map(|r| 1.0 / r).sum::<f64>());
                std::thread::sleep(Duration::from_millis(pause));
            }
        }
    }
    let ((ob, op), (tb_, tp)) = (best_p10(ro), best_p10(rt));
    println!(
        "  {name:30} ours {ob:6.1} / {op:6.1} | BLAS {tb_:6.1} / {tp:6.1} | ratio {:.2} / {:.2}",
        ob / tb_,
        op / tp
    );
}
