//! Property tests: every op gives the same answer on a view (transposed, narrowed, broadcast,
//! of any shape including zero sizes) as on a contiguous copy of the same elements, and the
//! kernels never read outside the view.

use ferrograd::prelude::*;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn config() -> ProptestConfig {
    crate::common::proptest_config(500)
}

/// How a view is cut from its base tensor.
#[derive(Clone, Debug)]
enum Cut {
    Transpose(usize, usize),
    Narrow {
        axis: usize,
        start: usize,
        len: usize,
    },
    /// A new leading axis of this size, stride 0.
    Broadcast(usize),
    Reverse,
    /// Reshape: an axis split in two (the first part's size the smallest divisor above 1).
    Split(usize),
    /// Reshape: an axis merged with the next.
    Merge(usize),
}

/// A plain row-major array: the reference the views are checked against, cut by index
/// arithmetic alone (no kernel of the library involved).
#[derive(Clone, Debug)]
struct Plain {
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Plain {
    fn at(&self, idx: &[usize]) -> f64 {
        let flat = idx
            .iter()
            .zip(&self.shape)
            .fold(0, |acc, (&i, &d)| acc * d + i);
        self.data[flat]
    }

    /// The array of `shape` whose element at `idx` is `self.at(source(idx))`.
    fn remap(&self, shape: Vec<usize>, source: impl Fn(&[usize]) -> Vec<usize>) -> Plain {
        let n: usize = shape.iter().product();
        let mut data = Vec::with_capacity(n);
        let mut idx = vec![0; shape.len()];
        for _ in 0..n {
            data.push(self.at(&source(&idx)));
            for ax in (0..shape.len()).rev() {
                idx[ax] += 1;
                if idx[ax] < shape[ax] {
                    break;
                }
                idx[ax] = 0;
            }
        }
        Plain { shape, data }
    }
}

/// The cut applied to the tensor (as a view) and to the plain array (by copying).
fn cut(t: &Tensor, p: &Plain, c: &Cut) -> (Tensor, Plain) {
    let n = t.ndim();
    match *c {
        Cut::Transpose(a, b) if n >= 2 => {
            let (a, b) = (a % n, b % n);
            let mut shape = p.shape.clone();
            shape.swap(a, b);
            let q = p.remap(shape, |i| {
                let mut j = i.to_vec();
                j.swap(a, b);
                j
            });
            (t.transpose(a, b), q)
        }
        Cut::Narrow { axis, start, len } if n >= 1 => {
            let axis = axis % n;
            let size = t.shape()[axis];
            let start = start % (size + 1);
            let len = len % (size - start + 1);
            let mut shape = p.shape.clone();
            shape[axis] = len;
            let q = p.remap(shape, |i| {
                let mut j = i.to_vec();
                j[axis] += start;
                j
            });
            (t.narrow(axis, start, len), q)
        }
        Cut::Broadcast(k) => {
            let mut shape = vec![k];
            shape.extend_from_slice(&p.shape);
            let q = p.remap(shape.clone(), |i| i[1..].to_vec());
            (t.broadcast_to(&shape), q)
        }
        Cut::Reverse => {
            let perm: Vec<usize> = (0..n).rev().collect();
            let shape = p.shape.iter().rev().copied().collect();
            let q = p.remap(shape, |i| i.iter().rev().copied().collect());
            (t.permute(&perm), q)
        }
        // A reshape keeps the row-major order: the plain data stays, only its shape changes.
        Cut::Split(axis) if n >= 1 => {
            let axis = axis % n;
            let size = p.shape[axis];
            let first = (2..=size).find(|d| size.is_multiple_of(*d)).unwrap_or(1);
            let mut shape = p.shape.clone();
            shape.splice(axis..=axis, [first, size / first.max(1)]);
            let q = Plain {
                shape: shape.clone(),
                data: p.data.clone(),
            };
            (t.reshape(&shape), q)
        }
        Cut::Merge(axis) if n >= 2 => {
            let axis = axis % (n - 1);
            let mut shape = p.shape.clone();
            let merged = shape[axis] * shape[axis + 1];
            shape.splice(axis..=axis + 1, [merged]);
            let q = Plain {
                shape: shape.clone(),
                data: p.data.clone(),
            };
            (t.reshape(&shape), q)
        }
        _ => (t.clone(), p.clone()),
    }
}

fn cuts() -> impl Strategy<Value = Vec<Cut>> {
    let one = prop_oneof![
        (0usize..4, 0usize..4).prop_map(|(a, b)| Cut::Transpose(a, b)),
        (0usize..4, 0usize..5, 0usize..5).prop_map(|(axis, start, len)| Cut::Narrow {
            axis,
            start,
            len
        }),
        (0usize..3).prop_map(Cut::Broadcast),
        Just(Cut::Reverse),
        (0usize..4).prop_map(Cut::Split),
        (0usize..4).prop_map(Cut::Merge),
    ];
    proptest::collection::vec(one, 0..4)
}

/// A view of a random tensor in `dtype`, and a contiguous tensor of the same elements built
/// from the plain reference. Checks on the way that the view reads exactly those elements.
fn view_and_copy_in(dtype: DType) -> impl Strategy<Value = (Tensor, Tensor)> {
    (
        proptest::collection::vec(0usize..5, 0..4),
        cuts(),
        any::<u64>(),
    )
        .prop_map(move |(shape, cuts, seed)| {
            let base = Tensor::randn(&shape, dtype, &mut StdRng::seed_from_u64(seed));
            let plain = Plain {
                shape: shape.clone(),
                data: base.to_vec::<f64>(),
            };
            let (view, plain) = cuts.iter().fold((base, plain), |(t, p), c| cut(&t, &p, c));
            assert_eq!(view.shape(), plain.shape.as_slice());
            assert_eq!(
                view.to_vec::<f64>(),
                plain.data,
                "the view reads other elements"
            );
            let copy = Tensor::from_vec(plain.data, &plain.shape).to_dtype(dtype);
            assert!(copy.is_contiguous());
            (view, copy)
        })
}

fn view_and_copy() -> impl Strategy<Value = (Tensor, Tensor)> {
    view_and_copy_in(DType::F64)
}

/// Exactly equal values and shapes (NaN equals NaN).
fn same(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape()
        && a.to_vec::<f64>()
            .iter()
            .zip(b.to_vec::<f64>())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Equal shapes, values within a relative 1e-12 (for products, whose kernels may block the
/// sums differently by layout).
fn close(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape()
        && a.to_vec::<f64>()
            .iter()
            .zip(b.to_vec::<f64>())
            .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + x.abs().max(y.abs())))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn elementwise_ops_match_on_views((v, c) in view_and_copy()) {
        prop_assert!(same(&v.exp(), &c.exp()));
        prop_assert!(same(&v.relu(), &c.relu()));
        prop_assert!(same(&v.tanh(), &c.tanh()));
        prop_assert!(same(&(&v * 2.0), &(&c * 2.0)));
        prop_assert!(same(&(&v + &v), &(&c + &c)));
        prop_assert!(same(&(&v * &c), &(&c * &c)));
        prop_assert!(same(&v.maximum(&c), &c.maximum(&c)));
        // Broadcasting against the last axis.
        if v.ndim() >= 1 {
            let last = v.shape()[v.ndim() - 1];
            let row = Tensor::arange(0.0, last as f64, 1.0, DType::F64);
            prop_assert!(same(&(&v - &row), &(&c - &row)));
        }
    }

    #[test]
    fn reductions_match_on_views((v, c) in view_and_copy(), axis in 0usize..4, keep in any::<bool>()) {
        prop_assert!(same(&v.sum(), &c.sum()));
        prop_assert!(same(&v.mean(), &c.mean()));
        if v.ndim() > 0 {
            let a = axis % v.ndim();
            prop_assert!(same(&v.sum_axes(&[a], keep), &c.sum_axes(&[a], keep)));
            prop_assert!(same(&v.softmax(a), &c.softmax(a)));
            prop_assert!(same(&v.log_softmax(a), &c.log_softmax(a)));
            if v.shape()[a] > 0 {
                prop_assert!(same(&v.max_axes(&[a], keep), &c.max_axes(&[a], keep)));
                prop_assert!(same(&v.argmax(a), &c.argmax(a)));
            }
        }
    }

    #[test]
    fn shape_ops_match_on_views((v, c) in view_and_copy(), axis in 0usize..4) {
        let flat = [v.numel()];
        prop_assert!(same(&v.reshape(&flat), &c.reshape(&flat)));
        if v.ndim() > 0 {
            let a = axis % v.ndim();
            prop_assert!(same(&Tensor::cat(&[&v, &v], a), &Tensor::cat(&[&c, &c], a)));
            let size = v.shape()[a];
            let picks: Vec<usize> = (0..size).rev().chain(0..size.min(1)).collect();
            prop_assert!(same(&v.index_select(a, &picks), &c.index_select(a, &picks)));
            prop_assert!(same(&v.narrow(a, size / 2, size - size / 2), &c.narrow(a, size / 2, size - size / 2)));
        }
    }

    #[test]
    fn products_match_on_views((v, c) in view_and_copy(), n in 0usize..5, seed in any::<u64>()) {
        if v.ndim() >= 2 {
            let k = v.shape()[v.ndim() - 1];
            let w = Tensor::randn(&[k, n], DType::F64, &mut StdRng::seed_from_u64(seed));
            prop_assert!(close(&v.matmul(&w), &c.matmul(&w)));
            // The view as the right operand, through its transpose.
            let vt = v.t();
            let ct = Tensor::from_vec(vt.to_vec::<f64>(), vt.shape());
            let m = vt.shape()[vt.ndim() - 1];
            let u = Tensor::randn(&[n, vt.shape()[vt.ndim() - 2]], DType::F64, &mut StdRng::seed_from_u64(seed ^ 1));
            prop_assert_eq!(u.matmul(&vt).shape()[vt.ndim() - 1], m);
            prop_assert!(close(&u.matmul(&vt), &u.matmul(&ct)));
        }
    }

    #[test]
    fn f32_views_match_as_well((v, c) in view_and_copy_in(DType::F32)) {
        prop_assert!(same(&v.exp(), &c.exp()));
        prop_assert!(same(&(&v - &c), &(&c - &c)));
        prop_assert!(same(&v.sigmoid(), &c.sigmoid()));
        prop_assert!(same(&(&v / &(&c.abs() + 1.0)), &(&c / &(&c.abs() + 1.0))));
        prop_assert!(same(&v.sum(), &c.sum()));
    }

    /// The f32 product (the AVX-512 kernel where the CPU has it) on transposed and narrowed
    /// operands up to 40 wide, against an f64 product written out here.
    #[test]
    fn f32_products_of_views_match_a_plain_product(
        (m, k, n) in (1usize..40, 1usize..40, 1usize..40),
        (ta, tb, skip) in (any::<bool>(), any::<bool>(), 0usize..3),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        // Each operand is a view: stored transposed and/or with extra leading rows.
        let operand = |rows: usize, cols: usize, transposed: bool, rng: &mut StdRng| {
            if transposed {
                Tensor::randn(&[cols + skip, rows], DType::F32, rng).narrow(0, skip, cols).t()
            } else {
                Tensor::randn(&[rows + skip, cols], DType::F32, rng).narrow(0, skip, rows)
            }
        };
        let a = operand(m, k, ta, &mut rng);
        let b = operand(k, n, tb, &mut rng);
        let (av, bv) = (a.to_vec::<f64>(), b.to_vec::<f64>());
        let got = a.matmul(&b).to_vec::<f64>();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum();
                prop_assert!((got[i * n + j] - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "({i}, {j}): {} vs {want}", got[i * n + j]);
            }
        }
    }
}
