//! The portable f32 matmul path (`matrixmultiply`), forced on in this process so that it is
//! tested on machines whose CPU would take an AVX kernel. Alone in its binary: the choice is
//! made once per process.

use ferrograd::prelude::*;
use ferrograd::Isa;
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn f32_matmul_on_the_portable_path_matches_a_naive_loop() {
    std::env::set_var("FERROGRAD_ISA", "portable");
    assert_eq!(Isa::active(), Isa::Portable);
    let mut rng = StdRng::seed_from_u64(3);
    for &(m, k, n) in &[(67, 129, 33), (128, 784, 40)] {
        let a = Tensor::randn(&[m, k], DType::F32, &mut rng);
        let b = Tensor::randn(&[n, k], DType::F32, &mut rng).t(); // a transposed view
        let got = a.matmul(&b).to_vec::<f64>();
        let (av, bv) = (a.to_vec::<f64>(), b.to_vec::<f64>());
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum();
                assert!(
                    (got[i * n + j] - want).abs() < 1e-4 * (k as f64).sqrt(),
                    "({i}, {j})"
                );
            }
        }
    }
}
