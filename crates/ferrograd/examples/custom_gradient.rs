//! The cases of seed 003 (`tf.custom_gradient`) with ferrograd's `custom_gradient`.
//!
//! `cargo run --release --example custom_gradient`

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn main() {
    log1pexp();
    two_inputs_and_a_captured_variable();
    second_order_and_stop_gradient();
}

/// A numerically stable log(1 + eˣ).
fn log1pexp() {
    let x = Tensor::scalar(100.0f32).requires_grad();
    let naive = (&x.exp() + 1.0).log();
    let stable = custom_gradient_named("log1pexp", &[&x], |v| {
        let e = v[0].exp();
        let y = (&e + 1.0).log();
        (y, move |up: &Tensor| {
            vec![up * &(1.0 - &(1.0 / &(&e + 1.0)))]
        })
    });
    println!(
        "log1pexp at x=100 (f32): naive gradient {}, custom gradient {}",
        grad(&naive, &[&x])[0].item(),
        grad(&stable, &[&x])[0].item()
    );
}

/// Two inputs, bar(x, y) = x·y; and a variable read by the function, passed as an input.
fn two_inputs_and_a_captured_variable() {
    let (x, y) = (
        Tensor::scalar(2.0f32).requires_grad(),
        Tensor::scalar(3.0f32).requires_grad(),
    );
    let z = custom_gradient_named("bar", &[&x, &y], |v| {
        let (a, b) = (v[0].clone(), v[1].clone());
        (&a * &b, move |up: &Tensor| vec![up * &b, up * &a])
    });
    let g = z.backward();
    println!(
        "bar(2, 3) = {}: dz/dx = {}, dz/dy = {}",
        z.item(),
        g.get(&x).unwrap().item(),
        g.get(&y).unwrap().item()
    );

    let weights = Tensor::ones(&[2], DType::F32).requires_grad();
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).requires_grad();
    let poly = custom_gradient_named("linear_poly", &[&x, &weights], |v| {
        let (x, w) = (v[0].clone(), v[1].clone());
        let (w0, w1) = (w.narrow(0, 0, 1), w.narrow(0, 1, 1));
        let poly = &(&w1 * &x) + &w0;
        (poly, move |up: &Tensor| {
            let dw = Tensor::cat(
                &[&(up * &x).sum().reshape(&[1]), &up.sum().reshape(&[1])],
                0,
            );
            vec![up * &w1, dw]
        })
    });
    let g = poly.sum().backward();
    println!(
        "linear_poly: poly = {:?}, dpoly/dx = {:?}, dpoly/dweights = {:?}",
        poly.to_vec::<f32>(),
        g.get(&x).unwrap().to_vec::<f32>(),
        g.get(&weights).unwrap().to_vec::<f32>()
    );
}

/// A hand-written derivative differentiated again (x³ with rule 3x² gives 6x), and an op
/// without a gradient inside, cut with stop_gradient.
fn second_order_and_stop_gradient() {
    let x = Tensor::scalar(2.0f64).requires_grad();
    let cube = custom_gradient_named("cube", &[&x], |v| {
        let x = v[0].clone();
        (x.powf(3.0), move |up: &Tensor| {
            vec![up * &(&x.square() * 3.0)]
        })
    });
    let d1 = grad_with_graph(&cube, &[&x]).remove(0);
    println!(
        "cube at 2: first derivative {}, second {}",
        d1.item(),
        grad(&d1, &[&x])[0].item()
    );

    let x = Tensor::from_vec(vec![0.3f32, 0.5], &[2]).requires_grad();
    let res = custom_gradient_named("test_func_with_stop_grad", &[&x], |v| {
        let shuffled = v[0].shuffle(&mut StdRng::seed_from_u64(1)).stop_gradient();
        (shuffled, |up: &Tensor| vec![up.clone()])
    });
    println!(
        "shuffle under stop_gradient: {:?}, gradient {:?}",
        res.to_vec::<f32>(),
        res.sum().backward().get(&x).unwrap().to_vec::<f32>()
    );
}
