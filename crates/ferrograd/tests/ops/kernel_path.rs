//! The kernel path of this process (`FERROGRAD_ISA`, see `ferrograd::Isa`), and f32 products
//! on it against f64 loops. `scripts/test-kernel-paths.sh` runs this binary, and the suites
//! that exercise the kernels (convolution, matmul, recurrent, gradcheck, property tests), once
//! per path the CPU supports; the first test here fails a run that did not get the path it
//! asked for, so a path cannot silently go untested.

use ferrograd::prelude::*;
use ferrograd::Isa;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn the_requested_path_is_the_one_that_runs() {
    let active = Isa::active();
    println!("kernel path: {active} (this CPU: {})", Isa::detected());
    if let Ok(name) = std::env::var("FERROGRAD_ISA") {
        // Strict on purpose: a run that asked for a path must not pass on another one.
        let requested = Isa::parse(&name).expect("FERROGRAD_ISA names a path");
        assert_eq!(
            active, requested,
            "FERROGRAD_ISA={name} but {active} runs (a path this CPU lacks is never taken)"
        );
    } else {
        assert_eq!(active, Isa::detected());
    }
}

/// The paths this CPU supports, printed for `scripts/test-kernel-paths.sh`.
#[test]
#[ignore = "prints the supported paths for the script that runs the suites on each"]
fn supported_paths() {
    let names: Vec<_> = Isa::supported().iter().map(|isa| isa.name()).collect();
    println!("SUPPORTED {}", names.join(" "));
}

/// A digest of the bits of f32 products and of a convolutional network's gradients, printed
/// for `scripts/test-kernel-paths.sh`: the AVX2 and AVX-512 paths run the same chain of fused
/// multiply-adds for every element, so where the CPU has both their digests must be equal.
#[test]
#[ignore = "prints a digest of results for the script that compares the paths"]
fn result_digest() {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut rng = StdRng::seed_from_u64(21);
    let mut h = DefaultHasher::new();
    // (30, 1024, 70): A's rows 4 KiB apart, packed on AVX-512 only (in full panels where a
    // part of the product holds 12 rows or more).
    for (m, k, n) in [(128, 784, 400), (37, 300, 53), (5, 17, 1), (30, 1024, 70)] {
        let (a, b) = (
            operand(m, k, false, &mut rng),
            operand(k, n, true, &mut rng),
        );
        for v in a.matmul(&b).to_vec::<f32>() {
            v.to_bits().hash(&mut h);
        }
        let bias = Tensor::randn(&[n], DType::F32, &mut rng);
        for v in a.linear(&b.t(), Some(&bias)).to_vec::<f32>() {
            v.to_bits().hash(&mut h);
        }
    }
    for g in conv_grads(2).iter().flatten() {
        g.to_bits().hash(&mut h);
    }
    println!("DIGEST {:016x}", h.finish());
}

