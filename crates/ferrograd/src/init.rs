//! Weight initializers, with fan-in and fan-out computed in PyTorch's layouts: dense
//! `[out, in]` and convolution `[out_ch, in_ch, k...]`. Each draws from an explicit RNG; the `*_default` helpers in
//! the layers use the generator seeded by `manual_seed`.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::tensor::{DType, Tensor};

/// (fan_in, fan_out) of a weight shape in PyTorch's layouts: `[out, in]` for dense layers,
/// `[out, in, k1, k2, ...]` for convolutions (the receptive field multiplies both).
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape.len() {
        0 => (1, 1),
        1 => (shape[0], shape[0]),
        2 => (shape[1], shape[0]),
        _ => {
            let field: usize = shape[2..].iter().product();
            (shape[1] * field, shape[0] * field)
        }
    }
}

/// All zeros (for biases, say).
pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(shape, dtype)
}

/// All ones (for the scale of a normalization, say).
pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::ones(shape, dtype)
}

/// Every element `value`, cast to `dtype` as [`Tensor::full`] casts it.
pub fn constant(shape: &[usize], value: f64, dtype: DType) -> Tensor {
    Tensor::full(shape, value, dtype)
}

/// Normal draws with mean `mean` and standard deviation `std`.
pub fn normal(shape: &[usize], mean: f64, std: f64, dtype: DType, rng: &mut impl Rng) -> Tensor {
    Tensor::randn(shape, dtype, rng)
        .mul_scalar(std)
        .add_scalar(mean)
}

/// Uniform draws in `[low, high)`.
pub fn uniform(shape: &[usize], low: f64, high: f64, dtype: DType, rng: &mut impl Rng) -> Tensor {
    Tensor::rand_uniform(shape, low, high, dtype, rng)
}

/// Normal draws redrawn until they fall within two standard deviations of the mean.
pub fn truncated_normal(
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    rng: &mut impl Rng,
) -> Tensor {
    let n = crate::tensor::numel_or_panic("truncated_normal", shape);
    let data: Vec<f64> = (0..n)
        .map(|_| loop {
            let z: f64 = StandardNormal.sample(rng);
            if z.abs() <= 2.0 {
                break mean + std * z;
            }
        })
        .collect();
    Tensor::from_vec(data, shape).to_dtype(dtype)
}

/// Glorot/Xavier uniform: U(±√(6 / (fan_in + fan_out))) (PyTorch's `xavier_uniform_`; what
/// `Dense::new` uses).
pub fn xavier_uniform(shape: &[usize], dtype: DType, rng: &mut impl Rng) -> Tensor {
    let (fi, fo) = fans(shape);
    let a = (6.0 / (fi + fo) as f64).sqrt();
    uniform(shape, -a, a, dtype, rng)
}

/// Glorot/Xavier normal: N(0, 2 / (fan_in + fan_out)).
pub fn xavier_normal(shape: &[usize], dtype: DType, rng: &mut impl Rng) -> Tensor {
    let (fi, fo) = fans(shape);
    normal(shape, 0.0, (2.0 / (fi + fo) as f64).sqrt(), dtype, rng)
}

/// He/Kaiming uniform for ReLU networks: U(±√(6 / fan_in)).
pub fn he_uniform(shape: &[usize], dtype: DType, rng: &mut impl Rng) -> Tensor {
    let (fi, _) = fans(shape);
    let a = (6.0 / fi as f64).sqrt();
    uniform(shape, -a, a, dtype, rng)
}

/// He/Kaiming normal: N(0, 2 / fan_in).
pub fn he_normal(shape: &[usize], dtype: DType, rng: &mut impl Rng) -> Tensor {
    let (fi, _) = fans(shape);
    normal(shape, 0.0, (2.0 / fi as f64).sqrt(), dtype, rng)
}

/// A (semi-)orthogonal matrix scaled by `gain`, of shape `[rows, cols...]` flattened to
/// `rows × rest`: Gram–Schmidt (twice, for stability) on Gaussian draws.
pub fn orthogonal(shape: &[usize], gain: f64, dtype: DType, rng: &mut impl Rng) -> Tensor {
    assert!(
        shape.len() >= 2,
        "orthogonal: needs at least 2 axes, shape is {shape:?}"
    );
    let rows = shape[0];
    let cols = crate::tensor::numel_or_panic("orthogonal", &shape[1..]);
    // Orthonormalise the shorter side's vectors.
    let (n, len) = if rows <= cols {
        (rows, cols)
    } else {
        (cols, rows)
    };
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|_| (0..len).map(|_| StandardNormal.sample(rng)).collect())
        .collect();
    for i in 0..n {
        let (done, rest) = v.split_at_mut(i);
        let vi = &mut rest[0];
        for _ in 0..2 {
            for vj in done.iter() {
                let d: f64 = vi.iter().zip(vj).map(|(a, b)| a * b).sum();
                vi.iter_mut().zip(vj).for_each(|(a, b)| *a -= d * b);
            }
        }
        let norm = vi.iter().map(|x| x * x).sum::<f64>().sqrt();
        vi.iter_mut().for_each(|x| *x /= norm);
    }
    let mut data = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            data[r * cols + c] = gain * if rows <= cols { v[r][c] } else { v[c][r] };
        }
    }
    Tensor::from_vec(data, shape).to_dtype(dtype)
}
