//! Forward mode (`func::jvp`, `linearize`, `jacfwd`): every op's tangent rule against central
//! differences in f64, one case per declared op and per element-wise primitive (a test fails
//! for an op no case reaches), and forward mode composed with reverse mode and with itself.

use std::collections::BTreeSet;

use ferrograd::autograd::GradcheckOptions;
use ferrograd::func::{self, jvpcheck};
use ferrograd::graph::{trace, Op};
use ferrograd::prelude::*;
use ferrograd::{Binary, RecurrentWeights, Unary};

use crate::common::{panic_message, randn};

/// A function of tensors.
type Function = Box<dyn Fn(&[Tensor]) -> Tensor>;

/// A function of f64 tensors and the points to check its tangents at.
struct Case {
    name: &'static str,
    f: Function,
    at: Vec<Tensor>,
    /// The finite-difference step: larger where the function rounds to f32.
    eps: f64,
    /// Whether reverse mode differentiates it: not where a gradient would reach an op without
    /// a derivative (an argmax, a comparison), which reverse mode refuses.
    reverse: bool,
}

/// A case whose function reads an op without a derivative.
fn flat(c: Case) -> Case {
    Case {
        reverse: false,
        ..c
    }
}

fn case(name: &'static str, f: impl Fn(&[Tensor]) -> Tensor + 'static, at: Vec<Tensor>) -> Case {
    Case {
        name,
        f: Box::new(f),
        at,
        eps: GradcheckOptions::default().eps,
        reverse: true,
    }
}

/// Values spread apart, so that maxima, sorts and kinks are not at ties.
fn spread(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> = (0..n)
        .map(|i| (i as f64 * 0.37 + seed as f64).sin() * 2.0)
        .collect();
    v.iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x += i as f64 * 1e-3);
    Tensor::from_vec(v, shape)
}

fn ids(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()])
}

fn reductions() -> Vec<Case> {
    vec![
        case("sum", |p| p[0].sum(), vec![randn(&[3, 4], 1)]),
        case("mean", |p| p[0].mean(), vec![randn(&[3, 4], 2)]),
        case("max", |p| p[0].max(), vec![spread(&[3, 4], 3)]),
        case("min", |p| p[0].min(), vec![spread(&[3, 4], 4)]),
        case(
            "sum_axes",
            |p| p[0].sum_axes(&[1], true),
            vec![randn(&[3, 4], 5)],
        ),
        case(
            "mean_axes",
            |p| p[0].mean_axes(&[0], false),
            vec![randn(&[3, 4], 6)],
        ),
        case(
            "max_axes",
            |p| p[0].max_axes(&[1], false),
            vec![spread(&[3, 4], 7)],
        ),
        case(
            "min_axes",
            |p| p[0].min_axes(&[0, 2], true),
            vec![spread(&[3, 2, 4], 8)],
        ),
        case(
            "logsumexp",
            |p| p[0].logsumexp(&[1], false),
            vec![randn(&[3, 4], 9)],
        ),
        case(
            "var_axes",
            |p| p[0].var_axes(&[1], 1, false),
            vec![randn(&[3, 4], 10)],
        ),
        case(
            "std_axes",
            |p| p[0].std_axes(&[0, 1], 0, true),
            vec![randn(&[3, 4], 11)],
        ),
        case("cumsum", |p| p[0].cumsum(1), vec![randn(&[3, 4], 12)]),
        case("cumprod", |p| p[0].cumprod(1), vec![randn(&[3, 4], 13)]),
        case("sum_to", |p| p[0].sum_to(&[1, 4]), vec![randn(&[3, 4], 14)]),
        case("softmax", |p| p[0].softmax(1), vec![randn(&[3, 4], 15)]),
        case(
            "log_softmax",
            |p| p[0].log_softmax(0),
            vec![randn(&[3, 4], 16)],
        ),
        case(
            "topk",
            |p| p[0].topk_along(2, 1, true).0,
            vec![spread(&[3, 5], 17)],
        ),
        flat(case(
            "argmax",
            |p| &p[0] * &p[0].argmax(1).to_dtype(DType::F64).sum(),
            vec![spread(&[3, 4], 18)],
        )),
        flat(case(
            "argmin",
            |p| &p[0] * &p[0].argmin(0).to_dtype(DType::F64).sum(),
            vec![spread(&[3, 4], 19)],
        )),
    ]
}