/// `a @ b` in f64 from the elements alone.
fn naive(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

/// An f32 `[rows, cols]` operand, row-major or a transposed view of a `[cols, rows]` tensor.
fn operand(rows: usize, cols: usize, transposed: bool, rng: &mut StdRng) -> Tensor {
    if transposed {
        Tensor::randn(&[cols, rows], DType::F32, rng).t()
    } else {
        Tensor::randn(&[rows, cols], DType::F32, rng)
    }
}

fn config() -> ProptestConfig {
    crate::common::proptest_config(200)
}

proptest! {
    #![proptest_config(config())]

    /// Every edge of the register tiles (rows not a multiple of 4, 6 or 12, columns not of 8,
    /// 16 or 32), both operand layouts, and sizes that split over the threads and over
    /// several k blocks.
    #[test]
    fn f32_products_match_f64_loops(
        m in 1usize..80,
        k in 1usize..300,
        n in 1usize..90,
        ta in any::<bool>(),
        tb in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (a, b) = (operand(m, k, ta, &mut rng), operand(k, n, tb, &mut rng));
        let got = a.matmul(&b).to_vec::<f64>();
        let want = naive(&a.to_vec::<f64>(), &b.to_vec::<f64>(), (m, k, n));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert!((g - w).abs() <= 1e-5 * (k as f64).sqrt() * (1.0 + w.abs()),
                "{m}×{k}×{n} ({ta}, {tb}) at {i}: {g} against {w}");
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Batches of small products (the tiniest by the direct loop, in groups of products per
    /// thread): every column block edge (16, 8, 4, 1), both layouts of the right operand, one
    /// right operand broadcast over the batch, in f32 and f64.
    #[test]
    fn batches_of_small_products_match_f64_loops(
        batch in 1usize..40,
        m in 1usize..20,
        k in 1usize..24,
        n in 1usize..40,
        tb in any::<bool>(),
        shared in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let a = Tensor::randn(&[batch, m, k], DType::F64, &mut rng);
        let rows = if shared { 1 } else { batch };
        // Stored as [rows, n, k] and transposed after the cast, so that the f32 operand is a
        // strided view too.
        let stored = if tb { [rows, n, k] } else { [rows, k, n] };
        let b_stored = Tensor::randn(&stored, DType::F64, &mut rng);
        let view = |t: Tensor| if tb { t.transpose(1, 2) } else { t };
        let b = view(b_stored.clone());
        for dtype in [DType::F32, DType::F64] {
            let b_d = view(b_stored.to_dtype(dtype));
            let got = a.to_dtype(dtype).matmul(&b_d).to_vec::<f64>();
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            for i in 0..batch {
                let bi = b.narrow(0, if shared { 0 } else { i }, 1).contiguous().to_vec::<f64>();
                let ai = a.narrow(0, i, 1).to_vec::<f64>();
                for (j, w) in naive(&ai, &bi, (m, k, n)).iter().enumerate() {
                    let g = got[i * m * n + j];
                    prop_assert!((g - w).abs() <= tol * (k as f64).sqrt() * (1.0 + w.abs()),
                        "{batch}×{m}×{k}×{n} ({tb}, {shared}) {dtype} at {i}, {j}: {g} against {w}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// `linear`'s bias joins the product as its row panels are stored: the same bits as the
    /// product and the addition written out, on every tile edge, both layouts of the input
    /// and the weight, and over several k blocks (where the bias must join only the last).
    #[test]
    fn linear_is_the_product_plus_the_bias_to_the_bit(
        m in 1usize..80,
        k in 1usize..600,
        n in 1usize..90,
        tx in any::<bool>(),
        tw in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (x, w) = (operand(m, k, tx, &mut rng), operand(n, k, tw, &mut rng));
        let b = Tensor::randn(&[n], DType::F32, &mut rng);
        let want = (&x.matmul(&w.t()) + &b).to_vec::<f32>();
        prop_assert_eq!(x.linear(&w, Some(&b)).to_vec::<f32>(), want);
    }
}

/// [`linear_is_the_product_plus_the_bias_to_the_bit`] on products that split over the
/// threads by columns and by rows, with leading axes, and on the GPT's shapes; then on one
/// thread, where a part holds several blocks of B's columns (beyond 1024) and of A's rows
/// whatever the machine's thread count.
#[test]
fn large_linear_products_are_the_product_plus_the_bias_to_the_bit() {
    let mut rng = StdRng::seed_from_u64(12);
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool");
    for (m, k, n) in [
        (768, 128, 384),
        (768, 512, 128),
        (300, 600, 530),
        (2000, 40, 24),
        (40, 300, 2100),
    ] {
        let x = Tensor::randn(&[2, m / 2, k], DType::F32, &mut rng);
        let w = Tensor::randn(&[n, k], DType::F32, &mut rng);
        let b = Tensor::randn(&[n], DType::F32, &mut rng);
        let want = (&x.matmul(&w.t()) + &b).to_vec::<f32>();
        assert_eq!(x.linear(&w, Some(&b)).to_vec::<f32>(), want, "{m}×{k}×{n}");
        let alone = one_thread.install(|| x.linear(&w, Some(&b)).to_vec::<f32>());
        assert_eq!(alone, want, "{m}×{k}×{n} on one thread");
    }
}

#[test]
fn large_products_match_f64_loops_and_repeat_to_the_bit() {
    let mut rng = StdRng::seed_from_u64(11);
    // Several column blocks of B (of 256 to 1024 columns, as the path and the L2 size have
    // it), several k blocks, row blocks split over the threads. Then row-major operands whose
    // rows lie 4 KiB apart: A's (packed on AVX-512) and B's (packed where it could otherwise be
    // read in place). On one thread as well, where A's panels are two full ones and a partial
    // one whatever the machine's thread count.
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool");
    for ((m, k, n), b_transposed) in [
        ((300, 600, 530), true),
        ((37, 1030, 260), true),
        ((24, 300, 2100), true),
        ((30, 1024, 70), false),
        ((40, 256, 1024), false),
    ] {
        let (a, b) = (
            operand(m, k, false, &mut rng),
            operand(k, n, b_transposed, &mut rng),
        );
        let got = a.matmul(&b).to_vec::<f32>();
        let want = naive(&a.to_vec::<f64>(), &b.to_vec::<f64>(), (m, k, n));
        for (i, (&g, w)) in got.iter().zip(&want).enumerate() {
            let tol = 1e-5 * (k as f64).sqrt() * (1.0 + w.abs());
            assert!((f64::from(g) - w).abs() <= tol, "{m}×{k}×{n} at {i}");
        }
        assert_eq!(a.matmul(&b).to_vec::<f32>(), got, "{m}×{k}×{n} again");
        let alone = one_thread.install(|| a.matmul(&b).to_vec::<f32>());
        assert_eq!(alone, got, "{m}×{k}×{n} on one thread");
    }
}

/// The gradients of a small convolutional network's loss, run on a pool of `threads`.
fn conv_grads(threads: usize) -> Vec<Vec<f32>> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    pool.install(|| {
        let mut rng = StdRng::seed_from_u64(5);
        let x = Tensor::randn(&[16, 3, 14, 14], DType::F32, &mut rng).requires_grad();
        let w1 = Tensor::randn(&[24, 3, 3, 3], DType::F32, &mut rng).requires_grad();
        let w2 = Tensor::randn(&[16, 24, 4, 4], DType::F32, &mut rng).requires_grad();
        let w3 = Tensor::randn(&[16 * 7 * 7, 10], DType::F32, &mut rng).requires_grad();
        let h = x.conv2d(&w1, &ConvOpts::new().padding(1)).relu();
        let h = h.conv2d(&w2, &ConvOpts::new().stride(2).padding(1)).relu();
        let loss = h.reshape(&[16, 16 * 7 * 7]).matmul(&w3).tanh().sum();
        let grads = loss.backward();
        [&x, &w1, &w2, &w3]
            .iter()
            .map(|t| grads.get(t).expect("a gradient").to_vec::<f32>())
            .collect()
    })
}

#[test]
fn results_are_the_same_bits_on_any_thread_count() {
    let one = conv_grads(1);
    assert_eq!(conv_grads(2), one);
    assert_eq!(conv_grads(3), one);
}
