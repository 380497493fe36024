//! Forward values of the tensor core: every op against hand-computed results, broadcasting,
//! views, f64 paths and the panic messages.

use crate::common::turn;

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn t32(data: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape)
}

fn t64(data: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape)
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "lengths differ: {a:?} vs {b:?}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y} ({a:?} vs {b:?})"
        );
    }
}

#[test]
fn creation_and_metadata() {
    let a = t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    assert_eq!(a.shape(), &[2, 2]);
    assert_eq!(a.dtype(), DType::F32);
    assert_eq!(a.to_vec::<f64>(), vec![1.0, 2.0, 3.0, 4.0]);
    let s = Tensor::scalar(2.5f64);
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.item(), 2.5);
    assert_eq!(
        Tensor::zeros(&[2, 3], DType::F32).to_vec::<f32>(),
        vec![0.0; 6]
    );
    assert_eq!(Tensor::ones(&[3], DType::F64).to_vec::<f64>(), vec![1.0; 3]);
    assert_eq!(
        Tensor::full(&[2], 7.0, DType::F32).to_vec::<f32>(),
        vec![7.0, 7.0]
    );
    assert_eq!(
        Tensor::arange(0.0, 5.0, 2.0, DType::F64).to_vec::<f64>(),
        vec![0.0, 2.0, 4.0]
    );
    assert_eq!(a.to_dtype(DType::F64).dtype(), DType::F64);
    assert!(Tensor::try_from_vec(vec![1.0f32; 5], &[2, 3]).is_err());
}

#[test]
fn random_creation_is_reproducible_by_seed() {
    let a = Tensor::randn(&[100], DType::F32, &mut StdRng::seed_from_u64(7));
    let b = Tensor::randn(&[100], DType::F32, &mut StdRng::seed_from_u64(7));
    let c = Tensor::randn(&[100], DType::F32, &mut StdRng::seed_from_u64(8));
    assert_eq!(a.to_vec::<f32>(), b.to_vec::<f32>());
    assert_ne!(a.to_vec::<f32>(), c.to_vec::<f32>());
    let mean = a.mean().item();
    assert!(mean.abs() < 0.3, "mean of 100 normal draws: {mean}");
    let u = Tensor::rand_uniform(
        &[1000],
        -2.0,
        3.0,
        DType::F64,
        &mut StdRng::seed_from_u64(1),
    )
    .to_vec::<f64>();
    assert!(u.iter().all(|&v| (-2.0..3.0).contains(&v)));
    let _turn = turn();
    ferrograd::tensor::manual_seed(3);
    let d1 = ferrograd::tensor::with_default_rng(|r| Tensor::randn(&[4], DType::F32, r));
    ferrograd::tensor::manual_seed(3);
    let d2 = ferrograd::tensor::with_default_rng(|r| Tensor::randn(&[4], DType::F32, r));
    assert_eq!(d1.to_vec::<f32>(), d2.to_vec::<f32>());
}

