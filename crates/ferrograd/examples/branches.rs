//! The seed's worked example of reverse mode on a tiny network with a skip branch:
//! forward values, every gradient, the detached skip, finite differences at a smooth point and
//! at the ReLU kink, and one gradient-descent step at two learning rates.
//!
//! `cargo run --release --example branches`

use ferrograd::prelude::*;

/// Parameters and input of the network p = w·x, z = p + b, h = relu(z), q = v·h, y = q + p.
#[derive(Clone, Copy)]
struct Point {
    x: f64,
    w: f64,
    b: f64,
    v: f64,
}

const TARGET: f64 = 1.0;

/// Intermediate values and the loss L = (y − target)²/2, tracked for autodiff.
struct Forward {
    leaves: [Tensor; 4],
    p: Tensor,
    z: Tensor,
    h: Tensor,
    q: Tensor,
    y: Tensor,
    loss: Tensor,
}

fn forward(pt: Point, detach_skip: bool) -> Forward {
    let leaves = [pt.x, pt.w, pt.b, pt.v].map(|v| Tensor::scalar(v).requires_grad());
    let [x, w, b, v] = &leaves;
    let p = w * x;
    let z = &p + b;
    let h = z.relu();
    let q = v * &h;
    let skip = if detach_skip { p.detach() } else { p.clone() };
    let y = &q + &skip;
    let loss = (&y - TARGET).square() * 0.5;
    Forward {
        leaves,
        p,
        z,
        h,
        q,
        y,
        loss,
    }
}

fn loss_at(pt: Point) -> f64 {
    no_grad(|| forward(pt, false).loss.item())
}

fn main() {
    let pt = Point {
        x: 2.0,
        w: 1.0,
        b: -1.0,
        v: 3.0,
    };
    let f = forward(pt, false);
    println!(
        "forward: p={} z={} h={} q={} y={} loss={}",
        f.p.item(),
        f.z.item(),
        f.h.item(),
        f.q.item(),
        f.y.item(),
        f.loss.item()
    );
    let [x, w, b, v] = &f.leaves;
    let g = grad(&f.loss, &[&f.p, w, b, v, x]);
    println!(
        "gradients: dL/dp={} dL/dw={} dL/db={} dL/dv={} dL/dx={}",
        g[0].item(),
        g[1].item(),
        g[2].item(),
        g[3].item(),
        g[4].item()
    );
    let again = f.loss.backward();
    println!(
        "second backward, fresh: dL/dw={}",
        again.get(w).unwrap().item()
    );

    let d = forward(pt, true);
    println!(
        "detached skip: loss={} dL/dw={} (the direct branch's 8 is lost)",
        d.loss.item(),
        d.loss.backward().get(&d.leaves[1]).unwrap().item()
    );

    println!("finite differences of L in w:");
    for (name, at) in [
        ("smooth point b=-1", pt),
        ("ReLU kink b=-2", Point { b: -2.0, ..pt }),
    ] {
        let fa = forward(at, false);
        let autodiff = fa.loss.backward().get(&fa.leaves[1]).unwrap().item();
        println!("  {name}: autodiff {autodiff}");
        for h in [1e-2, 1e-4, 1e-6] {
            let l = |dw: f64| loss_at(Point { w: at.w + dw, ..at });
            let left = (l(0.0) - l(-h)) / h;
            let right = (l(h) - l(0.0)) / h;
            let central = (l(h) - l(-h)) / (2.0 * h);
            println!("    step {h:e}: left {left:.6} right {right:.6} central {central:.6}");
        }
    }

    println!("one gradient-descent step on w, b, v:");
    for lr in [0.01, 0.1] {
        let f = forward(pt, false);
        let gr = f.loss.backward();
        let step = |i: usize| f.leaves[i].item() - lr * gr.get(&f.leaves[i]).unwrap().item();
        let next = Point {
            x: pt.x,
            w: step(1),
            b: step(2),
            v: step(3),
        };
        println!(
            "  lr {lr}: w={:.4} b={:.4} v={:.4} -> loss {:.8}",
            next.w,
            next.b,
            next.v,
            loss_at(next)
        );
    }
}
