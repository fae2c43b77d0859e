"""Tests for keras_dml.evaluation.verification.

Equal to scikit-learn; calibration meets its target.
"""

import warnings

import numpy as np
import pytest
from sklearn import metrics as sk

from keras_dml.evaluation import calibrate, calibrate_scores, pair_scores, verification_metrics


def _scores(seed=0, n=3000, ties=False):
    rng = np.random.default_rng(seed)
    same = rng.random(n) < 0.2
    scores = rng.normal(loc=np.where(same, 1.0, -0.5), scale=0.8)
    if ties:
        scores = np.round(scores, 1)  # many equal scores across both classes
    return scores, same


@pytest.mark.parametrize("ties", [False, True])
def test_curves_and_auc_equal_scikit_learn(ties):
    scores, same = _scores(ties=ties)
    result = verification_metrics(scores, same)
    far, tar, thresholds = sk.roc_curve(same, scores, drop_intermediate=False)
    roc = result["curves"]["roc"]
    np.testing.assert_allclose(roc["far"], far, rtol=0, atol=1e-12)
    np.testing.assert_allclose(roc["tar"], tar, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(roc["thresholds"], thresholds)
    precision, recall, pr_thresholds = sk.precision_recall_curve(same, scores)
    pr = result["curves"]["pr"]
    np.testing.assert_allclose(pr["precision"], precision, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pr["recall"], recall, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pr["thresholds"], pr_thresholds)
    assert result["roc_auc"] == pytest.approx(sk.roc_auc_score(same, scores), abs=1e-12)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-300)
    assert result["best_f1"] == pytest.approx(f1[:-1].max(), abs=1e-12)
    assert result["best_f1_threshold"] == pr_thresholds[np.argmax(f1[:-1])]
    assert result["num_same"] == same.sum() and result["num_different"] == (~same).sum()


def test_eer_and_tar_at_far_from_their_definitions():
    scores, same = _scores(1, n=6000)
    result = verification_metrics(scores, same)
    positives, negatives = scores[same], scores[~same]
    for far_target, key in ((1e-2, "tar@far=1e-2"), (1e-3, "tar@far=1e-3"),
                            (1e-4, "tar@far=1e-4")):
        # Brute force over every threshold: accept scores >= t.
        best = max(((positives >= t).mean() for t in np.r_[np.unique(scores), np.inf]
                    if (negatives >= t).mean() <= far_target))
        assert result[key] == pytest.approx(best, abs=1e-12)
    far = np.array([(negatives >= t).mean() for t in np.sort(scores)])
    frr = np.array([(positives < t).mean() for t in np.sort(scores)])
    crossing = np.argmin(np.abs(far - frr))
    assert abs(result["eer"] - far[crossing]) < 2e-3  # interpolated between neighbours
    separable = verification_metrics([0.9, 0.8, 0.1, 0.2], [True, True, False, False])
    assert separable["roc_auc"] == 1.0 and separable["eer"] == 0.0
    assert separable["tar@far=1e-4"] == 1.0 and separable["best_f1_threshold"] == 0.8


@pytest.mark.parametrize("target, value", [("precision", 0.99), ("precision", 0.9),
                                           ("far", 1e-3), ("far", 0.05)])
def test_calibration_meets_its_target_at_the_lowest_threshold(target, value):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 15, 400)
    centres = rng.normal(size=(15, 16))
    embeddings = centres[labels] + rng.normal(scale=0.9, size=(400, 16))
    result = calibrate(embeddings, labels, target=target, value=value)
    scores, same = pair_scores(embeddings, labels)
    assert len(scores) == 400 * 399 // 2

    def measure(t):
        accepted = scores >= t
        precision = same[accepted].mean()
        far = accepted[~same].mean()
        return precision, far

    precision, far = measure(result.threshold)
    assert (precision >= value) if target == "precision" else (far <= value)
    # Every lower distinct score misses the target.
    lower = np.unique(scores[scores < result.threshold])
    misses = [measure(t) for t in lower[-50:]]
    if target == "precision":
        assert all(p < value for p, _ in misses)
    else:
        assert all(f > value for _, f in misses)
    row = np.searchsorted(result.table["threshold"], result.threshold)
    assert result.table["threshold"][row] == result.threshold
    assert result.table["precision"][row] == pytest.approx(precision)
    assert result.table["far"][row] == pytest.approx(far)
    assert result.achieved["recall"] == pytest.approx(same[scores >= result.threshold].sum()
                                                      / same.sum())
    assert np.all(np.diff(result.table["threshold"]) > 0)


def test_sampled_pairs_keep_the_class_ratio_and_calibration_holds():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 10, 3000)
    embeddings = rng.normal(size=(10, 8))[labels] + rng.normal(scale=1.0, size=(3000, 8))
    scores, same = pair_scores(embeddings, labels, max_pairs=200_000)
    assert len(scores) == 200_000
    _, counts = np.unique(labels, return_counts=True)
    all_pairs_ratio = (counts * (counts - 1)).sum() / (3000 * 2999)
    assert same.mean() == pytest.approx(all_pairs_ratio, abs=0.005)
    result = calibrate_scores(scores, same, "precision", 0.95)
    assert same[scores >= result.threshold].mean() >= 0.95