#[test]
fn unary_values() {
    let x = t64(&[-1.0, 0.0, 0.5, 2.0], &[4]);
    let v = |t: Tensor| t.to_vec::<f64>();
    close(&v(x.neg()), &[1.0, 0.0, -0.5, -2.0], 0.0);
    close(
        &v(x.exp()),
        &[(-1f64).exp(), 1.0, 0.5f64.exp(), 2f64.exp()],
        1e-15,
    );
    close(&v(x.abs()), &[1.0, 0.0, 0.5, 2.0], 0.0);
    close(&v(x.square()), &[1.0, 0.0, 0.25, 4.0], 0.0);
    close(&v(x.relu()), &[0.0, 0.0, 0.5, 2.0], 0.0);
    close(&v(x.leaky_relu(0.1)), &[-0.1, 0.0, 0.5, 2.0], 1e-15);
    close(
        &v(x.tanh()),
        &[(-1f64).tanh(), 0.0, 0.5f64.tanh(), 2f64.tanh()],
        1e-15,
    );
    close(
        &v(x.sigmoid()),
        &[
            1.0 / (1.0 + 1f64.exp()),
            0.5,
            1.0 / (1.0 + (-0.5f64).exp()),
            1.0 / (1.0 + (-2f64).exp()),
        ],
        1e-15,
    );
    close(
        &v(x.softplus()),
        &[
            (1.0 + (-1f64).exp()).ln(),
            2f64.ln(),
            (1.0 + 0.5f64.exp()).ln(),
            (1.0 + 2f64.exp()).ln(),
        ],
        1e-15,
    );
    close(
        &v(x.sin()),
        &[(-1f64).sin(), 0.0, 0.5f64.sin(), 2f64.sin()],
        1e-15,
    );
    close(
        &v(x.cos()),
        &[(-1f64).cos(), 1.0, 0.5f64.cos(), 2f64.cos()],
        1e-15,
    );
    close(&v(x.sign()), &[-1.0, 0.0, 1.0, 1.0], 0.0);
    // GELU(x) = x Φ(x): Φ(-1) = 0.158655..., Φ(0.5) = 0.691462..., Φ(2) = 0.977249...
    close(
        &v(x.gelu()),
        &[
            -0.15865525393145707,
            0.0,
            0.5 * 0.6914624612740131,
            2.0 * 0.9772498680518208,
        ],
        1e-12,
    );
    let p = t64(&[1.0, 4.0, 9.0], &[3]);
    close(&v(p.sqrt()), &[1.0, 2.0, 3.0], 0.0);
    close(&v(p.log()), &[0.0, 4f64.ln(), 9f64.ln()], 1e-15);
    close(&v(p.powf(1.5)), &[1.0, 8.0, 27.0], 1e-14);
    close(&v(x.clamp(-0.5, 1.0)), &[-0.5, 0.0, 0.5, 1.0], 0.0);
}

#[test]
fn softplus_and_sigmoid_are_stable_for_large_inputs() {
    let x = t32(&[-1000.0, 1000.0, 100.0], &[3]);
    assert_eq!(x.softplus().to_vec::<f32>(), vec![0.0, 1000.0, 100.0]);
    assert_eq!(x.sigmoid().to_vec::<f32>(), vec![0.0, 1.0, 1.0]);
}

