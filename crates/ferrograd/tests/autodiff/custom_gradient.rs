//! User-defined derivatives (seed 003): stability, several inputs, captured variables, higher
//! order through a custom rule, nested custom second derivatives, errors, stop_gradient.

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn log1pexp(x: &Tensor) -> Tensor {
    custom_gradient(&[x], |xs| {
        let e = xs[0].exp();
        let y = (&e + 1.0).log();
        (y, move |up: &Tensor| {
            vec![up * &(1.0 - &(1.0 / &(&e + 1.0)))]
        })
    })
}

#[test]
fn log1pexp_is_stable_where_the_naive_gradient_is_nan() {
    let x = Tensor::scalar(100.0f32).requires_grad();
    let naive = (&x.exp() + 1.0).log();
    assert!(grad(&naive, &[&x])[0].item().is_nan());
    let y = log1pexp(&x);
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(grad(&y, &[&x])[0].item(), 1.0);
}

#[test]
fn several_inputs() {
    let x = Tensor::scalar(2.0f32).requires_grad();
    let y = Tensor::scalar(3.0f32).requires_grad();
    let z = custom_gradient(&[&x, &y], |v| {
        let (a, b) = (v[0].clone(), v[1].clone());
        let z = &a * &b;
        (z, move |up: &Tensor| vec![up * &b, up * &a])
    });
    assert_eq!(z.item(), 6.0);
    let g = z.backward();
    assert_eq!(
        (g.get(&x).unwrap().item(), g.get(&y).unwrap().item()),
        (3.0, 2.0)
    );
}

#[test]
fn variables_are_passed_as_inputs() {
    let weights = Tensor::ones(&[2], DType::F32).requires_grad();
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).requires_grad();
    let poly = custom_gradient(&[&x, &weights], |v| {
        let (x, w) = (v[0].clone(), v[1].clone());
        let (w0, w1) = (w.narrow(0, 0, 1), w.narrow(0, 1, 1));
        let poly = &(&w1 * &x) + &w0;
        (poly, move |up: &Tensor| {
            let dx = up * &w1;
            let dw = Tensor::cat(
                &[&(up * &x).sum().reshape(&[1]), &up.sum().reshape(&[1])],
                0,
            );
            vec![dx, dw.reshape(&[2])]
        })
    });
    assert_eq!(poly.to_vec::<f32>(), vec![2.0, 3.0, 4.0]);
    let g = poly.sum().backward();
    assert_eq!(g.get(&x).unwrap().to_vec::<f32>(), vec![1.0, 1.0, 1.0]);
    assert_eq!(g.get(&weights).unwrap().to_vec::<f32>(), vec![6.0, 3.0]);
}

fn cube(x: &Tensor) -> Tensor {
    custom_gradient_named("cube", &[x], |v| {
        let x = v[0].clone();
        (x.powf(3.0), move |up: &Tensor| {
            vec![up * &(&x.square() * 3.0)]
        })
    })
}

#[test]
fn a_custom_rule_is_differentiated_again() {
    let x = Tensor::scalar(1.5f64).requires_grad();
    let d1 = grad_with_graph(&cube(&x), &[&x]).remove(0);
    assert_eq!(d1.item(), 3.0 * 1.5 * 1.5);
    let d2 = grad(&d1, &[&x]).remove(0);
    assert_eq!(d2.item(), 6.0 * 1.5);
    let opts = GradcheckOptions::default();
    gradcheck(
        |t| cube(&t[0]),
        &[Tensor::from_vec(vec![0.3f64, -1.2, 2.0], &[3])],
        &opts,
    )
    .unwrap();
    gradgradcheck(
        |t| cube(&t[0]),
        &[Tensor::from_vec(vec![0.3f64, -1.2, 2.0], &[3])],
        &opts,
    )
    .unwrap();
    gradgradcheck(
        |t| log1pexp(&t[0]),
        &[Tensor::from_vec(vec![0.3f64, -1.2, 2.0], &[3])],
        &opts,
    )
    .unwrap();
}

#[test]
fn a_nested_custom_second_derivative_is_the_one_used() {
    // y = x³ whose first derivative 3x² carries its own derivative, deliberately 7x instead of
    // 6x so that the test can tell it was used.
    let op = |x: &Tensor| {
        custom_gradient(&[x], |v| {
            let x = v[0].clone();
            let y = x.powf(3.0);
            (y, move |dy: &Tensor| {
                let first = custom_gradient(&[&x], |u| {
                    let x = u[0].clone();
                    let g = &x.square() * 3.0;
                    (g, move |ddy: &Tensor| vec![ddy * &(&x * 7.0)])
                });
                vec![dy * &first]
            })
        })
    };
    let x = Tensor::scalar(2.0f64).requires_grad();
    let d1 = grad_with_graph(&op(&x), &[&x]).remove(0);
    assert_eq!(d1.item(), 12.0);
    assert_eq!(grad(&d1, &[&x])[0].item(), 14.0);
}

