//! Convolution, its transpose and pooling: values against direct loops written here from
//! PyTorch's definitions, and first and second derivatives against finite differences in f64.

use crate::common::{check, randn};
use ferrograd::prelude::*;

/// PyTorch's conv2d, one output element at a time.
fn conv2d_direct(x: &Tensor, w: &Tensor, o: &ConvOpts) -> (Vec<usize>, Vec<f64>) {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (x.to_vec::<f64>(), w.to_vec::<f64>());
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (oc, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let og = oc / o.groups;
    let size = |i: usize, k: usize, len: usize| {
        (len + 2 * o.padding[i] - o.dilation[i] * (k - 1) - 1) / o.stride[i] + 1
    };
    let (ho, wo) = (size(0, kh, h), size(1, kw, wd));
    let mut out = vec![0.0; n * oc * ho * wo];
    for b in 0..n {
        for q in 0..oc {
            let grp = q / og;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut s = 0.0;
                    for ci in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (oy * o.stride[0] + i * o.dilation[0]) as isize
                                    - o.padding[0] as isize;
                                let ix = (ox * o.stride[1] + j * o.dilation[1]) as isize
                                    - o.padding[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xc = grp * cg + ci;
                                let xi = ((b * c + xc) * h + iy as usize) * wd + ix as usize;
                                let wi = ((q * cg + ci) * kh + i) * kw + j;
                                s += xv[xi] * wv[wi];
                            }
                        }
                    }
                    out[((b * oc + q) * ho + oy) * wo + ox] = s;
                }
            }
        }
    }
    (vec![n, oc, ho, wo], out)
}

fn close(got: &Tensor, want: &(Vec<usize>, Vec<f64>), what: &str) {
    assert_eq!(got.shape(), want.0.as_slice(), "{what}: shape");
    for (a, b) in got.to_vec::<f64>().iter().zip(&want.1) {
        assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{what}: {a} vs {b}");
    }
}

/// (input shape, weight shape, options) covering strides, padding, dilation, groups and
/// non-square kernels.
fn cases() -> Vec<([usize; 4], [usize; 4], ConvOpts)> {
    vec![
        // Few channels: the direct kernel, forward and (stride 1) transposed.
        ([2, 4, 6, 5], [5, 4, 3, 3], ConvOpts::new().padding(1)),
        // More outputs than one block of lanes, and dilation.
        (
            [1, 5, 7, 6],
            [18, 5, 2, 3],
            ConvOpts::new().dilation(2).padding(1),
        ),
        ([2, 3, 7, 6], [4, 3, 3, 3], ConvOpts::new()),
        (
            [2, 3, 7, 6],
            [4, 3, 3, 2],
            ConvOpts::new().stride(2).padding(1),
        ),
        (
            [1, 2, 9, 8],
            [3, 2, 3, 3],
            ConvOpts::new().dilation(2).padding(2),
        ),
        (
            [2, 4, 6, 6],
            [6, 2, 3, 3],
            ConvOpts::new().groups(2).padding(1),
        ),
        (
            [1, 4, 5, 7],
            [4, 1, 2, 3],
            ConvOpts::new().groups(4).stride_hw(1, 2),
        ),
        (
            [3, 1, 5, 5],
            [2, 1, 5, 5],
            ConvOpts::new().padding(2).stride(3),
        ),
    ]
}

