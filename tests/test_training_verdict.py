"""keras_dml.training: results that say when they mean nothing, and failed run folders."""

import json
import os
import types

import numpy as np
import pytest

from keras_dml import training
from keras_dml.training import evaluation as training_evaluation
from keras_dml.training import run_folder as training_run_folder
from keras_dml.training import verdict as training_verdict
from keras_dml.training.run_folder import failure_kept_or_removed as kept_or_removed
from keras_dml.evaluation.collapse import collapse_warning
from keras_dml.training.config import TrainConfig


def _split(labels):
    return types.SimpleNamespace(labels=np.asarray(labels),
                                 num_classes=len(np.unique(labels)))


def test_chance_recall_is_the_share_of_same_class_neighbours():
    assert training_verdict.chance_recall(_split(np.repeat(np.arange(30), 10))) == pytest.approx(
        9 / 299)
    gallery = _split([0, 0, 1, 1, 1, 2])
    expected = (2 / 6 + 3 / 6) / 2
    assert training_verdict.chance_recall(_split([0, 1]), gallery) == pytest.approx(expected)


def test_verdict_names_a_final_recall_at_chance_or_below_its_start():
    chance = 1 / 30
    assert "at chance" in training.run_verdict({"recall@1": 0.102}, {"recall@1": 0.034}, chance)
    fell = training.run_verdict({"recall@1": 0.30}, {"recall@1": 0.25}, chance)
    assert "fell from 30.0 to 25.0" in fell
    assert training.run_verdict({"recall@1": 0.10}, {"recall@1": 0.25}, chance) == ""


def _splits(train_classes, test_classes):
    return types.SimpleNamespace(train=_split(np.repeat(np.arange(train_classes), 4)),
                                 test=_split(np.repeat(np.arange(test_classes), 4)),
                                 query=None, gallery=None)


@pytest.mark.parametrize("options, splits, words", [
    (dict(backbone="MobileNetV3Small", weights="none"), (10, 10),
     ["weights=none", "weights=imagenet", "collapses"]),
    (dict(test_classes=1), (99, 1), ["1 class", "test_classes=2"]),
    (dict(test_classes=99, classes_per_batch=2), (1, 99),
     ["1 training class(es) (of 100)", "test_classes", "classes_per_batch=2"]),
])
def test_meaningless_runs_are_refused_before_any_work_naming_the_settings(options, splits,
                                                                          words):
    config = TrainConfig(dataset="folder", data_dir="photos", **options)
    with pytest.raises(ValueError) as error:
        training.check_meaningful(config, _splits(*splits))
    for word in words:
        assert word in str(error.value), str(error.value)


def test_few_training_classes_lower_the_default_batch_design_but_not_a_given_one():
    config = TrainConfig(dataset="folder", data_dir="photos")
    with pytest.warns(UserWarning, match="10 training classes, fewer than the default 32"):
        message = training.verdict.fit_batch_design(config, _splits(10, 10))
    assert "all 10 classes x 4 images" in message and config.classes_per_batch == 10
    training.check_meaningful(config, _splits(10, 10))  # now it fits
    given = TrainConfig(dataset="folder", data_dir="photos", classes_per_batch=32)
    assert training.verdict.fit_batch_design(given, _splits(10, 10)) is None
    with pytest.raises(ValueError, match="fewer than classes_per_batch=32"):
        training.check_meaningful(given, _splits(10, 10))
    one = TrainConfig(dataset="folder", data_dir="photos")
    assert training.verdict.fit_batch_design(one, _splits(1, 10)) is None  # nothing to pair


def test_a_sound_run_passes_the_check():
    training.check_meaningful(TrainConfig(dataset="folder", data_dir="photos"), _splits(50, 50))


def test_a_collapse_seen_by_a_run_names_the_train_flags():
    from keras_dml.evaluation.collapse import TRAIN_CAUSES

    message = collapse_warning(np.ones((10, 4)), TRAIN_CAUSES)
    assert "--weights imagenet" in message and "--learning-rate" in message
    assert "normalization='none'" not in message
    assert training_evaluation.RunEvaluation.collapse_causes is not TRAIN_CAUSES  # set per instance


def test_a_failed_run_folder_is_removed_or_marked_when_it_holds_a_backup(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    with pytest.raises(RuntimeError), kept_or_removed(str(run_dir), False):
        raise RuntimeError("bad image")
    assert not run_dir.exists()  # nothing to resume: no half-made folder
    (run_dir / "backup" / "epoch-00001").mkdir(parents=True)
    with pytest.raises(RuntimeError), kept_or_removed(str(run_dir), False):
        raise RuntimeError("bad image")
    failed = json.loads((run_dir / training_run_folder.FAILED).read_text())
    assert failed["error"] == "RuntimeError: bad image" and "--resume" in failed["resume"]
    with kept_or_removed(str(run_dir), True):  # a resume that succeeds
        pass
    assert not os.path.exists(run_dir / training_run_folder.FAILED)