#[test]
fn binary_ops_and_operators() {
    let a = t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t32(&[10.0, 20.0, 30.0, 40.0], &[2, 2]);
    assert_eq!((&a + &b).to_vec::<f32>(), vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!((&b - &a).to_vec::<f32>(), vec![9.0, 18.0, 27.0, 36.0]);
    assert_eq!((&a * &b).to_vec::<f32>(), vec![10.0, 40.0, 90.0, 160.0]);
    assert_eq!((&b / &a).to_vec::<f32>(), vec![10.0, 10.0, 10.0, 10.0]);
    assert_eq!((-&a).to_vec::<f32>(), vec![-1.0, -2.0, -3.0, -4.0]);
    assert_eq!((&a * 2.0).to_vec::<f32>(), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!((&a + 1.0).to_vec::<f32>(), vec![2.0, 3.0, 4.0, 5.0]);
    assert_eq!((1.0 - &a).to_vec::<f32>(), vec![0.0, -1.0, -2.0, -3.0]);
    assert_eq!((12.0 / &a).to_vec::<f32>(), vec![12.0, 6.0, 4.0, 3.0]);
    assert_eq!(
        (a.clone() * b.clone()).to_vec::<f32>(),
        vec![10.0, 40.0, 90.0, 160.0]
    );
    let c = t32(&[2.0, 1.0, 5.0, 0.0], &[2, 2]);
    assert_eq!(a.maximum(&c).to_vec::<f32>(), vec![2.0, 2.0, 5.0, 4.0]);
    assert_eq!(a.minimum(&c).to_vec::<f32>(), vec![1.0, 1.0, 3.0, 0.0]);
    assert_eq!(a.gt(&c).to_vec::<f32>(), vec![0.0, 1.0, 0.0, 1.0]);
    assert_eq!(a.le(&c).to_vec::<f32>(), vec![1.0, 0.0, 1.0, 0.0]);
    assert_eq!(a.eq_scalar(3.0).to_vec::<f32>(), vec![0.0, 0.0, 1.0, 0.0]);
    assert_eq!(a.ne_scalar(3.0).to_vec::<f32>(), vec![1.0, 1.0, 0.0, 1.0]);
    assert_eq!(a.lt_scalar(3.0).to_vec::<f32>(), vec![1.0, 1.0, 0.0, 0.0]);
    assert_eq!(a.ge_scalar(3.0).to_vec::<f32>(), vec![0.0, 0.0, 1.0, 1.0]);
    let mask = t32(&[1.0, 0.0], &[2]);
    assert_eq!(
        mask.where_cond(&a, &b).to_vec::<f32>(),
        vec![1.0, 20.0, 3.0, 40.0]
    );
}

#[test]
fn mixed_dtypes_promote_to_f64() {
    let a = t32(&[1.5], &[1]);
    let b = t64(&[0.25], &[1]);
    let c = &a + &b;
    assert_eq!(c.dtype(), DType::F64);
    assert_eq!(c.to_vec::<f64>(), vec![1.75]);
}

#[test]
fn broadcasting() {
    let col = t32(&[1.0, 2.0, 3.0], &[3, 1]);
    let row = t32(&[10.0, 20.0, 30.0, 40.0], &[1, 4]);
    let s = &col + &row;
    assert_eq!(s.shape(), &[3, 4]);
    assert_eq!(
        s.to_vec::<f32>(),
        vec![11.0, 21.0, 31.0, 41.0, 12.0, 22.0, 32.0, 42.0, 13.0, 23.0, 33.0, 43.0]
    );
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32).reshape(&[2, 3, 4]);
    let v = t32(&[1.0, 10.0, 100.0, 1000.0], &[4]);
    let p = &x * &v;
    assert_eq!(p.shape(), &[2, 3, 4]);
    let want: Vec<f32> = (0..24)
        .map(|i| i as f32 * [1.0, 10.0, 100.0, 1000.0][i % 4])
        .collect();
    assert_eq!(p.to_vec::<f32>(), want);
    let sc = &x * &Tensor::scalar(2.0f32);
    assert_eq!(
        sc.to_vec::<f32>(),
        (0..24).map(|i| 2.0 * i as f32).collect::<Vec<_>>()
    );
}

#[test]
fn large_elementwise_runs_the_parallel_path() {
    let n = 1 << 20;
    let a = Tensor::arange(0.0, n as f64, 1.0, DType::F32);
    let b = Tensor::ones(&[n], DType::F32);
    let s = (&a + &b).to_vec::<f32>();
    assert!(s.iter().enumerate().all(|(i, &v)| v == i as f32 + 1.0));
    // Broadcast rows across threads: [1024, 1024] + [1024].
    let m = a.reshape(&[1024, 1024]);
    let r = Tensor::arange(0.0, 1024.0, 1.0, DType::F32);
    let out = (&m + &r).to_vec::<f32>();
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, &v)| v == i as f32 + (i % 1024) as f32));
    // f32 accumulation: within a few ulps of the exact 549755289600.
    let total = a.sum().item();
    let exact = (n as f64) * (n as f64 - 1.0) / 2.0;
    assert!((total - exact).abs() / exact < 2e-6, "{total} vs {exact}");
    assert_eq!(a.to_dtype(DType::F64).sum().item(), exact);
}

#[test]
fn reductions() {
    let x = t64(&[1.0, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3]);
    assert_eq!(x.sum().item(), 21.0);
    assert_eq!(x.mean().item(), 3.5);
    assert_eq!(x.sum_axes(&[0], false).to_vec::<f64>(), vec![5.0, 7.0, 9.0]);
    assert_eq!(x.sum_axes(&[1], false).to_vec::<f64>(), vec![9.0, 12.0]);
    assert_eq!(x.sum_axes(&[1], true).shape(), &[2, 1]);
    assert_eq!(x.mean_axes(&[0, 1], true).shape(), &[1, 1]);
    assert_eq!(x.mean_axes(&[0, 1], true).item(), 3.5);
    assert_eq!(x.max_axes(&[1], false).to_vec::<f64>(), vec![5.0, 6.0]);
    assert_eq!(x.min_axes(&[0], false).to_vec::<f64>(), vec![1.0, 2.0, 3.0]);
    assert_eq!(x.max().item(), 6.0);
    assert_eq!(x.min().item(), 1.0);
    assert_eq!(x.argmax(1).to_vec::<f64>(), vec![1.0, 2.0]);
    assert_eq!(x.argmin(0).to_vec::<f64>(), vec![0.0, 1.0, 0.0]);
    // Non-adjacent axes of a 3-d tensor: [2, 3, 4] summed over 0 and 2.
    let y = Tensor::arange(0.0, 24.0, 1.0, DType::F64).reshape(&[2, 3, 4]);
    let want: Vec<f64> = (0..3)
        .map(|j| {
            (0..2)
                .flat_map(|i| (0..4).map(move |k| (i * 12 + j * 4 + k) as f64))
                .sum()
        })
        .collect();
    assert_eq!(y.sum_axes(&[0, 2], false).to_vec::<f64>(), want);
    assert_eq!(y.sum_axes(&[2, 0], true).shape(), &[1, 3, 1]);
}