fn products() -> Vec<Case> {
    let opts = ConvOpts::new().padding(1);
    let o2 = opts;
    let o3 = ConvOpts::new().stride(2).padding(1).output_padding(1);
    let o4 = ConvOpts::new();
    vec![
        case(
            "matmul",
            |p| p[0].matmul(&p[1]),
            vec![randn(&[2, 3, 4], 20), randn(&[4, 2], 21)],
        ),
        case(
            "linear",
            |p| p[0].linear(&p[1], Some(&p[2])),
            vec![randn(&[3, 4], 22), randn(&[2, 4], 23), randn(&[2], 24)],
        ),
        case(
            "einsum",
            |p| Tensor::einsum("ij,jk,k->i", &[&p[0], &p[1], &p[2]]),
            vec![randn(&[2, 3], 25), randn(&[3, 4], 26), randn(&[4], 27)],
        ),
        case(
            "conv2d",
            move |p| p[0].conv2d(&p[1], &opts),
            vec![randn(&[1, 2, 5, 5], 28), randn(&[3, 2, 3, 3], 29)],
        ),
        case(
            "conv2d_same",
            move |p| p[0].conv2d_same(&p[1], &o2),
            vec![randn(&[1, 2, 4, 4], 30), randn(&[2, 2, 2, 3], 31)],
        ),
        case(
            "conv_transpose2d",
            move |p| p[0].conv_transpose2d(&p[1], &o3),
            vec![randn(&[1, 2, 3, 3], 32), randn(&[2, 3, 3, 3], 33)],
        ),
        case(
            "conv2d_weight",
            move |p| p[0].conv2d_weight(&p[1], (3, 3), &o4),
            vec![randn(&[2, 2, 5, 5], 34), randn(&[2, 3, 3, 3], 35)],
        ),
        case(
            "attention",
            |p| p[0].scaled_dot_product_attention(&p[1], &p[2], &Attention::new().causal(true)),
            vec![
                randn(&[2, 3, 4], 36),
                randn(&[2, 3, 4], 37),
                randn(&[2, 3, 5], 38),
            ],
        ),
        case(
            "attention_masked",
            |p| {
                p[0].scaled_dot_product_attention(
                    &p[1],
                    &p[2],
                    &Attention::new().mask(&p[3]).scale(0.3),
                )
            },
            vec![
                randn(&[3, 4], 39),
                randn(&[2, 4], 40),
                randn(&[2, 2], 41),
                randn(&[3, 2], 42),
            ],
        ),
        case(
            "attention_dropout",
            |p| p[0].scaled_dot_product_attention(&p[1], &p[2], &Attention::new().dropout(0.3, 7)),
            vec![randn(&[3, 4], 43), randn(&[3, 4], 44), randn(&[3, 2], 45)],
        ),
    ]
}

/// Functions that take gradients inside (forward over reverse, `vmap` of `grad`): their
/// recordings hold a backward pass, whose rules read values computed inside ops.
fn gradients() -> Vec<Case> {
    vec![
        case(
            "gradient_through_a_vector_product",
            |p| {
                let loss = |q: &[Tensor]| p[1].matmul(&q[0].transpose(0, 1)).tanh().sum();
                func::grad(loss, &[&p[0]]).remove(0)
            },
            vec![randn(&[4, 3], 46), randn(&[3], 47)],
        ),
        case(
            "gradient_through_abs_and_a_lookup",
            |p| {
                let ids = Tensor::from_vec(vec![2i64, 0, 2], &[3]);
                let loss = |q: &[Tensor]| (&q[0].index_select(0, &ids) * &p[1]).abs().sum();
                func::grad(loss, &[&p[0]]).remove(0)
            },
            vec![spread(&[4, 2], 44), spread(&[3, 2], 45)],
        ),
        case(
            "gradient_through_layer_norm_of_a_captured_weight",
            |p| {
                let (w, b) = (
                    Tensor::from_vec(vec![0.5f64, -1.0, 2.0], &[3]),
                    Tensor::zeros(&[3], DType::F64),
                );
                let loss = |q: &[Tensor]| p[0].layer_norm(&q[0], &b, 1e-5).square().sum();
                func::grad(loss, &[&w]).remove(0)
            },
            vec![randn(&[2, 3], 43)],
        ),
        case(
            "gradient_of_a_small_cnn",
            |p| {
                let loss = |q: &[Tensor]| {
                    let h = p[1].conv2d(&q[0], &ConvOpts::new().padding(1)).relu();
                    h.max_pool2d(2, 2, 0).flatten_from(1).log_softmax(1).mean()
                };
                func::grad(loss, &[&p[0]]).remove(0)
            },
            vec![randn(&[2, 1, 3, 3], 48), spread(&[1, 1, 4, 4], 49)],
        ),
    ]
}