#[test]
fn gradcheck_tells_right_rules_from_wrong_ones() {
    let opts = GradcheckOptions::default();
    let x = Tensor::from_vec(vec![-2.0f64, 0.1, 3.0], &[3]);
    gradcheck(|t| log1pexp(&t[0]), std::slice::from_ref(&x), &opts).unwrap();
    let wrong = |t: &[Tensor]| {
        custom_gradient(&[&t[0]], |v| {
            let x = v[0].clone();
            (x.sin(), move |up: &Tensor| vec![up * &x.sin()]) // should be cos
        })
    };
    let err = gradcheck(wrong, &[x], &opts).unwrap_err().to_string();
    assert!(err.starts_with("gradcheck: input 0"), "{err}");
}

#[test]
#[should_panic(expected = "scale: the gradient function returned 2 gradients for 1 inputs")]
fn wrong_gradient_count_names_the_function() {
    let x = Tensor::scalar(1.0f32).requires_grad();
    let y = custom_gradient_named("scale", &[&x], |v| {
        (&v[0] * 2.0, |up: &Tensor| vec![up * 2.0, up.clone()])
    });
    let _ = y.backward();
}

#[test]
#[should_panic(expected = "scale: gradient 0 has shape [3], expected [2] (the shape of input 0)")]
fn wrong_gradient_shape_names_the_function() {
    let x = Tensor::ones(&[2], DType::F32).requires_grad();
    let y = custom_gradient_named("scale", &[&x], |v| {
        (&v[0] * 2.0, |up: &Tensor| {
            vec![Tensor::ones(&[3], up.dtype())]
        })
    });
    let _ = y.sum().backward();
}

#[test]
#[should_panic(
    expected = "mix: variable gradient 1 has shape [1], expected [2] (the shape of \
                           variable 1)"
)]
fn wrong_variable_gradient_shape_names_the_variable() {
    let (a, b) = (
        Tensor::ones(&[1], DType::F32).requires_grad(),
        Tensor::ones(&[2], DType::F32).requires_grad(),
    );
    let x = Tensor::ones(&[2], DType::F32).requires_grad();
    let y = custom_gradient_with_variables("mix", &[&x], |v| {
        let y = &(&v[0] * &a) + &b;
        (y, |up: &Tensor, vars: &[Tensor]| {
            let wrong = vec![Some(up.sum().reshape(&[1])), Some(vars[0].clone())];
            (vec![up.clone()], wrong)
        })
    });
    let _ = y.sum().backward();
}

#[test]
fn several_outputs_with_one_rule() {
    let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).requires_grad();
    let outs = custom_gradient_n("sum_and_product", &[&x], |v| {
        let x = v[0].clone();
        let ys = vec![x.sum(), x.narrow(0, 0, 1) * x.narrow(0, 1, 1)];
        (ys, move |ups: &[Tensor]| {
            let (a, b) = (x.narrow(0, 0, 1), x.narrow(0, 1, 1));
            let dprod = Tensor::cat(&[&b, &a], 0) * &ups[1];
            vec![&ups[0].broadcast_to(&[2]) + &dprod]
        })
    });
    assert_eq!(outs[0].item(), 3.0);
    assert_eq!(outs[1].to_vec::<f64>(), vec![2.0]);
    let both = (&outs[0] + &outs[1].sum()).backward();
    assert_eq!(both.get(&x).unwrap().to_vec::<f64>(), vec![3.0, 2.0]);
    // Only the first output reaches: the second's upstream is zeros.
    let first = outs[0].backward();
    assert_eq!(first.get(&x).unwrap().to_vec::<f64>(), vec![1.0, 1.0]);
}

#[test]
fn stop_gradient_lets_an_op_without_gradient_run_inside() {
    let x = Tensor::from_vec(vec![0.3f32, 0.5], &[2]).requires_grad();
    let res = custom_gradient(&[&x], |v| {
        let shuffled = v[0].shuffle(&mut StdRng::seed_from_u64(0)).stop_gradient();
        (shuffled, |up: &Tensor| vec![up.clone()]) // an arbitrary custom gradient
    });
    let mut got = res.to_vec::<f32>();
    got.sort_by(f32::total_cmp);
    assert_eq!(got, vec![0.3, 0.5]);
    assert_eq!(
        res.sum().backward().get(&x).unwrap().to_vec::<f32>(),
        vec![1.0, 1.0]
    );
}

#[test]
#[should_panic(expected = "shuffle has no derivative")]
fn an_op_without_gradient_fails_at_backward_naming_it() {
    // The custom rule reads the shuffled tensor without stop_gradient; differentiating that
    // rule (a second-order pass) reaches the shuffle.
    let x = Tensor::from_vec(vec![0.3f32, 0.5], &[2]).requires_grad();
    let y = custom_gradient(&[&x], |v| {
        let shuffled = v[0].shuffle(&mut StdRng::seed_from_u64(0));
        (v[0].square(), move |up: &Tensor| vec![up * &shuffled])
    });
    let g = grad_with_graph(&y.sum(), &[&x]).remove(0);
    let _ = g.sum().backward();
}

#[test]
fn untracked_inputs_give_untracked_outputs() {
    let x = Tensor::scalar(1.0f32);
    assert!(!log1pexp(&x).is_tracked());
    let t = x.requires_grad();
    assert!(!no_grad(|| log1pexp(&t)).is_tracked());
}