#[test]
fn views_share_storage() {
    let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32).reshape(&[2, 3]);
    let t = a.transpose(0, 1);
    assert!(t.shares_storage(&a));
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(t.to_vec::<f32>(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let n = a.narrow(1, 1, 2);
    assert!(n.shares_storage(&a));
    assert_eq!(n.to_vec::<f32>(), vec![1.0, 2.0, 4.0, 5.0]);
    let b = a.broadcast_to(&[4, 2, 3]);
    assert!(b.shares_storage(&a));
    assert_eq!(b.sum().item(), 60.0);
    assert_eq!(
        b.sum_axes(&[0], false).to_vec::<f32>(),
        vec![0.0, 4.0, 8.0, 12.0, 16.0, 20.0]
    );
    let p = Tensor::arange(0.0, 24.0, 1.0, DType::F32)
        .reshape(&[2, 3, 4])
        .permute(&[2, 0, 1]);
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert_eq!(p.to_vec::<f32>()[..6], [0.0, 4.0, 8.0, 12.0, 16.0, 20.0]);
    assert!(a.reshape(&[3, 2]).shares_storage(&a));
    // Reshaping a non-contiguous view copies.
    let r = t.reshape(&[6]);
    assert_eq!(r.to_vec::<f32>(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    // Element-wise on views: transposed + narrow.
    let s = &t + &a.transpose(0, 1);
    assert_eq!(s.to_vec::<f32>(), vec![0.0, 6.0, 2.0, 8.0, 4.0, 10.0]);
}

#[test]
fn shape_ops() {
    let a = t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t32(&[5.0, 6.0], &[1, 2]);
    let c = Tensor::cat(&[&a, &b], 0);
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(c.to_vec::<f32>(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let d = Tensor::cat(&[&a, &a], 1);
    assert_eq!(
        d.to_vec::<f32>(),
        vec![1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]
    );
    let s = Tensor::stack(&[&a, &a], 0);
    assert_eq!(s.shape(), &[2, 2, 2]);
    let s1 = Tensor::stack(&[&a, &a], 2);
    assert_eq!(
        s1.to_vec::<f32>(),
        vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]
    );
    assert_eq!(a.narrow(0, 1, 1).to_vec::<f32>(), vec![3.0, 4.0]);
    assert_eq!(
        c.index_select(0, &[2, 0]).to_vec::<f32>(),
        vec![5.0, 6.0, 1.0, 2.0]
    );
    assert_eq!(
        c.index_select(1, &[1, 1]).to_vec::<f32>(),
        vec![2.0, 2.0, 4.0, 4.0, 6.0, 6.0]
    );
    let z = Tensor::zeros(&[3], DType::F32).index_add(0, &[0, 2, 0], &t32(&[1.0, 2.0, 3.0], &[3]));
    assert_eq!(z.to_vec::<f32>(), vec![4.0, 0.0, 2.0]);
    let p = a.pad(&[(1, 0), (0, 2)], -1.0);
    assert_eq!(p.shape(), &[3, 4]);
    assert_eq!(
        p.to_vec::<f32>(),
        vec![-1.0, -1.0, -1.0, -1.0, 1.0, 2.0, -1.0, -1.0, 3.0, 4.0, -1.0, -1.0]
    );
    assert_eq!(a.unsqueeze(0).shape(), &[1, 2, 2]);
    assert_eq!(a.unsqueeze(2).squeeze(2).shape(), &[2, 2]);
    assert_eq!(a.reshape(&[4]).to_vec::<f32>(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        Tensor::zeros(&[2, 3, 4], DType::F32)
            .flatten_from(1)
            .shape(),
        &[2, 12]
    );
}

#[test]
fn softmax_is_stable() {
    let x = t32(&[1000.0, 1000.0, 0.0, 1.0, 2.0, 3.0], &[2, 3]);
    let s = x.softmax(1).to_vec::<f64>();
    assert!(s.iter().all(|v| v.is_finite()));
    close(&s[..3], &[0.5, 0.5, 0.0], 1e-7);
    let e: Vec<f64> = [1f64, 2.0, 3.0].iter().map(|v| v.exp()).collect();
    let z: f64 = e.iter().sum();
    close(&s[3..], &[e[0] / z, e[1] / z, e[2] / z], 1e-6);
    let ls = x.log_softmax(1).to_vec::<f64>();
    assert!(ls.iter().all(|v| v.is_finite()));
    close(&ls[..2], &[-(2f64.ln()), -(2f64.ln())], 1e-6);
    assert!(ls[2] < -999.0);
    // Along axis 0 of a [3, 2] tensor.
    let col = x.reshape(&[3, 2]).softmax(0);
    let sums = col.sum_axes(&[0], false).to_vec::<f64>();
    close(&sums, &[1.0, 1.0], 1e-6);
}

fn naive_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

#[test]
fn matmul_matches_a_naive_triple_loop() {
    let mut rng = StdRng::seed_from_u64(11);
    let (m, k, n) = (67, 129, 33);
    let a = Tensor::randn(&[m, k], DType::F32, &mut rng);
    let b = Tensor::randn(&[k, n], DType::F32, &mut rng);
    let want = naive_matmul(&a.to_vec::<f64>(), &b.to_vec::<f64>(), m, k, n);
    close(&a.matmul(&b).to_vec::<f64>(), &want, 1e-4);
    let a64 = a.to_dtype(DType::F64);
    let b64 = b.to_dtype(DType::F64);
    close(&a64.matmul(&b64).to_vec::<f64>(), &want, 1e-12);
}

#[test]
fn matmul_blocking_edges_and_transposed_operands() {
    // Shapes that cross every block edge of the f32 kernel (MR 12, NR 32, K and M blocks, the
    // column block of 1024), with A and B also given as transposed views.
    let mut rng = StdRng::seed_from_u64(12);
    for &(m, k, n) in &[
        (1, 1, 1),
        (5, 300, 7),
        (13, 33, 65),
        (600, 520, 70),
        (40, 1100, 1030),
        (128, 784, 400),
    ] {
        let a = Tensor::randn(&[m, k], DType::F32, &mut rng);
        let b = Tensor::randn(&[k, n], DType::F32, &mut rng);
        check_matmul_layouts(&a, &b);
    }
}

/// `a @ b` against the naive loop with A and B in all four layouts (row-major, and
/// column-major through a transposed copy viewed back).
fn check_matmul_layouts(a: &Tensor, b: &Tensor) {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    let want = naive_matmul(&a.to_vec::<f64>(), &b.to_vec::<f64>(), m, k, n);
    let tol = 1e-5 * (k as f64).sqrt();
    let at = a.t().contiguous().t();
    let bt = b.t().contiguous().t();
    for (x, y) in [(a, b), (&at, b), (a, &bt), (&at, &bt)] {
        close(&x.matmul(y).to_vec::<f64>(), &want, tol);
    }
}

#[test]
fn matmul_every_edge_tile() {
    // Every row count of a partial 12-row tile, every column count of a partial 16- and
    // 32-wide tile, k within and across the 256-step block.
    let mut rng = StdRng::seed_from_u64(13);
    for m in 1..=13 {
        for n in [1, 4, 15, 16, 17, 31, 32, 33, 100] {
            for k in [1, 7, 257] {
                let a = Tensor::randn(&[m, k], DType::F32, &mut rng);
                let b = Tensor::randn(&[k, n], DType::F32, &mut rng);
                check_matmul_layouts(&a, &b);
            }
        }
    }
}

#[test]
fn matmul_threaded_shapes_and_unaligned_operands() {
    // Products large enough to be split between threads (by rows and by columns), with
    // operands that start one element into their buffer (not on a cache line).
    let mut rng = StdRng::seed_from_u64(14);
    for &(m, k, n) in &[
        (128, 400, 100),
        (400, 128, 100),
        (784, 128, 400),
        (130, 300, 500),
    ] {
        let a = Tensor::randn(&[m, k], DType::F32, &mut rng);
        let b = Tensor::randn(&[k, n], DType::F32, &mut rng);
        check_matmul_layouts(&a, &b);
        let a1 = Tensor::randn(&[m * k + 1], DType::F32, &mut rng).narrow(0, 1, m * k);
        let b1 = Tensor::randn(&[k * n + 1], DType::F32, &mut rng).narrow(0, 1, k * n);
        check_matmul_layouts(&a1.reshape(&[m, k]), &b1.reshape(&[k, n]));
    }
}

#[test]
fn matmul_by_a_lone_row_or_column() {
    // A matrix times a vector and a vector times a matrix, large enough for the thread pool
    // and for several blocks of 1024 output columns, in every layout and in f64.
    let mut rng = StdRng::seed_from_u64(15);
    for &(m, k, n) in &[(300, 1000, 1), (5000, 30, 1), (1, 700, 2500), (1, 1, 3000)] {
        let a = Tensor::randn(&[m, k], DType::F32, &mut rng);
        let b = Tensor::randn(&[k, n], DType::F32, &mut rng);
        check_matmul_layouts(&a, &b);
        let (a64, b64) = (a.to_dtype(DType::F64), b.to_dtype(DType::F64));
        let want = naive_matmul(&a.to_vec::<f64>(), &b.to_vec::<f64>(), m, k, n);
        close(&a64.matmul(&b64).to_vec::<f64>(), &want, 1e-12);
    }
}

#[test]
fn matmul_on_views_and_batches() {
    let a = t32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    // a^T (a transposed view) @ a: [3, 3].
    let g = a.transpose(0, 1).matmul(&a);
    assert_eq!(
        g.to_vec::<f32>(),
        vec![17.0, 22.0, 27.0, 22.0, 29.0, 36.0, 27.0, 36.0, 45.0]
    );
    // Batched with a broadcast batch axis: [2, 2, 3] @ [3, 1].
    let batch = Tensor::stack(&[&a, &(&a * 2.0)], 0);
    let v = t32(&[1.0, 0.0, -1.0], &[3, 1]);
    let out = batch.matmul(&v);
    assert_eq!(out.shape(), &[2, 2, 1]);
    assert_eq!(out.to_vec::<f32>(), vec![-2.0, -2.0, -4.0, -4.0]);
    // 1-D operands.
    let x = t32(&[1.0, 1.0], &[2]);
    assert_eq!(x.matmul(&a).to_vec::<f32>(), vec![5.0, 7.0, 9.0]);
    assert_eq!(
        a.matmul(&t32(&[1.0, 1.0, 1.0], &[3])).to_vec::<f32>(),
        vec![6.0, 15.0]
    );
    assert_eq!(x.matmul(&x).shape(), &[] as &[usize]);
    assert!(a.try_matmul(&a).is_err());
}

#[test]
fn display_prints_like_numpy() {
    let a = t32(&[1.0, 2.5, -3.0, 4.0], &[2, 2]);
    assert_eq!(
        format!("{a}"),
        "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]], shape=[2, 2], dtype=f32)"
    );
    let i = Tensor::arange(0.0, 3.0, 1.0, DType::F64);
    assert_eq!(format!("{i}"), "tensor([0., 1., 2.], shape=[3], dtype=f64)");
    let long = Tensor::zeros(&[2000], DType::F32);
    assert_eq!(
        format!("{long}"),
        "tensor([0., 0., 0., ..., 0., 0., 0.], shape=[2000], dtype=f32)"
    );
    assert_eq!(
        format!("{}", Tensor::scalar(1.5f32)),
        "tensor(1.5000, shape=[], dtype=f32)"
    );
}

#[test]
#[should_panic(expected = "matmul: inner dimensions differ: [2, 3] @ [4, 5]")]
fn matmul_shape_mismatch_names_both_shapes() {
    let _ = Tensor::zeros(&[2, 3], DType::F32).matmul(&Tensor::zeros(&[4, 5], DType::F32));
}

#[test]
#[should_panic(expected = "add: shapes [2, 3] and [4] do not broadcast")]
fn broadcast_mismatch_names_op_and_shapes() {
    let _ = &Tensor::zeros(&[2, 3], DType::F32) + &Tensor::zeros(&[4], DType::F32);
}

#[test]
#[should_panic(expected = "reshape: cannot reshape [2, 3] (6 elements) into [4] (4 elements)")]
fn reshape_mismatch() {
    let _ = Tensor::zeros(&[2, 3], DType::F32).reshape(&[4]);
}

#[test]
#[should_panic(expected = "cat: shapes [2, 3] and [2, 4] differ outside axis 0")]
fn cat_mismatch() {
    let a = Tensor::zeros(&[2, 3], DType::F32);
    let _ = Tensor::cat(&[&a, &Tensor::zeros(&[2, 4], DType::F32)], 0);
}

#[test]
#[should_panic(expected = "sum_axes: axis 2 out of range for shape [2, 3]")]
fn bad_axis() {
    let _ = Tensor::zeros(&[2, 3], DType::F32).sum_axes(&[2], false);
}

#[test]
#[should_panic(expected = "index_select: index 3 out of range for axis 0 of shape [3]")]
fn index_out_of_range() {
    let _ = Tensor::zeros(&[3], DType::F32).index_select(0, &[3]);
}

#[test]
#[should_panic(expected = "broadcast_to: cannot broadcast [2, 3] to [3, 3]")]
fn broadcast_to_mismatch() {
    let _ = Tensor::zeros(&[2, 3], DType::F32).broadcast_to(&[3, 3]);
}

#[test]
fn try_forms_return_errors() {
    let a = Tensor::zeros(&[2, 3], DType::F32);
    assert!(a.try_reshape(&[5]).is_err());
    assert!(a.try_broadcast_to(&[3, 3]).is_err());
    assert!(a.try_index_select(1, &[3]).is_err());
    assert!(Tensor::try_cat(&[&a, &Tensor::zeros(&[3, 2], DType::F32)], 0).is_err());
    let e = a.try_matmul(&a).unwrap_err().to_string();
    assert_eq!(e, "matmul: inner dimensions differ: [2, 3] @ [2, 3]");
}

#[test]
fn ops_on_several_tensors_promote_by_one_rule_in_any_order() {
    let (a, b, i) = (
        Tensor::from_vec(vec![1.5f32, 2.5], &[2]),
        Tensor::from_vec(vec![0.25f64, 0.75], &[2]),
        Tensor::from_vec(vec![3i64, 4], &[2]),
    );
    let cond = Tensor::from_vec(vec![1.0f32, 0.0], &[2]);
    for (x, y, want) in [
        (&a, &b, DType::F64),
        (&b, &a, DType::F64),
        (&i, &a, DType::F32),
        (&a, &i, DType::F32),
        (&i, &b, DType::F64),
        (&i, &i, DType::I64),
    ] {
        assert_eq!(x.dtype().promote(y.dtype()), want);
        assert_eq!(Tensor::cat(&[x, y], 0).dtype(), want, "cat");
        assert_eq!(Tensor::stack(&[x, y], 0).dtype(), want, "stack");
        if want.is_float() {
            assert_eq!((x + y).dtype(), want, "add");
            assert_eq!(cond.where_cond(x, y).dtype(), want, "where_cond");
        }
    }
    // The values survive the promotion exactly (f32 to f64 is exact).
    assert_eq!(
        Tensor::cat(&[&a, &b], 0).to_vec::<f64>(),
        [1.5, 2.5, 0.25, 0.75]
    );
    let three = Tensor::cat(&[&i, &a, &b], 0);
    assert_eq!(three.dtype(), DType::F64);
    assert_eq!(three.to_vec::<f64>(), [3.0, 4.0, 1.5, 2.5, 0.25, 0.75]);
}

#[test]
fn linear_is_the_product_with_the_weight_transposed_plus_the_bias() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let w = Tensor::from_vec(vec![1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5], &[2, 3]);
    let b = Tensor::from_vec(vec![10.0f32, 20.0], &[2]);
    assert_eq!(
        x.linear(&w, Some(&b)).to_vec::<f32>(),
        [8.0, 23.0, 8.0, 27.5]
    );
    assert_eq!(x.linear(&w, None).to_vec::<f32>(), [-2.0, 3.0, -2.0, 7.5]);
    // Leading axes are kept; an empty batch gives an empty result.
    assert_eq!(
        x.reshape(&[1, 2, 3]).linear(&w, Some(&b)).shape(),
        [1, 2, 2]
    );
    let none = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!(none.linear(&w, Some(&b)).shape(), [0, 2]);
    // No inputs: the bias alone; the weight's gradient is empty, the bias's the row sums.
    let empty_in = Tensor::zeros(&[2, 0], DType::F32);
    let empty_w = Tensor::zeros(&[2, 0], DType::F32).requires_grad();
    let bt = b.requires_grad();
    let y = empty_in.linear(&empty_w, Some(&bt));
    assert_eq!(y.to_vec::<f32>(), [10.0, 20.0, 10.0, 20.0]);
    let g = grad(&(&y * &y).sum(), &[&empty_w, &bt]);
    assert_eq!(g[0].shape(), [2, 0]);
    assert_eq!(g[1].to_vec::<f32>(), [40.0, 80.0]);
}

#[test]
fn linear_refuses_operands_that_do_not_fit() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let w = Tensor::zeros(&[4, 3], DType::F32);
    let cases = [
        (x.clone(), Tensor::zeros(&[4, 2], DType::F32), None),
        (x.clone(), Tensor::zeros(&[3], DType::F32), None),
        (Tensor::scalar(1.0f32), w.clone(), None),
        (x.clone(), w.clone(), Some(Tensor::zeros(&[3], DType::F32))),
        (
            x.clone(),
            w.clone(),
            Some(Tensor::zeros(&[1, 4], DType::F32)),
        ),
        (x.clone(), w.to_dtype(DType::I64), None),
    ];
    for (x, w, b) in cases {
        let err = x.try_linear(&w, b.as_ref()).unwrap_err().to_string();
        assert!(err.contains("linear"), "{err}");
    }
}

/// Softmax along a contiguous last axis (whole-row passes in vector lanes) against the same
/// rows laid along the first axis (the strided form): lengths that leave every remainder of
/// the eight lanes, rows with −∞, +∞, NaN and large values, both dtypes, both forms.
#[test]
fn softmax_of_contiguous_rows_agrees_with_the_strided_form() {
    let special = [f64::NEG_INFINITY, f64::INFINITY, f64::NAN, 1e4, -1e4];
    for dtype in [DType::F32, DType::F64] {
        for len in 1..=17usize {
            let mut rng = StdRng::seed_from_u64(len as u64);
            let noise = Tensor::randn(&[special.len() + 3, len], DType::F64, &mut rng);
            let mut rows = (&noise * 5.0).to_vec::<f64>();
            // Row r < special.len() holds special[r] at one place (all of the row for −∞).
            for (r, &v) in special.iter().enumerate() {
                if r == 0 {
                    rows[..len].iter_mut().for_each(|x| *x = v);
                } else {
                    rows[r * len + (r % len)] = v;
                }
            }
            let x = Tensor::from_vec(rows, &[special.len() + 3, len]).to_dtype(dtype);
            let strided = x.t().contiguous();
            for log in [false, true] {
                let f = |t: &Tensor, axis: usize| {
                    if log {
                        t.log_softmax(axis)
                    } else {
                        t.softmax(axis)
                    }
                };
                let fast = f(&x, 1).to_vec::<f64>();
                let slow = f(&strided, 0).t().contiguous().to_vec::<f64>();
                for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                    let same_kind = (a.is_nan() && b.is_nan())
                        || a == b
                        || (a - b).abs() <= 1e-5 * (1.0 + b.abs());
                    assert!(
                        same_kind,
                        "{dtype:?} len {len} log {log} at {i}: {a} against {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn nan_propagates_through_relu_clamp_maximum_and_minimum_as_in_pytorch() {
    let nan = f32::NAN;
    let x = Tensor::from_vec(vec![nan, -1.0, 0.5, 2.0], &[4]);
    let y = Tensor::from_vec(vec![0.0f32, nan, 1.0, 1.0], &[4]);
    let is = |t: Tensor, want: [f32; 4]| {
        let got = t.to_vec::<f32>();
        for (g, w) in got.iter().zip(want) {
            assert!(g == &w || (g.is_nan() && w.is_nan()), "{got:?} vs {want:?}");
        }
    };
    is(x.relu(), [nan, 0.0, 0.5, 2.0]);
    is(x.clamp(0.0, 1.0), [nan, 0.0, 0.5, 1.0]);
    is(x.maximum(&y), [nan, nan, 1.0, 2.0]);
    is(x.minimum(&y), [nan, nan, 0.5, 1.0]);
    // The derivatives stay those of the finite elements.
    let w = x.detach().requires_grad();
    let g = w.relu().sum().backward().get(&w).unwrap().to_vec::<f32>();
    assert_eq!(&g[1..], &[0.0, 1.0, 1.0]);
}
