"""Verification ("same or not?") metrics and threshold calibration on pair scores.

A pair (i, j) is accepted at threshold t when its similarity is at or above t.
Over all pairs, at each t: TAR = recall = accepted same-class pairs / all
same-class pairs; FAR = accepted different-class pairs / all different-class
pairs; precision = accepted same-class pairs / accepted pairs. The curves run
over every distinct score, as scikit-learn's `roc_curve(...,
drop_intermediate=False)` and `precision_recall_curve` do.
"""

import dataclasses
import math
import warnings

import numpy as np

from keras_dml import hyperparameters, ops, validation

__all__ = ["Calibration", "FAR_TARGETS", "calibrate", "calibrate_scores", "pair_scores",
           "support_warning", "verification_metrics"]

FAR_TARGETS = (1e-2, 1e-3, 1e-4)
TARGETS = ("precision", "far")
_PAIR_BUDGET = 2**23  # pair scores computed per block
#: Same-class pairs at or above a calibrated threshold below which its precision or
#: recall is an anecdote (the binomial standard error sqrt(p (1 - p) / n) of a rate
#: estimated from n = 30 pairs is up to 0.09).
MIN_SUPPORT_SAME = 30


def pair_scores(embeddings, labels, metric="cosine", max_pairs=5_000_000, seed=0):
    """Similarity and same-class flag of every pair i < j, or of sampled pairs.

    Args:
        embeddings: float `(N, d)`.
        labels: `(N,)` class labels.
        metric: `"cosine"` (default), `"dot"` or `"euclidean"` (the score is
            minus the squared distance, so higher is closer throughout).
        max_pairs: When N (N - 1) / 2 exceeds it, that many pairs i != j are
            drawn uniformly at random (with replacement) instead: the
            same/different ratio, and so precision, stay those of all pairs.
            Defaults to 5,000,000.
        seed: Seed of the sampling. Defaults to 0.

    Returns:
        `(scores, same)`: float32 `(P,)` and bool `(P,)`.
    """
    metric = validation.check_search_metric(metric)
    embeddings = validation.embedding_array(embeddings)
    labels = validation.label_array(labels, len(embeddings))
    n = len(embeddings)
    if n < 2:
        raise ValueError(f"Verification needs at least 2 embeddings, got {n}.")
    max_pairs = hyperparameters.integer_at_least("max_pairs", max_pairs, 1)
    if metric == "cosine":
        embeddings = ops.unit_rows(embeddings)
    if n * (n - 1) // 2 <= max_pairs:
        first, second = np.triu_indices(n, k=1)
    else:
        rng = np.random.default_rng(seed)
        first = rng.integers(0, n, max_pairs)
        second = (first + rng.integers(1, n, max_pairs)) % n  # never the same sample
    scores = np.empty(len(first), np.float32)
    for start in range(0, len(first), _PAIR_BUDGET // embeddings.shape[1] + 1):
        stop = start + _PAIR_BUDGET // embeddings.shape[1] + 1
        a, b = embeddings[first[start:stop]], embeddings[second[start:stop]]
        if metric == "euclidean":
            scores[start:stop] = -np.einsum("ij,ij->i", a - b, a - b)
        else:
            scores[start:stop] = np.einsum("ij,ij->i", a, b)
    return scores, labels[first] == labels[second]


def _check_scores(scores, same):
    scores = np.asarray(scores, dtype=np.float64).ravel()
    same = np.asarray(same).ravel()
    if scores.shape != same.shape:
        raise ValueError(f"scores and same must have the same length, got {scores.shape} "
                         f"and {same.shape}.")
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or Inf.")
    if same.dtype != bool:
        if not np.isin(same, (0, 1)).all():
            raise ValueError("same must be booleans (or 0/1): True for same-class pairs.")
        same = same.astype(bool)
    positives = int(same.sum())
    if positives == 0 or positives == len(same):
        raise ValueError(f"Verification needs same-class and different-class pairs, got "
                         f"{positives} same-class pairs out of {len(same)}.")
    return scores, same


def _counts(scores, same):
    """Per distinct score, descending: threshold, accepted same-class and
    different-class pairs (pairs scoring at or above it)."""
    order = np.argsort(-scores, kind="mergesort")
    scores, same = scores[order], same[order]
    last = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    true_accepts = np.cumsum(same)[last]
    false_accepts = last + 1 - true_accepts
    return scores[last], true_accepts, false_accepts


def verification_metrics(scores, same, far_targets=FAR_TARGETS):
    """ROC AUC, EER, TAR at given FARs, the best-F1 threshold, and the curves.

    Args:
        scores: float `(P,)` pair similarities (higher: more alike), e.g. from
            `pair_scores`.
        same: bool `(P,)`, True for same-class pairs.
        far_targets: FARs to report TAR at, each in (0, 1]. Defaults to
            (1e-2, 1e-3, 1e-4).

    Returns:
        A dict: `roc_auc`; `eer` (where FAR = 1 - TAR, linearly interpolated
        on the ROC curve); `tar@far=1e-2`, ... (the highest TAR at a threshold
        whose FAR is at most the target); `best_f1` and `best_f1_threshold`;
        `num_same`, `num_different`; and `curves`: `roc` (`far`, `tar`,
        `thresholds`, as `sklearn.metrics.roc_curve(same, scores,
        drop_intermediate=False)`) and `pr` (`precision`, `recall`,
        `thresholds`, as `sklearn.metrics.precision_recall_curve`).
    """
    far_targets = check_far_targets(far_targets)
    scores, same = _check_scores(scores, same)
    thresholds, tp, fp = _counts(scores, same)
    positives, negatives = tp[-1], fp[-1]
    tar = np.r_[0.0, tp / positives]
    far = np.r_[0.0, fp / negatives]
    roc_thresholds = np.r_[np.inf, thresholds]
    precision = tp / (tp + fp)
    recall = tp / positives
    f1 = np.where(precision + recall > 0,
                  2 * precision * recall / np.maximum(precision + recall, 1e-300), 0.0)
    best = int(np.argmax(f1))
    result = {
        "roc_auc": float(np.trapezoid(tar, far)),
        "eer": _equal_error_rate(far, tar),
        **{f"tar@far={_far_name(t)}": _tar_at_far(far, tar, t) for t in far_targets},
        "best_f1": float(f1[best]),
        "best_f1_threshold": float(thresholds[best]),
        "num_same": int(positives),
        "num_different": int(negatives),
        "curves": {
            "roc": {"far": far, "tar": tar, "thresholds": roc_thresholds},
            "pr": {"precision": np.r_[precision[::-1], 1.0], "recall": np.r_[recall[::-1], 0.0],
                   "thresholds": thresholds[::-1]},
        },
    }
    return result


def check_far_targets(far_targets):
    """`far_targets` as a tuple of floats in (0, 1]; a ValueError names a bad one."""
    targets = (far_targets,) if np.isscalar(far_targets) else tuple(far_targets)
    if not targets:
        raise ValueError("far_targets must name at least one FAR in (0, 1], got an empty "
                         f"{type(far_targets).__name__}.")
    for target in targets:
        if isinstance(target, bool) or not isinstance(target, (int, float, np.number)) \
                or not 0.0 < float(target) <= 1.0:
            raise ValueError(f"far_targets must be FARs in (0, 1], got {target!r} in "
                             f"{far_targets!r}.")
    return tuple(float(t) for t in targets)


def _far_name(value):
    """1e-3 -> "1e-3" (the key spelling of the issue and the logs)."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _tar_at_far(far, tar, target):
    allowed = far <= target
    return float(tar[allowed].max())


def _equal_error_rate(far, tar):
    frr = 1.0 - tar
    gap = frr - far  # decreasing along the curve, from 1 to -1
    i = int(np.flatnonzero(gap <= 0)[0])
    if gap[i] == 0 or i == 0:
        return float(far[i])
    w = gap[i - 1] / (gap[i - 1] - gap[i])
    return float(far[i - 1] + w * (far[i] - far[i - 1]))


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A calibrated threshold and the threshold table it was chosen from.

    Attributes:
        threshold: The lowest score threshold at which the pairs scoring at or
            above it reach the target.
        target, value: What was asked (`"precision"` >= value, or `"far"` <= value).
        achieved: precision, recall, f1, far and tar at `threshold`.
        table: Columns `threshold`, `precision`, `recall`, `f1`, `far`, `tar`
            (NumPy arrays, thresholds ascending) at score quantiles and at
            `threshold`.
        num_same, num_different: Pairs of the calibration set.
        support_same, support: Same-class pairs, and all pairs, scoring at or
            above `threshold`: what the achieved precision is measured on.
        warning: Why the set is too small to estimate the target (see
            `support_warning`), or None.
    """

    threshold: float
    target: str
    value: float
    achieved: dict
    table: dict
    num_same: int
    num_different: int
    support_same: int = 0
    support: int = 0
    warning: str = None

    def write_csv(self, path):
        """Writes `table` as CSV; returns the path."""
        columns = list(self.table)
        with open(path, "w") as f:
            f.write(",".join(columns) + "\n")
            for row in zip(*(self.table[c] for c in columns)):
                f.write(",".join(f"{v:.6g}" for v in row) + "\n")
        return path

    def to_dict(self):
        """JSON-friendly summary (without the table)."""
        return {"threshold": self.threshold, "target": self.target, "value": self.value,
                "achieved": self.achieved, "num_same": self.num_same,
                "num_different": self.num_different, "support_same": self.support_same,
                "support": self.support, "warning": self.warning}


def support_warning(target, value, support_same, support, num_different):
    """Why a calibration set is too small to estimate its target, or None.

    Three counts must be large enough (the "rule of three": when no error is seen in
    n trials, the 95 % upper confidence bound of the error rate is about 3 / n):
    - `MIN_SUPPORT_SAME` (30) same-class pairs at or above the threshold, else the
      precision and recall there rest on a handful of pairs;
    - precision >= p: at least 3 / (1 - p) accepted pairs (300 for 0.99), else even
      no false accept does not show an error rate below 1 - p;
    - FAR <= f: at least 3 / f different-class pairs (30,000 for 1e-4).
    Pairs grow with the square of the images per class, so a shortfall of a factor
    r in pairs takes about sqrt(r) times the labelled images.

    Args:
        target, value: As in `calibrate`.
        support_same, support: Same-class and all pairs at or above the threshold.
        num_different: Different-class pairs of the set.

    Returns:
        A message naming the shortfall and the data it would take, or None.
    """
    needs = [(support_same, MIN_SUPPORT_SAME, "same-class pairs at or above the threshold")]
    if target == "precision" and value < 1.0:
        needs.append((support, math.ceil(3 / (1 - value) - 1e-9),
                      f"pairs at or above it to show precision >= {value} (3 / (1 - {value}))"))
    if target == "far":
        needs.append((num_different, math.ceil(3 / value - 1e-9),
                      f"different-class pairs to show FAR <= {value} (3 / {value})"))
    short = [(have, need, what) for have, need, what in needs if have < need]
    if not short:
        return None
    factor = max(need / max(have, 1) for have, need, _ in short)
    shown = "; ".join(f"{have:,} {what}, {need:,} needed" for have, need, what in short)
    return (f"calibrate: too little labelled data to estimate {target} "
            f"{'>=' if target == 'precision' else '<='} {value}: {shown}. The threshold and "
            "its achieved values are unreliable (with no error seen in n pairs, the 95 % "
            "upper bound of the error rate is 3 / n); use a calibration set about "
            f"{math.sqrt(factor):.1f} times larger (pairs grow with the square of the "
            "images per class), or a less extreme target.")


def calibrate(embeddings, labels, target="precision", value=0.99, metric="cosine",
              max_pairs=5_000_000, seed=0, table_rows=101):
    """The threshold at which pair decisions reach a target precision or FAR.

    Pairs of the calibration set (all, or `max_pairs` sampled: see
    `pair_scores`) are scored; the threshold is the lowest distinct pair score
    t such that the pairs scoring at or above t have precision >= `value`
    (`target="precision"`) or FAR <= `value` (`target="far"`). A decision
    "same" for score >= t (e.g. `Index.match`, a retriever's `match`) then
    meets the target on this set.

    Args:
        embeddings: float `(N, d)` of a calibration set (not the training set).
        labels: `(N,)`.
        target: `"precision"` (default) or `"far"`.
        value: The target, in (0, 1]. Defaults to 0.99.
        metric, max_pairs, seed: See `pair_scores`.
        table_rows: Rows of the threshold table (score quantiles). Defaults to 101.

    Returns:
        A `Calibration`, with its support (pairs at or above the threshold). When
        the set is too small to estimate the target (`support_warning`: fewer
        than 30 same-class pairs at or above the threshold, or too few pairs to
        show the target at all) its `warning` says so and how much more data it
        takes, and a `UserWarning` is issued.

    Raises:
        ValueError: Bad arguments, or no threshold reaches the target (the
            message gives the best that can be reached).
    """
    scores, same = pair_scores(embeddings, labels, metric, max_pairs, seed)
    return calibrate_scores(scores, same, target, value, table_rows)


def calibrate_scores(scores, same, target="precision", value=0.99, table_rows=101):
    """`calibrate` on given pair scores and same-class flags (same warning)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}.")
    value = float(value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"value must be in (0, 1], got {value!r}.")
    scores, same = _check_scores(scores, same)
    thresholds, tp, fp = _counts(scores, same)
    precision = tp / (tp + fp)
    far = fp / fp[-1]
    reached = precision >= value if target == "precision" else far <= value
    if not reached.any():
        best = precision.max() if target == "precision" else far.min()
        raise ValueError(
            f"No threshold reaches {target} {'>=' if target == 'precision' else '<='} {value}: "
            f"the best on this calibration set is {best:.6g}."
        )
    chosen = int(np.flatnonzero(reached)[-1])  # thresholds descend: the last is the lowest
    threshold = float(thresholds[chosen])
    grid = np.unique(np.r_[np.quantile(scores, np.linspace(0, 1, table_rows)), threshold])
    table = _table(grid, thresholds, tp, fp)
    achieved = {name: float(column[np.searchsorted(grid, threshold)])
                for name, column in table.items() if name != "threshold"}
    support_same, support = int(tp[chosen]), int(tp[chosen] + fp[chosen])
    warning = support_warning(target, value, support_same, support, int(fp[-1]))
    if warning and target == "precision":
        warning = _model_limit(thresholds, tp, fp, value) or warning
    if warning:
        warnings.warn(warning, stacklevel=2)
    return Calibration(threshold, target, value, achieved, table, int(tp[-1]), int(fp[-1]),
                       support_same, support, warning)


def _model_limit(thresholds, tp, fp, value):
    """When more data cannot help a precision target: a message giving the best
    precision the model reaches where enough pairs support it (`support_warning`'s
    counts), below `value`; None when no threshold has that support (more data
    can tell) or the supported best reaches `value`."""
    need = max(MIN_SUPPORT_SAME, math.ceil(3 / (1 - value) - 1e-9) if value < 1.0 else 0)
    supported = (tp >= MIN_SUPPORT_SAME) & (tp + fp >= need)
    if not supported.any():
        return None
    precision = np.where(supported, tp / (tp + fp), -1.0)
    best = int(np.argmax(precision))
    if precision[best] >= value:
        return None
    return (f"calibrate: precision >= {value} is reached only at the top few pairs, too "
            f"few to trust; where at least {need:,} pairs support it, the best precision "
            f"this model reaches on this set is {precision[best]:.4g} (threshold "
            f"{thresholds[best]:.4g}, {int(tp[best] + fp[best]):,} pairs). More data "
            "would measure that better, not raise it: lower the target, or train a model "
            "that separates the classes better.")


def _table(grid, thresholds, tp, fp):
    """Precision, recall, F1, FAR, TAR at each grid threshold (pairs >= it accepted)."""
    # Distinct thresholds descend; the accepted counts at t are those of the
    # lowest distinct threshold >= t.
    position = np.searchsorted(-thresholds, -grid, side="right") - 1
    accepted_tp = np.where(position >= 0, tp[np.maximum(position, 0)], 0)
    accepted_fp = np.where(position >= 0, fp[np.maximum(position, 0)], 0)
    accepted = accepted_tp + accepted_fp
    precision = np.where(accepted > 0, accepted_tp / np.maximum(accepted, 1), 1.0)
    recall = accepted_tp / tp[-1]
    f1 = np.where(precision + recall > 0,
                  2 * precision * recall / np.maximum(precision + recall, 1e-300), 0.0)
    return {"threshold": grid, "precision": precision, "recall": recall, "f1": f1,
            "far": accepted_fp / fp[-1], "tar": recall}