fn shapes() -> Vec<Case> {
    vec![
        case(
            "reshape",
            |p| p[0].reshape(&[4, 3]),
            vec![randn(&[3, 4], 50)],
        ),
        case(
            "permute",
            |p| p[0].permute(&[2, 0, 1]),
            vec![randn(&[2, 3, 4], 51)],
        ),
        case(
            "broadcast_to",
            |p| p[0].broadcast_to(&[2, 3, 4]),
            vec![randn(&[3, 1], 52)],
        ),
        case(
            "cat",
            |p| Tensor::cat(&[&p[0], &p[1]], 1),
            vec![randn(&[2, 3], 53), randn(&[2, 2], 54)],
        ),
        case(
            "cat_with_a_constant",
            |p| Tensor::cat(&[&p[0], &Tensor::ones(&[2, 2], DType::F64)], 1),
            vec![randn(&[2, 3], 55)],
        ),
        case("narrow", |p| p[0].narrow(1, 1, 2), vec![randn(&[2, 4], 56)]),
        case(
            "flatten_from",
            |p| p[0].flatten_from(1),
            vec![randn(&[2, 3, 4], 57)],
        ),
        case("squeeze", |p| p[0].squeeze(1), vec![randn(&[2, 1, 4], 58)]),
        case("unsqueeze", |p| p[0].unsqueeze(0), vec![randn(&[2, 4], 59)]),
        case(
            "pad",
            |p| p[0].pad(&[(1, 0), (2, 1)], 3.0),
            vec![randn(&[2, 4], 60)],
        ),
        case(
            "index_select",
            |p| p[0].index_select(1, &[2, 0, 2]),
            vec![randn(&[2, 4], 61)],
        ),
        case(
            "index_select_by",
            |p| p[0].index_select(0, &ids(&[1, 1, 0])),
            vec![randn(&[2, 4], 62)],
        ),
        case(
            "index_add",
            |p| p[0].index_add(0, &[1, 1], &p[1]),
            vec![randn(&[3, 2], 63), randn(&[2, 2], 64)],
        ),
        case(
            "gather",
            |p| p[0].gather(1, &Tensor::from_vec(vec![1i64, 0, 2, 2], &[2, 2])),
            vec![randn(&[2, 3], 65)],
        ),
        case(
            "scatter_add",
            |p| p[0].scatter_add(1, &Tensor::from_vec(vec![2i64, 0, 2, 1], &[2, 2]), &p[1]),
            vec![randn(&[2, 3], 78), randn(&[2, 2], 79)],
        ),
        case(
            "where_cond",
            |p| Tensor::from_vec(vec![1.0f64, 0.0, 1.0], &[3]).where_cond(&p[0], &p[1]),
            vec![randn(&[2, 3], 66), randn(&[3], 67)],
        ),
        case(
            "masked_fill",
            |p| p[0].masked_fill(&Tensor::from_vec(vec![1.0f64, 0.0, 0.0], &[3]), 5.0),
            vec![randn(&[2, 3], 68)],
        ),
        case("tril", |p| p[0].tril(0), vec![randn(&[3, 3], 69)]),
        case("triu", |p| p[0].triu(1), vec![randn(&[3, 4], 70)]),
        case("flip", |p| p[0].flip(&[0, 1]), vec![randn(&[2, 3], 71)]),
        case("roll", |p| p[0].roll(2, 1), vec![randn(&[2, 3], 72)]),
        case(
            "repeat",
            |p| p[0].repeat(&[2, 1, 3]),
            vec![randn(&[2, 3], 73)],
        ),
        Case {
            // Linear, and rounded to f32 on the way: a long step sees no rounding.
            eps: 1e-2,
            ..case(
                "to_dtype",
                |p| p[0].to_dtype(DType::F32).to_dtype(DType::F64),
                vec![randn(&[3], 74)],
            )
        },
        flat(case(
            "to_integer",
            |p| &p[0] * &p[0].to_dtype(DType::I64).sum().to_dtype(DType::F64),
            vec![spread(&[3], 75)],
        )),
        case(
            "stop_gradient",
            |p| &p[0] + &(&p[0].detach() * 0.0),
            vec![randn(&[3], 76)],
        ),
        flat(case(
            "compare_with_a_number",
            |p| &p[0] * &p[0].gt_scalar(0.1),
            vec![spread(&[4], 77)],
        )),
    ]
}

fn images() -> Vec<Case> {
    vec![
        case(
            "max_pool2d",
            |p| p[0].max_pool2d(2, 2, 0),
            vec![spread(&[1, 2, 4, 4], 80)],
        ),
        case(
            "avg_pool2d",
            |p| p[0].avg_pool2d(3, 1, 1),
            vec![randn(&[1, 2, 4, 4], 81)],
        ),
        case(
            "adaptive_avg_pool2d",
            |p| p[0].adaptive_avg_pool2d(2, 3),
            vec![randn(&[1, 2, 5, 6], 82)],
        ),
        case(
            "upsample_nearest2d",
            |p| p[0].upsample_nearest2d(2, 1),
            vec![randn(&[1, 2, 2, 3], 83)],
        ),
        case(
            "batch_norm",
            |p| p[0].batch_norm(&p[1], &p[2], 1e-5).0,
            vec![randn(&[3, 2, 2, 2], 84), randn(&[2], 85), randn(&[2], 86)],
        ),
        case(
            "layer_norm",
            |p| p[0].layer_norm(&p[1], &p[2], 1e-5),
            vec![randn(&[3, 4], 87), randn(&[4], 88), randn(&[4], 89)],
        ),
        case(
            "scaled_dot_product_attention_backward",
            |p| {
                let opts = Attention::new().causal(true);
                let out = p[1].scaled_dot_product_attention(&p[2], &p[3], &opts);
                let (dq, dk, dv) =
                    p[0].scaled_dot_product_attention_backward(&p[1], &p[2], &p[3], &out, &opts);
                &(&dq.sum_axes(&[1], false) + &dk.square().sum_axes(&[1], false))
                    * &dv.sum_axes(&[1], false)
            },
            vec![
                randn(&[2, 3, 2], 101),
                randn(&[2, 3, 2], 102),
                randn(&[2, 3, 2], 103),
                randn(&[2, 3, 2], 104),
            ],
        ),
        case(
            "max_pool2d_backward",
            |p| {
                let (_, at) = p[1].max_pool2d_with_indices([2, 2], [2, 2], [0, 0]);
                p[0].max_pool2d_backward(&at, (4, 4))
            },
            vec![randn(&[1, 2, 2, 2], 105), spread(&[1, 2, 4, 4], 106)],
        ),
        case(
            "layer_norm_backward",
            |p| {
                let (dx, dw, db) = p[0].layer_norm_backward(&p[1], &p[2], 1e-5);
                &(&dx.square().sum_axes(&[0], false) + &dw) * &db
            },
            vec![randn(&[3, 4], 98), randn(&[3, 4], 99), randn(&[4], 100)],
        ),
        case(
            "rms_norm",
            |p| p[0].rms_norm(Some(&p[1]), None),
            vec![randn(&[3, 4], 90), randn(&[4], 91)],
        ),
        case(
            "rope",
            |p| p[0].rope(2, 10_000.0),
            vec![randn(&[2, 3, 4], 92)],
        ),
        case("gelu_tanh", |p| p[0].gelu_tanh(), vec![randn(&[3, 4], 93)]),
        case(
            "leaky_relu_backward",
            |p| p[0].leaky_relu_backward(&p[1], 0.1),
            vec![randn(&[3, 4], 94), spread(&[3, 4], 95)],
        ),
        case(
            "gelu_backward",
            |p| p[0].gelu_backward(&p[1]),
            vec![randn(&[3, 4], 96), randn(&[3, 4], 97)],
        ),
    ]
}

