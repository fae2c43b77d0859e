"""Verification figures: ROC and precision-recall curves, same/different score histograms.

Each function writes a PNG and returns the data it drew.
"""

import numpy as np

from keras_dml.evaluation.verification import verification_metrics

__all__ = ["score_histograms", "verification_curves"]


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def verification_curves(scores, same, path="verification_curves.png", threshold=None, dpi=100):
    """ROC (TAR against FAR, log FAR axis) and precision-recall curves side by side.

    Args:
        scores, same: Pair similarities and same-class flags (`pair_scores`).
        path: PNG file to write. Defaults to "verification_curves.png".
        threshold: A calibrated threshold to mark on both curves. Defaults to None.
        dpi: Resolution. Defaults to 100.

    Returns:
        The `verification_metrics` dict (with the curves drawn).
    """
    result = verification_metrics(scores, same)
    roc, pr = result["curves"]["roc"], result["curves"]["pr"]
    figure = _figure(10, 4.2)
    left, right = figure.subplots(1, 2)
    floor = 0.5 / result["num_different"]  # FAR 0 cannot sit on a log axis
    left.plot(np.maximum(roc["far"], floor), roc["tar"], color="C0")
    left.set_xscale("log")
    left.set_xlim(floor, 1)
    left.set_ylim(0, 1.01)
    left.set_xlabel("false accept rate (FAR)")
    left.set_ylabel("true accept rate (TAR)")
    left.set_title(f"ROC  AUC {result['roc_auc']:.4f}  EER {100 * result['eer']:.2f} %")
    left.grid(True, which="both", alpha=0.3)
    right.plot(pr["recall"], pr["precision"], color="C1")
    right.set_xlim(0, 1)
    right.set_ylim(0, 1.01)
    right.set_xlabel("recall")
    right.set_ylabel("precision")
    right.set_title(f"precision-recall  best F1 {result['best_f1']:.3f}")
    right.grid(True, alpha=0.3)
    if threshold is not None:
        row = np.searchsorted(-roc["thresholds"], -threshold, side="right") - 1
        left.plot(max(roc["far"][row], floor), roc["tar"][row], "o", color="C3",
                  label=f"threshold {threshold:.4f}")
        row = np.searchsorted(pr["thresholds"], threshold)
        right.plot(pr["recall"][row], pr["precision"][row], "o", color="C3",
                   label=f"threshold {threshold:.4f}")
        left.legend(loc="lower right")
        right.legend(loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return result


def score_histograms(scores, same, path="score_histograms.png", threshold=None, bins=60,
                     dpi=100):
    """Histograms (densities) of same-class and different-class pair scores.

    Args:
        scores, same: Pair similarities and same-class flags.
        path: PNG file to write. Defaults to "score_histograms.png".
        threshold: Drawn as a vertical line. Defaults to None.
        bins: Number of bins over the score range. Defaults to 60.
        dpi: Resolution. Defaults to 100.

    Returns:
        `{"edges": bin edges, "same": density, "different": density}`.
    """
    scores = np.asarray(scores, dtype=np.float64)
    same = np.asarray(same, dtype=bool)
    if not same.any() or same.all():
        raise ValueError("score_histograms needs same-class and different-class pairs.")
    edges = np.histogram_bin_edges(scores, bins=bins)
    same_density, _ = np.histogram(scores[same], bins=edges, density=True)
    different_density, _ = np.histogram(scores[~same], bins=edges, density=True)
    figure = _figure(6.4, 4.2)
    axes = figure.subplots()
    width = np.diff(edges)
    axes.bar(edges[:-1], different_density, width, align="edge", alpha=0.55, color="C0",
             label=f"different class ({(~same).sum()} pairs)")
    axes.bar(edges[:-1], same_density, width, align="edge", alpha=0.55, color="C1",
             label=f"same class ({same.sum()} pairs)")
    if threshold is not None:
        axes.axvline(threshold, color="C3", linestyle="--", label=f"threshold {threshold:.4f}")
    axes.set_xlabel("pair similarity")
    axes.set_ylabel("density")
    axes.set_title("pair scores")
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return {"edges": edges, "same": same_density, "different": different_density}
