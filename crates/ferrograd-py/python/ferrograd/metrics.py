"""Evaluation: tinynn's ``AccEvaluator``."""

import numpy as _np


class AccEvaluator:
    """``evaluate(predicted_labels, true_labels)`` returns
    ``{'total_num': ..., 'hit_num': ..., 'accuracy': ...}``, as tinynn prints it."""

    @staticmethod
    def evaluate(preds, targets):
        preds = _np.asarray(preds).reshape(-1)
        targets = _np.asarray(targets).reshape(-1)
        if preds.shape != targets.shape:
            raise ValueError(f"{preds.shape[0]} predictions but {targets.shape[0]} targets")
        total = int(preds.shape[0])
        hits = int(_np.sum(preds == targets))
        return {"total_num": total, "hit_num": hits, "accuracy": hits / total if total else 0.0}


def accuracy(scores, labels):
    """The fraction of rows of ``scores`` whose largest entry is at the label."""
    return AccEvaluator.evaluate(_np.argmax(_np.asarray(scores), axis=1), labels)["accuracy"]