/// PyTorch's four recurrent weights, in order.
fn w(p: &[Tensor]) -> RecurrentWeights<'_> {
    RecurrentWeights {
        w_ih: &p[0],
        w_hh: &p[1],
        b_ih: &p[2],
        b_hh: &p[3],
    }
}

fn recurrent() -> Vec<Case> {
    let (n, t, input, h) = (2, 3, 3, 2);
    let weights = |gates: usize, seed: u64| {
        vec![
            randn(&[gates * h, input], seed),
            randn(&[gates * h, h], seed + 1),
            randn(&[gates * h], seed + 2),
            randn(&[gates * h], seed + 3),
        ]
    };

    let with = |mut first: Vec<Tensor>, rest: Vec<Tensor>| {
        first.extend(rest);
        first
    };
    vec![
        case(
            "lstm_cell",
            |p| {
                let (h, c) = Tensor::lstm_cell(&p[0], &p[1], &p[2]);
                &h + &c
            },
            vec![
                randn(&[n, 4 * h], 100),
                randn(&[n, 4 * h], 101),
                randn(&[n, h], 102),
            ],
        ),
        case(
            "gru_cell",
            |p| Tensor::gru_cell(&p[0], &p[1], &p[2]),
            vec![
                randn(&[n, 3 * h], 103),
                randn(&[n, 3 * h], 104),
                randn(&[n, h], 105),
            ],
        ),
        case(
            "lstm",
            move |p| {
                let (out, h, c) = p[0].lstm(&p[1], &p[2], w(&p[3..]));
                &(&out.sum_axes(&[1], false) + &h) + &c
            },
            with(
                vec![
                    randn(&[n, t, input], 106),
                    randn(&[n, h], 107),
                    randn(&[n, h], 108),
                ],
                weights(4, 110),
            ),
        ),
        case(
            "gru",
            move |p| {
                let (out, h) = p[0].gru(&p[1], w(&p[2..]));
                &out.sum_axes(&[1], false) + &h
            },
            with(
                vec![randn(&[n, t, input], 120), randn(&[n, h], 121)],
                weights(3, 122),
            ),
        ),
        case(
            "rnn_tanh",
            move |p| {
                let (out, h) = p[0].rnn_tanh(&p[1], w(&p[2..]));
                &out.sum_axes(&[1], false) + &h
            },
            with(
                vec![randn(&[n, t, input], 130), randn(&[n, h], 131)],
                weights(1, 132),
            ),
        ),
    ]
}

/// Every element-wise primitive at points where it is smooth.
fn elementwise() -> Vec<Case> {
    let mut cases = Vec::new();
    for u in Unary::examples()
        .into_iter()
        .filter(|u| u.is_differentiable())
    {
        let at = match u.smooth_on() {
            UnaryDomain::Positive => &randn(&[2, 3], 140).abs() + 0.5,
            _ => spread(&[2, 3], 141),
        };
        cases.push(case("unary", move |p| u.apply(&p[0]), vec![at]));
    }
    for b in Binary::examples()
        .into_iter()
        .filter(|b| b.is_differentiable())
    {
        let second = &spread(&[3], 143).abs() + 0.5;
        cases.push(case(
            "binary",
            move |p| b.apply(&p[0], &p[1]),
            vec![spread(&[2, 3], 142), second],
        ));
    }
    cases
}

use ferrograd::UnaryDomain;

fn all_cases() -> Vec<Case> {
    let groups = [
        reductions(),
        products(),
        gradients(),
        shapes(),
        images(),
        recurrent(),
        elementwise(),
    ];
    groups.into_iter().flatten().collect()
}