#[test]
fn conv2d_matches_the_definition() {
    for (k, (xs, ws, o)) in cases().into_iter().enumerate() {
        let (x, w) = (randn(&xs, k as u64), randn(&ws, 100 + k as u64));
        close(
            &x.conv2d(&w, &o),
            &conv2d_direct(&x, &w, &o),
            &format!("case {k} {o:?}"),
        );
        // f32 through the f32 product.
        let y32 = x.to_dtype(DType::F32).conv2d(&w.to_dtype(DType::F32), &o);
        let want = conv2d_direct(&x, &w, &o);
        for (a, b) in y32.to_vec::<f64>().iter().zip(&want.1) {
            assert!(
                (a - b).abs() < 1e-4 * (1.0 + b.abs()),
                "f32 case {k}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn conv_transpose2d_is_the_adjoint_of_conv2d() {
    // <conv2d(x, w), y> = <x, conv_transpose2d(y, w)> for every geometry, and likewise for the
    // weight gradient.
    for (k, (xs, ws, o)) in cases().into_iter().enumerate() {
        let (x, w) = (randn(&xs, k as u64), randn(&ws, 100 + k as u64));
        let y = x.conv2d(&w, &o);
        let u = randn(y.shape(), 200 + k as u64);
        let extra = |i: usize| {
            // The output padding that recovers x's size.
            let back = (y.shape()[2 + i] - 1) * o.stride[i] + o.dilation[i] * (ws[2 + i] - 1) + 1;
            xs[2 + i] + 2 * o.padding[i] - back
        };
        let ot = o.output_padding_hw(extra(0), extra(1));
        let xt = u.conv_transpose2d(&w, &ot);
        assert_eq!(xt.shape(), x.shape(), "case {k}");
        let lhs = (&y * &u).sum().item();
        let rhs = (&x * &xt).sum().item();
        assert!(
            (lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()),
            "case {k}: {lhs} vs {rhs}"
        );
        // And the weight gradient: <conv2d(x, w), u> = <w, conv2d_weight(x, u)>.
        let wg = x.conv2d_weight(&u, (ws[2], ws[3]), &o);
        let rhs = (&w * &wg).sum().item();
        assert!(
            (lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()),
            "case {k}, weight gradient: {lhs} vs {rhs}"
        );
    }
}

#[test]
fn conv_transpose2d_output_size_is_pytorchs() {
    // nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1) doubles 7x7 to 14x14;
    // output_padding=1 with kernel 3, stride 2, padding 1 gives 2·7.
    let u = randn(&[1, 16, 7, 7], 1);
    let w = randn(&[16, 8, 4, 4], 2);
    let y = u.conv_transpose2d(&w, &ConvOpts::new().stride(2).padding(1));
    assert_eq!(y.shape(), &[1, 8, 14, 14]);
    let w3 = randn(&[16, 4, 3, 3], 3);
    let o = ConvOpts::new()
        .stride(2)
        .padding(1)
        .output_padding(1)
        .groups(2);
    assert_eq!(u.conv_transpose2d(&w3, &o).shape(), &[1, 8, 14, 14]);
}

#[test]
fn convolutions_have_first_and_second_derivatives() {
    for (k, (xs, ws, o)) in cases().into_iter().enumerate().take(7) {
        let (x, w) = (randn(&xs, k as u64), randn(&ws, 100 + k as u64));
        check(
            &format!("conv2d case {k}"),
            |t| t[0].conv2d(&t[1], &o),
            &[x.clone(), w.clone()],
        );
        let y = x.conv2d(&w, &o);
        let dy = randn(y.shape(), 300 + k as u64);
        let kernel = (ws[2], ws[3]);
        check(
            &format!("conv2d_weight case {k}"),
            |t| t[0].conv2d_weight(&t[1], kernel, &o),
            &[x.clone(), dy.clone()],
        );
    }
    let u = randn(&[2, 4, 3, 4], 7);
    let w = randn(&[4, 3, 3, 3], 8);
    let o = ConvOpts::new()
        .stride(2)
        .padding(1)
        .output_padding(1)
        .groups(2);
    check(
        "conv_transpose2d",
        |t| t[0].conv_transpose2d(&t[1], &o),
        &[u, w],
    );
}

#[test]
fn bad_geometry_names_the_op() {
    let x = randn(&[1, 3, 4, 4], 1);
    let msg = |f: &dyn Fn()| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let m = msg(&|| drop(x.conv2d(&randn(&[2, 3, 5, 5], 2), &ConvOpts::new())));
    assert!(m.contains("conv2d") && m.contains("does not fit"), "{m}");
    let m = msg(&|| drop(x.conv2d(&randn(&[2, 2, 3, 3], 2), &ConvOpts::new())));
    assert!(m.contains("conv2d") && m.contains("group"), "{m}");
    let m = msg(&|| drop(x.conv2d(&randn(&[2, 3, 3, 3], 2), &ConvOpts::new().stride(0))));
    assert!(m.contains("stride"), "{m}");
}

/// A pooling written out: `pick` folds each window's in-bounds values, `div` divides.
fn pool_direct(
    x: &Tensor,
    windows: impl Fn(usize, usize) -> Vec<(usize, usize)>,
    fold: impl Fn(&[f64]) -> f64,
) -> (Vec<usize>, Vec<f64>) {
    let s = x.shape().to_vec();
    let v = x.to_vec::<f64>();
    let (wy, wx) = (windows(s[2], 0), windows(s[3], 1));
    let mut out = Vec::new();
    for p in 0..s[0] * s[1] {
        for &(y0, y1) in &wy {
            for &(x0, x1) in &wx {
                let vals: Vec<f64> = (y0..y1)
                    .flat_map(|iy| (x0..x1).map(move |ix| (iy, ix)))
                    .map(|(iy, ix)| v[(p * s[2] + iy) * s[3] + ix])
                    .collect();
                out.push(fold(&vals));
            }
        }
    }
    (vec![s[0], s[1], wy.len(), wx.len()], out)
}

/// Windows of `k`, `stride` apart, over an axis padded by `pad`, clipped to the axis.
fn fixed(size: usize, k: usize, stride: usize, pad: usize) -> Vec<(usize, usize)> {
    let out = (size + 2 * pad - k) / stride + 1;
    (0..out)
        .map(|o| {
            let start = (o * stride) as isize - pad as isize;
            (
                start.max(0) as usize,
                ((start + k as isize) as usize).min(size),
            )
        })
        .collect()
}

#[test]
fn pooling_matches_the_definition() {
    let x = randn(&[2, 3, 7, 6], 1);
    for (k, s, p) in [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)] {
        let want = pool_direct(
            &x,
            |n, _| fixed(n, k, s, p),
            |v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
        close(
            &x.max_pool2d(k, s, p),
            &want,
            &format!("max_pool2d({k}, {s}, {p})"),
        );
        // The padding counts in the mean.
        let want = pool_direct(
            &x,
            |n, _| fixed(n, k, s, p),
            |v| v.iter().sum::<f64>() / (k * k) as f64,
        );
        close(
            &x.avg_pool2d(k, s, p),
            &want,
            &format!("avg_pool2d({k}, {s}, {p})"),
        );
    }
    // Sizes that differ between height and width (PyTorch's tuples).
    for (k, s, p) in [([2, 3], [1, 2], [0, 1]), ([3, 2], [2, 1], [1, 0])] {
        let windows = |n: usize, axis: usize| fixed(n, k[axis], s[axis], p[axis]);
        let want = pool_direct(&x, windows, |v| {
            v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        });
        close(
            &x.max_pool2d_hw(k, s, p),
            &want,
            &format!("max_pool2d_hw({k:?})"),
        );
        let want = pool_direct(&x, windows, |v| {
            v.iter().sum::<f64>() / (k[0] * k[1]) as f64
        });
        close(
            &x.avg_pool2d_hw(k, s, p),
            &want,
            &format!("avg_pool2d_hw({k:?})"),
        );
    }
    let layer = MaxPool2d::new(1, 1).kernel_hw(2, 3).stride_hw(1, 2);
    assert_eq!(layer.name(), "MaxPool2d((2, 3), (1, 2))");
    assert_eq!(
        Layer::forward(&layer, &x, Mode::Eval).shape(),
        &[2, 3, 6, 2]
    );
    // Adaptive: 7 → 3 rows uses windows 0..3, 2..5, 4..7; 6 → 4 columns 0..2, 1..3, 3..5, 4..6.
    let adaptive = |n: usize, axis: usize| {
        let out = if axis == 0 { 3 } else { 4 };
        (0..out)
            .map(|o| (o * n / out, ((o + 1) * n).div_ceil(out)))
            .collect::<Vec<_>>()
    };
    let want = pool_direct(&x, adaptive, |v| v.iter().sum::<f64>() / v.len() as f64);
    close(
        &x.adaptive_avg_pool2d(3, 4),
        &want,
        "adaptive_avg_pool2d(3, 4)",
    );
    let global = x.adaptive_avg_pool2d(1, 1);
    close(
        &global.reshape(&[2, 3]),
        &(vec![2, 3], x.mean_axes(&[2, 3], false).to_vec::<f64>()),
        "global average",
    );
    let up = x.upsample_nearest2d(2, 3);
    assert_eq!(up.shape(), &[2, 3, 14, 18]);
    let (u, v) = (up.to_vec::<f64>(), x.to_vec::<f64>());
    assert_eq!(u[((4 * 14) + 5) * 18 + 7], v[((4 * 7) + 2) * 6 + 2]);
}

#[test]
fn max_pool_gradient_goes_to_the_first_maximum() {
    let x = Tensor::from_vec(vec![1.0f64, 3.0, 3.0, 2.0], &[1, 1, 2, 2]).requires_grad();
    let g = grad(&x.max_pool2d(2, 2, 0).sum(), &[&x]).remove(0);
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 1.0, 0.0, 0.0]);
}

#[test]
fn max_pool_nan_wins_in_every_window_kernel() {
    // As in PyTorch: a NaN is the maximum wherever it stands in its window (the first of
    // several NaNs), and its input takes the gradient. The common 2×2 window with stride 2
    // runs its own loop; 3×3 with stride 2 the general one. Both see the same rows.
    let nan = f32::NAN;
    #[rustfmt::skip]
    let rows = vec![
        1.0, 5.0, 2.0, nan, 7.0, 0.0,
        nan, 9.0, 4.0, 3.0, 7.0, 1.0,
        0.0, 0.0, nan, nan, 2.0, 8.0,
        6.0, 6.0, 1.0, 1.0, 8.0, 2.0,
        3.0, 4.0, 5.0, 6.0, 7.0, 8.0,
    ];
    let x = Tensor::from_vec(rows, &[1, 1, 5, 6]).requires_grad();
    for (k, want) in [
        (2, vec![nan, nan, 7.0, 6.0, nan, 8.0]),
        (3, vec![nan, nan, nan, nan]),
    ] {
        let y = x.max_pool2d(k, 2, 0);
        let got = y.to_vec::<f32>();
        assert_eq!(got.len(), want.len(), "{k}x{k}");
        for (g, w) in got.iter().zip(&want) {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{k}x{k}: {got:?}");
        }
    }
    // Where the 2×2 windows send their gradients: to the NaN, to the first NaN of two, and at
    // ties (7 and 7, 6 and 6, 8 and 8) to the first maximum in row-major order.
    let g = grad(&x.max_pool2d(2, 2, 0).sum(), &[&x])
        .remove(0)
        .to_vec::<f32>();
    let hit: Vec<usize> = (0..30).filter(|&i| g[i] != 0.0).collect();
    assert_eq!(hit, vec![3, 4, 6, 14, 17, 18]);
}

#[test]
fn pooling_has_first_and_second_derivatives() {
    let x = randn(&[2, 2, 6, 5], 4);
    check(
        "max_pool2d",
        |t| t[0].max_pool2d(3, 2, 1),
        std::slice::from_ref(&x),
    );
    check(
        "avg_pool2d",
        |t| t[0].avg_pool2d(3, 2, 1),
        std::slice::from_ref(&x),
    );
    check(
        "max_pool2d_hw",
        |t| t[0].max_pool2d_hw([2, 3], [1, 2], [1, 1]),
        std::slice::from_ref(&x),
    );
    check(
        "avg_pool2d_hw",
        |t| t[0].avg_pool2d_hw([3, 2], [2, 1], [1, 0]),
        std::slice::from_ref(&x),
    );
    check(
        "adaptive_avg_pool2d",
        |t| t[0].adaptive_avg_pool2d(4, 3),
        std::slice::from_ref(&x),
    );
    check(
        "upsample_nearest2d",
        |t| t[0].upsample_nearest2d(2, 2),
        std::slice::from_ref(&x),
    );
    // Through a product, so that second derivatives are not all zero.
    check(
        "avg_pool2d of a square",
        |t| t[0].square().avg_pool2d(2, 2, 0),
        std::slice::from_ref(&x),
    );
    check(
        "max_pool2d of a product",
        |t| (&t[0] * &t[1]).max_pool2d(2, 1, 0),
        &[x.clone(), randn(&[2, 2, 6, 5], 5)],
    );
}

#[test]
fn kernels_that_reach_past_the_padded_image_and_batches_split_in_chunks() {
    // Taps that see nothing but padding on some rows and columns.
    let cases = [
        ([1, 1, 1, 1], [1, 1, 5, 5], ConvOpts::new().padding(2)),
        ([2, 1, 2, 3], [2, 1, 7, 7], ConvOpts::new().padding(3)),
        (
            [1, 2, 3, 2],
            [1, 2, 4, 4],
            ConvOpts::new().padding(2).stride(2),
        ),
    ];
    for (k, (xs, ws, o)) in cases.into_iter().enumerate() {
        let (x, w) = (randn(&xs, 40 + k as u64), randn(&ws, 50 + k as u64));
        close(
            &x.conv2d(&w, &o),
            &conv2d_direct(&x, &w, &o),
            &format!("wide kernel {k}"),
        );
        check(
            &format!("wide kernel {k}"),
            |t| t[0].conv2d(&t[1], &o),
            &[x, w],
        );
    }
    // 576 × 1024 columns per image: the 10 images go through in more than one chunk.
    let x = randn(&[10, 64, 32, 32], 60);
    let w = randn(&[2, 64, 3, 3], 61);
    let o = ConvOpts::new().padding(1);
    let y = x.conv2d(&w, &o);
    close(&y, &conv2d_direct(&x, &w, &o), "chunked batch");
    let u = randn(y.shape(), 62);
    let lhs = (&y * &u).sum().item();
    let rhs = (&x * &u.conv_transpose2d(&w, &o)).sum().item();
    assert!(
        (lhs - rhs).abs() < 1e-8 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
    // The weight gradient over both chunks: <conv2d(x, w), u> = <w, conv2d_weight(x, u)>.
    let dw = x.conv2d_weight(&u, (3, 3), &o);
    let rhs = (&w * &dw).sum().item();
    assert!(
        (lhs - rhs).abs() < 1e-8 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
    // A transposed convolution under a stride whose column matrix per image (320 × 1600)
    // exceeds a cache-sized chunk: one image at a time, threaded inside; still the adjoint.
    let u = randn(&[3, 3, 40, 40], 63);
    let w = randn(&[3, 20, 4, 4], 64);
    let o = ConvOpts::new().stride(2).padding(1);
    let z = u.conv_transpose2d(&w, &o);
    assert_eq!(z.shape(), &[3, 20, 80, 80]);
    let x = randn(z.shape(), 65);
    let lhs = (&z * &x).sum().item();
    let rhs = (&u * &x.conv2d(&w, &o)).sum().item();
    assert!(
        (lhs - rhs).abs() < 1e-8 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
}

#[test]
fn output_padding_up_to_the_dilation() {
    // PyTorch allows output_padding < max(stride, dilation): stride 1, dilation 2, output
    // padding 1 gives 8×8 from 3×3, the last row and column receiving nothing.
    let u = randn(&[1, 2, 3, 3], 70);
    let w = randn(&[2, 1, 3, 3], 71);
    let o = ConvOpts::new().dilation(2).output_padding(1);
    let z = u.conv_transpose2d(&w, &o);
    assert_eq!(z.shape(), &[1, 1, 8, 8]);
    let zv = z.to_vec::<f64>();
    assert!((0..8).all(|i| zv[7 * 8 + i] == 0.0 && zv[i * 8 + 7] == 0.0));
    // Still the adjoint of the convolution, read on the input's 3×3.
    let y = randn(&[1, 1, 8, 8], 72);
    let back = y.conv2d(&w, &o).narrow(2, 0, 3).narrow(3, 0, 3);
    let lhs = (&z * &y).sum().item();
    let rhs = (&u * &back).sum().item();
    assert!(
        (lhs - rhs).abs() < 1e-9 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
    check(
        "conv_transpose2d, output padding past the stride",
        |t| t[0].conv_transpose2d(&t[1], &o),
        &[u, w],
    );
}

#[test]
fn weight_gradients_are_the_same_every_run() {
    // A batch large enough to be split over threads, computed from several threads at once so
    // that the pool's scheduling varies: the sums over the images must not depend on it, or a
    // seeded training run would not repeat.
    for (c, o, k) in [(3, 8, 3), (2, 6, 5)] {
        let x = randn(&[96, c, 12, 12], 80).to_dtype(DType::F32);
        let w = randn(&[o, c, k, k], 81)
            .to_dtype(DType::F32)
            .requires_grad();
        let opts = ConvOpts::new().padding(k / 2);
        let grad = || {
            let g = x.conv2d(&w, &opts).square().sum().backward();
            g.get(&w).unwrap().to_vec::<f32>()
        };
        let first = grad();
        for _ in 0..10 {
            let runs: Vec<Vec<f32>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..3).map(|_| s.spawn(grad)).collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for run in runs {
                assert_eq!(run, first, "{c}->{o} {k}x{k}");
            }
        }
    }
}

/// The f32 convolution, its input gradient and its weight gradient against the same
/// computation in f64 from the same (f32) values: within `3e-6 · √terms · (1 + largest)`, far
/// below what one misplaced term would change.
fn f32_agrees_with_f64(xs: [usize; 4], ws: [usize; 4], o: &ConvOpts, seed: u64) {
    let x = randn(&xs, seed).to_dtype(DType::F32);
    let w = randn(&ws, seed + 1).to_dtype(DType::F32);
    let run = |dtype: DType| {
        let (x, w) = (
            x.to_dtype(dtype).requires_grad(),
            w.to_dtype(dtype).requires_grad(),
        );
        let y = x.conv2d(&w, o);
        let u = randn(y.shape(), seed + 2)
            .to_dtype(DType::F32)
            .to_dtype(dtype);
        let g = (&y * &u).sum().backward();
        [y, g.get(&x).unwrap(), g.get(&w).unwrap()].map(|t| t.to_vec::<f64>())
    };
    let (single, double) = (run(DType::F32), run(DType::F64));
    let taps = ws[1] * ws[2] * ws[3];
    let positions = xs[0] * xs[2] * xs[3];
    for ((what, terms), (a, b)) in [("output", taps), ("input gradient", taps * ws[0] / ws[1])]
        .into_iter()
        .chain([("weight gradient", positions)])
        .zip(single.iter().zip(&double))
    {
        let largest = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let tol = 3e-6 * (terms as f64).sqrt() * (1.0 + largest);
        for (i, (p, q)) in a.iter().zip(b).enumerate() {
            assert!(
                (p - q).abs() <= tol,
                "{xs:?} * {ws:?} {o:?}, {what}[{i}]: f32 {p} vs f64 {q}"
            );
        }
    }
}

#[test]
fn f32_kernels_agree_with_f64_at_every_edge() {
    // Output channels that fill no whole panel of 4, 8 or 12 rows (1, 6, 13, 17, 40), rows
    // wider than a 32-column tile (37, 33) and narrower than a vector, more taps than one
    // block of the product (360), stride along the height alone, dilation, padding from none
    // to the kernel's reach, non-square kernels, more images than the weight gradient's runs,
    // strides along the width (the image's columns split by phase) with and without dilation;
    // output rows wide enough for the products to read the image in place, and short ones.
    let cases = [
        (
            [2, 6, 9, 11],
            [5, 6, 4, 4],
            ConvOpts::new().stride(2).padding(1),
        ),
        (
            [3, 4, 8, 50],
            [20, 4, 3, 5],
            ConvOpts::new()
                .stride_hw(1, 3)
                .padding_hw(1, 2)
                .dilation_hw(1, 2),
        ),
        (
            [4, 1, 28, 28],
            [64, 1, 4, 4],
            ConvOpts::new().stride(2).padding(1),
        ),
        ([3, 40, 6, 37], [6, 40, 3, 3], ConvOpts::new().padding(1)),
        // Output rows of 40 read in place: the weight gradient sums them in blocks of 6
        // rows per call, 5 blocks per image, across images.
        ([2, 2, 30, 40], [5, 2, 3, 3], ConvOpts::new().padding(1)),
        (
            [2, 3, 9, 30],
            [13, 3, 2, 3],
            ConvOpts::new().stride_hw(2, 1).dilation(2).padding(1),
        ),
        ([20, 2, 5, 18], [1, 2, 3, 3], ConvOpts::new()),
        (
            [2, 5, 7, 33],
            [17, 5, 5, 1],
            ConvOpts::new().padding_hw(2, 0),
        ),
        ([1, 8, 4, 12], [40, 8, 3, 3], ConvOpts::new().padding(2)),
        // Rows too short for the vectors, packed several to a panel: a DCGAN's 7×7 maps,
        // more taps than one block (320), more positions than one block (320).
        ([2, 5, 7, 7], [6, 5, 3, 3], ConvOpts::new().padding(1)),
        (
            [3, 16, 14, 14],
            [24, 16, 4, 4],
            ConvOpts::new().stride(2).padding(1),
        ),
        (
            [2, 20, 14, 14],
            [10, 20, 4, 4],
            ConvOpts::new().stride(2).padding(1),
        ),
        ([2, 3, 40, 8], [5, 3, 3, 3], ConvOpts::new().padding(1)),
        // Several 7×7 planes to one product, the last group short (5 = 3 + 2), and the
        // weight gradient's runs of images grouped likewise (48 images).
        ([5, 4, 7, 7], [6, 4, 3, 3], ConvOpts::new().padding(1)),
        ([48, 2, 7, 7], [5, 2, 3, 3], ConvOpts::new().padding(1)),
        // A kernel smaller than the stride: phases of the input gradient no tap reaches.
        ([2, 3, 9, 9], [4, 3, 1, 1], ConvOpts::new().stride(2)),
        ([4, 16, 14, 14], [8, 16, 5, 5], ConvOpts::new().padding(2)),
        // Channels-last products (at least 16 channels each way, rows under 32): runs that are
        // no multiple of 4 floats (3 × 17), output channels past whole vectors (33), a
        // stride of 3 under a kernel of 4 (phases of two taps and of one), a kernel smaller
        // than the stride (phases no tap reaches), dilation along the height, an input
        // gradient that needs the transposed convolution's output padding (15 = 2·7 + 1),
        // and more images than one run of the weight gradient and its chunks of 4.
        ([3, 17, 7, 7], [20, 17, 3, 3], ConvOpts::new().padding(1)),
        (
            [3, 16, 9, 6],
            [33, 16, 3, 3],
            ConvOpts::new().stride(2).padding(1),
        ),
        (
            [2, 16, 13, 13],
            [16, 16, 4, 4],
            ConvOpts::new().stride(3).padding(1),
        ),
        ([2, 16, 9, 9], [16, 16, 1, 1], ConvOpts::new().stride(2)),
        (
            [2, 16, 11, 8],
            [18, 16, 3, 2],
            ConvOpts::new()
                .stride_hw(2, 1)
                .padding_hw(2, 1)
                .dilation_hw(2, 1),
        ),
        (
            [2, 16, 15, 15],
            [20, 16, 4, 4],
            ConvOpts::new().stride(2).padding(1),
        ),
        ([48, 16, 7, 7], [16, 16, 3, 3], ConvOpts::new().padding(1)),
        // Rows wide enough for a vector but narrower than two (21), across several panels.
        ([2, 16, 9, 21], [17, 16, 3, 3], ConvOpts::new().padding(1)),
        // An input column no output reads (the 7 outputs read columns up to 2·6 + 2 = 14, so
        // column 15 is unread): its gradient's column of the transposed convolution sees only
        // padding.
        ([2, 16, 9, 16], [16, 16, 3, 3], ConvOpts::new().stride(2)),
    ];
    for (k, (xs, ws, o)) in cases.into_iter().enumerate() {
        f32_agrees_with_f64(xs, ws, &o, 300 + 10 * k as u64);
    }
}

#[test]
fn a_dilation_that_overflows_the_padded_copy_gives_zeros() {
    // Padding 2^60 within the reach of a dilation of 2^61 − 1: the second tap's offset into a
    // padded copy would wrap around. Every output sees only padding, as in PyTorch.
    let x = Tensor::ones(&[1, 1, 4, 16], DType::F32);
    let w = Tensor::ones(&[1, 1, 2, 1], DType::F32);
    let o = ConvOpts::new()
        .padding_hw(1 << 60, 0)
        .dilation_hw((1 << 61) - 1, 1);
    let y = x.conv2d(&w, &o);
    assert_eq!(y.shape(), &[1, 1, 5, 16]);
    assert!(y.to_vec::<f32>().iter().all(|&v| v == 0.0));
}
