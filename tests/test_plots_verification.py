"""Tests for keras_dml.plots.verification: the PNGs are written and draw the right data."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from keras_dml import plots  # noqa: E402
from keras_dml.evaluation import verification_metrics  # noqa: E402


def _pairs():
    rng = np.random.default_rng(0)
    same = rng.random(2000) < 0.25
    return rng.normal(np.where(same, 0.6, 0.0), 0.2), same


def test_verification_curves_and_histograms(tmp_path):
    scores, same = _pairs()
    drawn = plots.verification_curves(scores, same, tmp_path / "c.png", threshold=0.5)
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn["roc_auc"] == verification_metrics(scores, same)["roc_auc"]
    hist = plots.score_histograms(scores, same, tmp_path / "h.png", threshold=0.5, bins=20)
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width = np.diff(hist["edges"])
    assert (hist["same"] * width).sum() == pytest.approx(1.0)
    assert (hist["different"] * width).sum() == pytest.approx(1.0)
    counts, _ = np.histogram(scores[same], bins=hist["edges"])
    np.testing.assert_allclose(hist["same"] * width * same.sum(), counts)
    with pytest.raises(ValueError, match="same-class and different-class"):
        plots.score_histograms(scores, np.ones_like(same), tmp_path / "x.png")