#[test]
fn every_op_has_a_tangent_rule_that_matches_central_differences() {
    let mut failures = Vec::new();
    for c in all_cases() {
        let opts = GradcheckOptions {
            eps: c.eps,
            ..GradcheckOptions::default()
        };
        if let Err(e) = jvpcheck(&c.f, &c.at, &opts) {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_declared_op_is_reached_by_a_forward_mode_case() {
    let mut reached = BTreeSet::new();
    // The cases of single ops (those that take gradients inside read values computed inside
    // ops, which a graph does not hold).
    let single = [
        reductions(),
        products(),
        shapes(),
        images(),
        recurrent(),
        elementwise(),
    ];
    for c in single.into_iter().flatten() {
        let named: Vec<(String, Tensor)> = (0..c.at.len())
            .map(|i| (format!("x{i}"), c.at[i].clone()))
            .collect();
        let inputs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let t =
            trace(&inputs, &[], |p| vec![(c.f)(p)]).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        for i in 0..t.graph.len() {
            reached.insert(t.graph.node_data(i).op.variant());
        }
    }
    // A comparison with a number is a graph op only: eager code compares with a constant
    // tensor (a binary op), so no function reaches it.
    let graph_only = ["CompareScalar"];
    let missing: Vec<&str> = Op::declared_variants()
        .iter()
        .copied()
        .filter(|v| !reached.contains(v) && !graph_only.contains(v))
        .collect();
    assert!(
        missing.is_empty(),
        "no forward-mode case reaches {missing:?}"
    );
}

#[test]
fn jvp_of_an_mlp_matches_the_jacobian_by_reverse_mode() {
    let (x, w1, w2) = (
        randn(&[3, 4], 200),
        randn(&[5, 4], 201),
        randn(&[2, 5], 202),
    );
    let f = |x: &Tensor| x.linear(&w1, None).tanh().linear(&w2, None).softmax(1);
    let jr = func::jacrev(f, &x);
    let jf = func::jacfwd(f, &x);
    assert_eq!(jf.shape(), &[3, 2, 3, 4]);
    assert!(jf.allclose(&jr, 1e-12, 1e-12));
    // One tangent: the Jacobian contracted with it.
    let t = randn(&[3, 4], 203);
    let (y, ty) = func::jvp(|p: &[Tensor]| f(&p[0]), &[&x], &[&t]);
    assert!(y.allclose(&f(&x), 0.0, 0.0));
    let contracted = Tensor::einsum("abij,ij->ab", &[&jr, &t]);
    assert!(ty.allclose(&contracted, 1e-12, 1e-12));
    assert!(!ty.is_tracked() && !y.is_tracked());
}

#[test]
fn forward_over_reverse_hessian_matches_reverse_over_reverse() {
    let x = randn(&[4], 210);
    let w = randn(&[3, 4], 211);
    let f = |x: &Tensor| x.linear(&w, None).tanh().square().sum() + x.relu().powf(3.0).sum();
    let h_fwd = func::hessian_fwd(f, &x);
    let h_rev = func::hessian(f, &x);
    assert_eq!(h_fwd.shape(), &[4, 4]);
    assert!(h_fwd.allclose(&h_rev, 1e-10, 1e-10), "{h_fwd} vs {h_rev}");
}

#[test]
fn reverse_over_forward_differentiates_a_tangent() {
    // d/dx of the tangent of sin along t is −sin(x)·t.
    let x = randn(&[3], 220);
    let t = randn(&[3], 221);
    let g = func::grad(
        |p: &[Tensor]| {
            func::jvp(|q: &[Tensor]| q[0].sin(), &[&p[0]], &[&t])
                .1
                .sum()
        },
        &[&x],
    );
    let expected = &(-&x.sin()) * &t;
    assert!(g[0].allclose(&expected, 1e-14, 1e-14));
}

#[test]
fn forward_over_forward_gives_the_second_derivative() {
    // x³: the tangent of the tangent along 1 and 1 is 6x.
    let x = Tensor::from_vec(vec![0.5f64, -2.0], &[2]);
    let one = Tensor::ones(&[2], DType::F64);
    let (_, second) = func::jvp(
        |p: &[Tensor]| func::jvp(|q: &[Tensor]| q[0].powf(3.0), &[&p[0]], &[&one]).1,
        &[&x],
        &[&one],
    );
    assert_eq!(second.to_vec::<f64>(), [3.0, -12.0]);
}

#[test]
fn linearize_runs_the_function_once_for_many_tangents() {
    let calls = std::cell::Cell::new(0);
    let x = randn(&[3], 230);
    let lin = func::linearize(
        |p: &[Tensor]| {
            calls.set(calls.get() + 1);
            p[0].exp()
        },
        &[&x],
    )
    .unwrap();
    for seed in 0..3 {
        let t = randn(&[3], 231 + seed);
        let expected = lin.value() * &t;
        assert!(lin.jvp(&[&t]).unwrap().allclose(&expected, 1e-15, 0.0));
    }
    assert_eq!(calls.get(), 1);
}

#[test]
fn jvp_refuses_tangents_that_do_not_fit_and_ops_without_rules() {
    let x = randn(&[3], 240);
    let e = func::try_jvp(|p: &[Tensor]| p[0].exp(), &[&x], &[&randn(&[2], 241)]);
    assert!(e.unwrap_err().to_string().contains("tangent 0 is [2]"));
    let e = func::try_jvp(|p: &[Tensor]| p[0].exp(), &[&x], &[]);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("0 tangents for 1 primals"));
    // A custom gradient has no tangent rule: named, never a silent zero.
    let f = |p: &[Tensor]| {
        custom_gradient(&[&p[0]], |xs: &[Tensor]| {
            (xs[0].exp(), |g: &Tensor| vec![g.clone()])
        })
    };
    let e = func::try_jvp(f, &[&x], &[&x]).unwrap_err().to_string();
    assert!(
        e.contains("forward mode: these ops have no rule") && e.contains("custom"),
        "{e}"
    );
    let msg = panic_message(|| {
        func::jvp(f, &[&x], &[&x]);
    });
    assert!(msg.contains("have no rule for it"), "{msg}");
}

#[test]
fn jvpcheck_catches_a_wrong_derivative() {
    // A custom gradient is outside forward mode; a wrong composite is not: x·x checked as if
    // its tangent were the function's, with a tolerance that a wrong rule fails.
    let x = randn(&[3], 250);
    let ok = jvpcheck(
        |p: &[Tensor]| &p[0] * &p[0],
        std::slice::from_ref(&x),
        &GradcheckOptions::default(),
    );
    assert!(ok.is_ok());
    // Forward mode of detach is zero, but the finite difference sees the value move.
    let e = jvpcheck(
        |p: &[Tensor]| p[0].detach() * 2.0,
        &[x],
        &GradcheckOptions::default(),
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("jvpcheck: output element"));
}

#[test]
fn every_tangent_rule_is_differentiable_again() {
    // The tangent along a fixed direction, as a function of the point, checked by reverse
    // mode against central differences: reverse over forward for every op.
    let mut failures = Vec::new();
    for c in all_cases().into_iter().filter(|c| c.reverse) {
        let ts: Vec<Tensor> =
            c.at.iter()
                .enumerate()
                .map(|(i, x)| randn(x.shape(), 300 + i as u64))
                .collect();
        let f = &c.f;
        let tangent = |p: &[Tensor]| {
            let primals: Vec<&Tensor> = p.iter().collect();
            let tangents: Vec<&Tensor> = ts.iter().collect();
            func::jvp(|q: &[Tensor]| f(q), &primals, &tangents).1
        };
        let opts = GradcheckOptions {
            eps: c.eps,
            ..GradcheckOptions::default()
        };
        if let Err(e) = gradcheck(tangent, &c.at, &opts) {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A random choice of batched inputs and their batch axes for a case (at least one batched).
fn in_dims_for(at: &[Tensor], seed: u64) -> Vec<Option<usize>> {
    let pick =
        |i: usize, k: u64| (seed.wrapping_mul(2_654_435_761) >> (i * 3 + k as usize)) as usize;
    let mut dims: Vec<Option<usize>> = at
        .iter()
        .enumerate()
        .map(|(i, x)| match pick(i, 0) % 3 {
            0 if i > 0 => None,
            _ => Some(pick(i, 1) % (x.ndim() + 1)),
        })
        .collect();
    if dims.iter().all(Option::is_none) {
        dims[0] = Some(0);
    }
    dims
}

/// Input `x` batched: `n` examples (the first `x` itself) stacked along `dim`.
fn batch_of(x: &Tensor, n: usize, dim: usize, seed: u64) -> Tensor {
    let mut examples = vec![x.clone()];
    for k in 1..n {
        examples.push(x + &(&randn(x.shape(), seed + k as u64) * 0.1));
    }
    Tensor::stack(&examples.iter().collect::<Vec<_>>(), dim)
}

#[test]
fn every_batching_rule_matches_a_loop_over_the_batch() {
    let n = 3;
    let mut failures = Vec::new();
    for c in all_cases() {
        for seed in 0..3u64 {
            let dims = in_dims_for(&c.at, seed + 1);
            let inputs: Vec<Tensor> =
                c.at.iter()
                    .zip(&dims)
                    .map(|(x, d)| match d {
                        Some(d) => batch_of(x, n, *d, 400 + seed),
                        None => x.clone(),
                    })
                    .collect();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let batched = func::try_vmap(|a| vec![(c.f)(a)], &refs, &dims);
            let batched = match batched {
                Ok(mut b) => b.remove(0),
                Err(e) => {
                    failures.push(format!("{} {dims:?}: {e}", c.name));
                    continue;
                }
            };
            let looped: Vec<Tensor> = (0..n)
                .map(|k| {
                    let example: Vec<Tensor> = inputs
                        .iter()
                        .zip(&dims)
                        .map(|(x, d)| match d {
                            Some(d) => x.narrow(*d, k, 1).squeeze(*d),
                            None => x.clone(),
                        })
                        .collect();
                    (c.f)(&example)
                })
                .collect();
            let expected = Tensor::stack(&looped.iter().collect::<Vec<_>>(), 0);
            if batched.shape() != expected.shape() || !batched.allclose(&expected, 1e-12, 1e-12) {
                failures.push(format!("{} {dims:?}: {batched} against {expected}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn per_example_gradients_by_vmap_of_grad_match_a_loop() {
    let (w1, w2) = (randn(&[5, 4], 500), randn(&[3, 5], 501));
    let (xs, ys) = (randn(&[6, 4], 502), randn(&[6, 3], 503));
    let loss = |w1: &Tensor, w2: &Tensor, x: &Tensor, y: &Tensor| {
        (&x.linear(w1, None).tanh().linear(w2, None) - y)
            .square()
            .mean()
    };
    let per_example = func::vmap(
        |a: &[Tensor]| {
            let g = func::grad(
                |p: &[Tensor]| loss(&p[0], &p[1], &a[2], &a[3]),
                &[&a[0], &a[1]],
            );
            Tensor::cat(&[&g[0].reshape(&[20]), &g[1].reshape(&[15])], 0)
        },
        &[None, None, Some(0), Some(0)],
    )(&[&w1, &w2, &xs, &ys]);
    assert_eq!(per_example.shape(), &[6, 35]);
    for k in 0..6 {
        let (x, y) = (xs.narrow(0, k, 1).squeeze(0), ys.narrow(0, k, 1).squeeze(0));
        let g = func::grad(|p: &[Tensor]| loss(&p[0], &p[1], &x, &y), &[&w1, &w2]);
        let expected = Tensor::cat(&[&g[0].reshape(&[20]), &g[1].reshape(&[15])], 0);
        assert!(per_example
            .narrow(0, k, 1)
            .squeeze(0)
            .allclose(&expected, 1e-12, 1e-12));
    }
}

#[test]
fn vmap_refuses_in_dims_that_do_not_fit() {
    let (a, b) = (randn(&[3, 2], 510), randn(&[4, 2], 511));
    let f = |p: &[Tensor]| vec![&p[0] + &p[1]];
    let e = |r: ferrograd::Result<Vec<Tensor>>| r.unwrap_err().to_string();
    assert!(e(func::try_vmap(f, &[&a, &b], &[Some(0), Some(0)])).contains("different sizes"));
    assert!(e(func::try_vmap(f, &[&a, &b], &[Some(2), None])).contains("no axis 2"));
    assert!(e(func::try_vmap(f, &[&a, &b], &[None, None])).contains("no input is batched"));
    assert!(e(func::try_vmap(f, &[&a], &[Some(0), None])).contains("2 in_dims for 1 inputs"));
}

#[test]
fn vmap_names_an_op_it_has_no_rule_for() {
    let x = randn(&[3, 2], 520);
    let f = |p: &[Tensor]| {
        vec![custom_gradient(&[&p[0]], |xs: &[Tensor]| {
            (xs[0].exp(), |g: &Tensor| vec![g.clone()])
        })]
    };
    let e = func::try_vmap(f, &[&x], &[Some(0)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vmap: these ops have no rule") && e.contains("custom"),
        "{e}"
    );
}

#[test]
fn vmap_stays_right_where_values_steer_the_function() {
    // Control flow on a value, and max pooling's gradient (whose routing is read from the
    // values): the batch is checked against one example and run per example where it must.
    let xs = Tensor::from_vec(vec![1.0f64, 2.0, -3.0, -1.0, 0.5, 0.25], &[3, 2]);
    let steered = func::vmap(
        |a: &[Tensor]| match a[0].sum().item() > 0.0 {
            true => &a[0] * 2.0,
            false => &a[0] * 3.0,
        },
        &[Some(0)],
    )(&[&xs]);
    assert_eq!(steered.to_vec::<f64>(), [2.0, 4.0, -9.0, -3.0, 1.0, 0.5]);
    let (w, images) = (randn(&[2, 1, 3, 3], 530), randn(&[4, 1, 1, 4, 4], 531));
    let loss = |w: &Tensor, image: &Tensor| {
        let h = image
            .conv2d(w, &ConvOpts::new().padding(1))
            .max_pool2d(2, 2, 0);
        h.flatten_from(1).log_softmax(1).mean()
    };
    let per_example = func::vmap(
        |a: &[Tensor]| func::grad(|p: &[Tensor]| loss(&p[0], &a[1]), &[&a[0]]).remove(0),
        &[None, Some(0)],
    )(&[&w, &images]);
    for k in 0..4 {
        let image = images.narrow(0, k, 1).squeeze(0);
        let g = func::grad(|p: &[Tensor]| loss(&p[0], &image), &[&w]).remove(0);
        assert!(per_example
            .narrow(0, k, 1)
            .squeeze(0)
            .allclose(&g, 1e-12, 1e-12));
    }
}

#[test]
fn per_example_gradients_through_class_targets_follow_each_example() {
    // Cross-entropy reads its class indices by gather, whose gradient scatters by the same
    // index tensor: batched labels give each example its own gradient.
    let (w, xs) = (randn(&[3, 4], 540), randn(&[5, 4], 541));
    let labels = Tensor::from_vec(vec![0i64, 2, 1, 1, 0], &[5]);
    let loss = |w: &Tensor, x: &Tensor, y: &Tensor| {
        CrossEntropy::new().loss(&x.unsqueeze(0).linear(w, None), &y.unsqueeze(0))
    };
    let per_example = func::vmap(
        |a: &[Tensor]| func::grad(|p: &[Tensor]| loss(&p[0], &a[1], &a[2]), &[&a[0]]).remove(0),
        &[None, Some(0), Some(0)],
    )(&[&w, &xs, &labels]);
    for k in 0..5 {
        let (x, y) = (
            xs.narrow(0, k, 1).squeeze(0),
            labels.narrow(0, k, 1).squeeze(0),
        );
        let g = func::grad(|p: &[Tensor]| loss(&p[0], &x, &y), &[&w]).remove(0);
        assert!(
            per_example
                .narrow(0, k, 1)
                .squeeze(0)
                .allclose(&g, 1e-12, 1e-12),
            "example {k}"
        );
    }
}

#[test]
fn results_stay_differentiable_in_the_parameters_a_function_reads() {
    // A tangent and a batch that depend on a tracked parameter `f` reads (not a primal) are
    // differentiated by reverse mode: the training loss of a physics-informed network.
    let (x, t) = (randn(&[3], 600), randn(&[3], 601));
    let w = randn(&[3], 602).requires_grad();
    let (_, ty) = func::jvp(|p: &[Tensor]| (&p[0] * &w).sin(), &[&x], &[&t]);
    let g = grad(&ty.sum(), &[&w]).remove(0);
    // d/dw of cos(xw)·w·t is (cos(xw) − sin(xw)·x·w)·t.
    let xw = &x * &w.detach();
    let expected = &(&xw.cos() - &(&(&xw.sin() * &x) * &w.detach())) * &t;
    assert!(g.allclose(&expected, 1e-14, 1e-14));
    let xs = randn(&[4, 3], 603);
    let batched = func::vmap(|a: &[Tensor]| (&a[0] * &w).sum(), &[Some(0)])(&[&xs]);
    let g = grad(&batched.sum(), &[&w]).remove(0);
    assert!(g.allclose(&xs.sum_axes(&[0], false), 1e-14, 1e-14));
}

#[test]
fn vmap_follows_positions_that_come_from_batched_values() {
    // Per-example lookups: each example's gradient lands on its own row.
    let table = randn(&[4, 2], 620);
    let ids = Tensor::from_vec(vec![0i64, 1, 3], &[3, 1]);
    let per_example = func::vmap(
        |a: &[Tensor]| {
            let loss = |q: &[Tensor]| q[0].index_select(0, &a[1]).square().sum();
            func::grad(loss, &[&a[0]]).remove(0)
        },
        &[None, Some(0)],
    )(&[&table, &ids]);
    for (k, row) in [0usize, 1, 3].into_iter().enumerate() {
        let g = per_example.narrow(0, k, 1).squeeze(0);
        let expected = table.index_select(0, &[row]).mul_scalar(2.0);
        assert!(
            g.index_select(0, &[row]).allclose(&expected, 1e-15, 0.0),
            "example {k}"
        );
        assert_eq!(g.abs().sum().item(), expected.abs().sum().item());
    }
    // A start read from a batched integer: each example its own.
    let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let starts = Tensor::from_vec(vec![0i64, 1, 0], &[3]);
    let picked = func::vmap(
        |a: &[Tensor]| a[0].narrow(0, a[1].item() as usize, 1),
        &[Some(0), Some(0)],
    )(&[&xs, &starts]);
    assert_eq!(picked.to_vec::<f64>(), [1.0, 4.0, 5.0]);
}

#[test]
fn a_tracked_primal_is_not_the_same_tensor_read_elsewhere() {
    // As torch.func: d/dw of w·w' with w' the captured tensor is w', tracked or not.
    let one = Tensor::ones(&[1], DType::F64);
    for w in [
        Tensor::from_vec(vec![3.0f64], &[1]),
        Tensor::from_vec(vec![3.0f64], &[1]).requires_grad(),
    ] {
        let (_, t) = func::jvp(|p: &[Tensor]| &p[0] * &w, &[&w], &[&one]);
        assert_eq!(t.item(), 3.0);
    }
}

#[test]
fn attention_rows_that_see_nothing_have_zero_tangents() {
    let (q, k, v) = (
        randn(&[2, 3], 630),
        randn(&[2, 3], 631),
        randn(&[2, 3], 632),
    );
    let mask = Tensor::from_vec(
        vec![0.0f64, 0.0, f64::NEG_INFINITY, f64::NEG_INFINITY],
        &[2, 2],
    );
    let f = |p: &[Tensor]| {
        p[0].scaled_dot_product_attention(&p[1], &p[2], &Attention::new().mask(&mask))
    };
    let (y, t) = func::jvp(f, &[&q, &k, &v], &[&q, &k, &v]);
    assert_eq!(y.narrow(0, 1, 1).to_vec::<f64>(), [0.0; 3]);
    assert_eq!(t.narrow(0, 1, 1).to_vec::<f64>(), [0.0; 3]);
    assert!(t
        .narrow(0, 0, 1)
        .to_vec::<f64>()
        .iter()
        .all(|v| v.is_finite() && *v != 0.0));
}