def test_write_csv(tmp_path):
    scores, same = _scores()
    result = calibrate_scores(scores, same, "far", 0.01, table_rows=11)
    path = result.write_csv(tmp_path / "t.csv")
    lines = open(path).read().splitlines()
    assert lines[0] == "threshold,precision,recall,f1,far,tar"
    assert len(lines) == 1 + len(result.table["threshold"]) and len(lines) <= 13


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="same-class and different-class pairs"):
        verification_metrics([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match="same length"):
        verification_metrics([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="NaN or Inf"):
        verification_metrics([np.nan, 0.2], [True, False])
    with pytest.raises(ValueError, match="target must be one of"):
        calibrate_scores([0.1, 0.2], [True, False], target="recall")
    with pytest.raises(ValueError, match="value must be in"):
        calibrate_scores([0.1, 0.2], [True, False], value=0)
    with pytest.raises(ValueError, match="No threshold reaches precision >= 0.99.*best.*0.5"):
        calibrate_scores([0.9, 0.9, 0.1], [True, False, False], "precision", 0.99)
    with pytest.raises(ValueError, match="at least 2 embeddings"):
        pair_scores(np.ones((1, 3)), [0])


def test_calibration_reports_its_support_and_warns_when_it_is_a_handful_of_pairs():
    """The reported case: precision 0.99 reached by the one top-scoring same-class pair.
    Scores carry no signal here, so more data cannot help: the warning says what the
    model reaches where enough pairs support it (issue 52), not "a larger set"."""
    rng = np.random.default_rng(5)
    scores = rng.normal(size=20_000)
    same = rng.random(20_000) < 0.05
    same[np.argmax(scores)] = True
    with pytest.warns(UserWarning, match=r"precision >= 0.99 is reached only at the top few "
                                         r"pairs.*at least 300 pairs.*best precision this "
                                         r"model reaches on this set is 0\.0"):
        result = calibrate_scores(scores, same, "precision", 0.99)
    assert (result.support_same, result.support) == (1, 1)
    summary = result.to_dict()
    assert summary["support_same"] == 1 and "times larger" not in summary["warning"]


def test_a_small_set_of_a_good_model_is_told_how_much_more_data_it_takes():
    rng = np.random.default_rng(5)
    same = rng.random(400) < 0.05
    scores = rng.normal(size=400) + 4 * same  # separable, but too few pairs to show 0.99
    with pytest.warns(UserWarning, match=r"too little labelled data.*times larger"):
        calibrate_scores(scores, same, "precision", 0.99)


def test_a_well_supported_calibration_has_no_warning():
    scores, same = _scores(n=20_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = calibrate_scores(scores, same, "precision", 0.9)
    accepted = scores >= result.threshold
    assert result.support == accepted.sum() and result.support_same == same[accepted].sum()
    assert result.support_same >= 30 and result.warning is None


def test_a_far_target_needs_three_over_far_different_class_pairs():
    scores, same = _scores(n=3000)  # about 2,400 different-class pairs
    with pytest.warns(UserWarning, match=r"different-class pairs to show FAR <= 0.0001 "
                                         r"\(3 / 0.0001\), 30,000 needed"):
        calibrate_scores(scores, same, "far", 1e-4)


def test_a_target_met_only_by_a_few_top_pairs_gives_the_models_best_supported_precision():
    rng = np.random.default_rng(0)
    same = rng.random(20000) < 0.1  # a weak model: same-class pairs score a little higher
    scores = rng.normal(0, 1, 20000) + 0.5 * same
    scores[:3], same[:3] = 10.0, True  # three perfect pairs at the top
    with pytest.warns(UserWarning, match="best precision this model reaches") as record:
        calibration = calibrate_scores(scores, same, "precision", 0.99)
    message = str(record[0].message)
    assert "more data" in message.lower() and "times larger" not in message
    best = float(message.split("reaches on this set is ")[1].split()[0])
    assert 0.1 < best < 0.99 and calibration.warning == message


@pytest.mark.parametrize("far_targets, named", [
    ((101,), "101"), ((1e-3, 0.0), "0.0"), ((-1e-3,), "-0.001"), ((1.5,), "1.5"),
    (("1e-3",), "'1e-3'"), ((True,), "True")])
def test_far_targets_outside_zero_to_one_are_refused_naming_the_value(far_targets, named):
    scores, same = np.array([0.9, 0.2, 0.8, 0.1]), np.array([True, False, True, False])
    with pytest.raises(ValueError, match=f"far_targets must be FARs in \\(0, 1\\], got {named}"):
        verification_metrics(scores, same, far_targets)
    with pytest.raises(ValueError, match="at least one FAR"):
        verification_metrics(scores, same, ())
    assert "tar@far=1e0" in verification_metrics(scores, same, (1,))
