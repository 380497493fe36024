//! Evaluation: classification accuracy (total, hits and their ratio), confusion
//! matrices, and regression errors.

use std::fmt;

use crate::data::ClassLabel;
use crate::error::{Error, Result};
use crate::ops::same_shape;
use crate::tensor::Tensor;

/// Accuracy of a classifier over some samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accuracy {
    /// Number of samples.
    pub total_num: usize,
    /// Number of samples whose predicted class is their label.
    pub hit_num: usize,
    /// `hit_num / total_num`, from 0 to 1 (0 when there are no samples).
    pub accuracy: f64,
}

impl fmt::Display for Accuracy {
    /// `{total_num: 10000, hit_num: 9658, accuracy: 0.9658}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{total_num: {}, hit_num: {}, accuracy: {:.4}}}",
            self.total_num, self.hit_num, self.accuracy
        )
    }
}

/// Predicted class per row of `scores` `[N, C]` (first maximum at ties).
pub fn predicted_classes(scores: &Tensor) -> Vec<usize> {
    scores
        .argmax(1)
        .to_vec::<f64>()
        .into_iter()
        .map(|v| v as usize)
        .collect()
}

/// Accuracy of `scores` `[N, C]` against class labels.
pub fn accuracy<L: ClassLabel>(scores: &Tensor, labels: &[L]) -> Accuracy {
    let pred = predicted_classes(scores);
    assert_eq!(
        pred.len(),
        labels.len(),
        "accuracy: {} predictions for {} labels",
        pred.len(),
        labels.len()
    );
    let hit_num = pred
        .iter()
        .zip(labels)
        .filter(|(p, &l)| {
            let class = l.class();
            assert!(class.is_some(), "accuracy: label {l} is not a class");
            class == Some(**p)
        })
        .count();
    let total_num = labels.len();
    Accuracy {
        total_num,
        hit_num,
        accuracy: if total_num == 0 {
            0.0
        } else {
            hit_num as f64 / total_num as f64
        },
    }
}

/// `m[true][predicted]` counts over `classes` classes. Labels come from data, so one outside
/// `0..classes` (or a score row with more classes) is an error naming it, not a panic.
pub fn confusion_matrix<L: ClassLabel>(
    scores: &Tensor,
    labels: &[L],
    classes: usize,
) -> Result<Vec<Vec<usize>>> {
    let pred = predicted_classes(scores);
    if pred.len() != labels.len() {
        return Err(Error::Shape(format!(
            "confusion_matrix: {} predictions for {} labels",
            pred.len(),
            labels.len()
        )));
    }
    let mut m = vec![vec![0; classes]; classes];
    for (i, (&p, &l)) in pred.iter().zip(labels).enumerate() {
        let Some(l) = l.class().filter(|&l| l < classes && p < classes) else {
            return Err(Error::Shape(format!(
                "confusion_matrix: sample {i} has label {l} and prediction {p}, \
                 outside the {classes} classes"
            )));
        };
        m[l][p] += 1;
    }
    Ok(m)
}

/// Mean squared error.
pub fn mse(pred: &Tensor, target: &Tensor) -> f64 {
    same_shape("mse", pred, target);
    (pred - target).square().mean().item()
}

/// Mean absolute error.
pub fn mae(pred: &Tensor, target: &Tensor) -> f64 {
    same_shape("mae", pred, target);
    (pred - target).abs().mean().item()
}

/// Coefficient of determination: 1 − SS_res / SS_tot.
pub fn r2(pred: &Tensor, target: &Tensor) -> f64 {
    same_shape("r2", pred, target);
    let ss_res = (pred - target).square().sum().item();
    let ss_tot = (target - &target.mean()).square().sum().item();
    1.0 - ss_res / ss_tot
}
