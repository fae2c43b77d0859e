"""weight_curves: the PNG is written and the curves are the weights pair_weights returns."""

import numpy as np
import pytest

import keras_dml
from keras_dml.losses import (
    BinLifted,
    BinomialDeviance,
    Contrastive,
    GeneralizedLiftedStructure,
    MultiSimilarity,
    Triplet,
)
from keras_dml.plots.weights import probing_batch
from keras_dml.weighting import pair_weights

import reference as ref

SWEEP = np.linspace(-0.95, 0.95, 9)


def _is_png(path):
    with open(path, "rb") as handle:
        return handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_probing_batch_sets_the_anchor_similarities():
    labels, x = probing_batch(0.3, "negative", context_positive=0.8, context_negative=-0.2)
    s = ref.cosine(x)
    np.testing.assert_allclose(s[0, 1:], [0.8, -0.2, 0.3], atol=1e-6)
    assert labels.tolist() == [0, 0, 1, 2]
    assert probing_batch(0.3, "positive")[0].tolist() == [0, 0, 1, 0]


def test_single_loss_writes_png_and_returns_pair_weights(tmp_path):
    path = tmp_path / "binomial.png"
    loss = BinomialDeviance()
    curves = keras_dml.plots.weight_curves(loss, path=str(path), similarities=SWEEP)
    assert path.exists() and _is_png(path) and path.stat().st_size > 5000
    np.testing.assert_array_equal(curves["similarity"], SWEEP)
    for probe in ("positive", "negative"):
        expected = [pair_weights(loss, *probing_batch(s, probe))[0, 3] for s in SWEEP]
        np.testing.assert_array_equal(curves[probe], np.asarray(expected, np.float32))
    # eq. 13-14 with one context pair of each kind: |P_0| = 2, |N_0| = 1, 4 anchors
    positive = 1 / (1 + np.exp(-2.0 * (0.5 - SWEEP))) / 2 / 4
    negative = 1 / (1 + np.exp(-50.0 * (SWEEP - 0.5))) / 2 / 4
    np.testing.assert_allclose(curves["positive"], positive, rtol=1e-4)
    np.testing.assert_allclose(curves["negative"], negative, rtol=1e-4, atol=1e-8)


def test_figure_1_panels_have_the_papers_shapes(tmp_path):
    path = tmp_path / "figure1.png"
    sweep = np.linspace(-0.85, 0.95, 10)  # avoids the kinks at 0.5 and 0.6
    panels = {"contrastive": Contrastive(), "triplet": Triplet(),
              "lifted": GeneralizedLiftedStructure(), "binomial": BinomialDeviance(),
              "MS / RAW": MultiSimilarity(), "BinLifted": BinLifted()}
    curves = keras_dml.plots.weight_curves(panels, path=str(path), similarities=sweep,
                                           columns=3)
    assert _is_png(path) and set(curves) == set(panels)
    for name in ("triplet", "MS / RAW"):
        loss = panels[name]
        expected = [pair_weights(loss, *probing_batch(s, "negative"))[0, 3] for s in sweep]
        np.testing.assert_array_equal(curves[name]["negative"], np.float32(expected))
    above = sweep > 0.5
    # (a) contrastive: every positive weighs 1, negatives 1 above the threshold, else 0
    np.testing.assert_allclose(curves["contrastive"]["positive"], 0.25)
    np.testing.assert_allclose(curves["contrastive"]["negative"], np.where(above, 0.25, 0.0))
    # (b) triplet: 0/1 weights, a step at the context pair +- the margin
    for probe in ("positive", "negative"):
        assert len(np.unique(curves["triplet"][probe])) == 2
    assert np.all(np.diff(curves["triplet"]["positive"]) <= 0)
    # (c, d, MS, BinLifted): smooth, positives decreasing and negatives increasing
    for name in ("lifted", "binomial", "BinLifted"):
        assert np.all(np.diff(curves[name]["positive"]) < 0), name
        assert np.all(np.diff(curves[name]["negative"]) > 0), name
    # MS with VTHM: negatives below hardest positive - epsilon get exactly 0
    ms = curves["MS / RAW"]["negative"]
    assert np.all(ms[sweep < 0.6] == 0.0) and np.all(ms[sweep > 0.6] > 0.0)


def test_bad_arguments_raise_value_error(tmp_path):
    path = str(tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        keras_dml.plots.weight_curves(Contrastive(), path=path, similarities=[0.0, 1.5])
    with pytest.raises(ValueError, match="1-D"):
        keras_dml.plots.weight_curves(Contrastive(), path=path, similarities=[[0.0, 0.5]])
    with pytest.raises(ValueError, match="context_negative"):
        keras_dml.plots.weight_curves(Contrastive(), path=path, context_negative=2.0)
    with pytest.raises(ValueError, match="pair loss"):
        keras_dml.plots.weight_curves({"mse": "mse"}, path=path)
    with pytest.raises(ValueError, match="at least one"):
        keras_dml.plots.weight_curves({}, path=path)
