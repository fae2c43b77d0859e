"""docs/guide/write_a_loss.md runs as written: its loss module, its check and its
training, in that order (the page's three ```python blocks)."""

import importlib
import re
import sys

import numpy as np
import pytest

from test_quickstart import ROOT

PAGE = "docs/guide/write_a_loss.md"


def _blocks():
    with open(f"{ROOT}/{PAGE}", encoding="utf-8") as handle:
        blocks = re.findall(r"^```python\n(.*?)^```", handle.read(), re.M | re.S)
    assert len(blocks) == 3, f"{PAGE}: the loss, its check and its training"
    return blocks


@pytest.fixture
def guide_module(tmp_path, monkeypatch):
    """The page's loss as the module `my_ranked_list` (a fresh process can import it)."""
    (tmp_path / "my_ranked_list.py").write_text(_blocks()[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_ranked_list", None)
    yield importlib.import_module("my_ranked_list")
    sys.modules.pop("my_ranked_list", None)


def test_the_guide_loss_passes_the_quick_checks_and_matches_its_numpy_loop(guide_module):
    from keras_dml import weighting
    from keras_dml.testing import check_loss

    cls = guide_module.MyRankedList
    assert check_loss(cls, checks=["config"]) == ["config"]
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 3).astype("int32")
    x = rng.normal(size=(12, 8)).astype("float32")
    value = float(cls(reduction="sum_over_batch_size")(labels, x))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    distance = np.sqrt(np.maximum(2 - 2 * unit @ unit.T, 0))
    same = labels[:, None] == labels[None, :]
    positive = same & ~np.eye(12, dtype=bool) & (distance > 1.2 - 0.4)
    negative = ~same & (distance < 1.2)
    w_n = np.where(negative, np.exp(10 * (1.2 - distance)), 0)
    pull = np.where(positive, distance - 0.8, 0).sum(1) / (positive.sum(1) + 12e-5)
    push = (w_n * (1.2 - distance)).sum(1) / (w_n.sum(1) + 12e-5)
    np.testing.assert_allclose(value, np.mean(0.5 * pull + 0.5 * push), rtol=1e-5)
    autodiff, weights = weighting.autodiff_weights(cls(), labels, x)
    assert np.all(np.isfinite(weights)) and np.abs(weights).sum() > 0
    np.testing.assert_allclose(weights, autodiff, atol=1e-6)


@pytest.mark.slow  # every check (a fresh process among them) and 100 training steps
def test_the_guide_runs_as_written(guide_module):
    namespace = {"MyRankedList": guide_module.MyRankedList}
    exec(_blocks()[1], namespace)  # noqa: S102 (the page's code)
    exec(_blocks()[2], namespace)  # noqa: S102
    history = namespace["model"].history.history
    assert len(history["loss"]) == 2 and np.all(np.isfinite(history["loss"]))
    assert 0 <= history["val_recall@1"][-1] <= 1
