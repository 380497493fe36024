use ferrograd::prelude::*;
use std::time::Instant;
fn main() {
    let shapes: [(&str, usize, usize, usize, bool, bool); 11] = [
        ("qkv fwd", 768, 128, 384, false, true),
        ("proj fwd", 768, 128, 128, false, true),
        ("fc1 fwd", 768, 128, 512, false, true),
        ("fc2 fwd", 768, 512, 128, false, true),
        ("head fwd", 768, 128, 84, false, true),
        ("qkv dX", 768, 384, 128, false, false),
        ("qkv dW", 384, 768, 128, true, false),
        ("fc1 dX", 768, 512, 128, false, false),
        ("fc1 dW", 512, 768, 128, true, false),
        ("fc2 dX", 768, 128, 512, false, false),
        ("fc2 dW", 128, 768, 512, true, false),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    use rand::SeedableRng;
    for (name, m, k, n, ta, tb) in shapes {
        let a = if ta {
            Tensor::randn(&[k, m], DType::F32, &mut rng).t()
        } else {
            Tensor::randn(&[m, k], DType::F32, &mut rng)
        };
        let b = if tb {
            Tensor::randn(&[n, k], DType::F32, &mut rng).t()
        } else {
            Tensor::randn(&[k, n], DType::F32, &mut rng)
        };
        for _ in 0..20 {
            let _ = a.matmul(&b);
        }
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            for _ in 0..50 {
                let _ = a.matmul(&b);
            }
            best = best.min(t.elapsed().as_secs_f64() / 50.0);
        }
        println!(
            "{name:10} {m}x{k}x{n} {:.3} ms {:.1} GFLOP/s",
            best * 1e3,
            2.0 * (m * k * n) as f64 / best / 1e9
        );
        if tb {
            let b = b.contiguous();
            let mut best = f64::MAX;
            for _ in 0..15 {
                let t = Instant::now();
                for _ in 0..50 {
                    let _ = a.matmul(&b);
                }
                best = best.min(t.elapsed().as_secs_f64() / 50.0);
            }
            println!("{name:10} contiguous B {:.3} ms", best * 1e3);
        }
    }
}
