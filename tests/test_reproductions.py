"""The Omniglot protocol (examples/omniglot_protocol.py), its PyTorch side and the
reproduce_<paper>.py scripts' --quick modes (eager, 2 steps, 10 test characters)."""

import importlib
import json
import os
import sys

import numpy as np
import pytest

# Training runs of the examples and their PyTorch side: the full tier.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

protocol = importlib.import_module("omniglot_protocol")
needs_data = pytest.mark.skipif(not os.path.isdir(protocol.DATA),
                                reason=f"Omniglot not found at {protocol.DATA}")

SCRIPTS = ("reproduce_unified_view", "reproduce_multi_similarity",
           "reproduce_weighted_contrastive", "reproduce_ice", "reproduce_proxy_anchor")


def test_area_resize_matches_tensorflow_area():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    white = rng.random((3, 105, 105)) > 0.3
    expected = tf.image.resize(1.0 - white[..., None].astype("float32"), (28, 28),
                               method="area").numpy()
    np.testing.assert_allclose(protocol.ink_images(white), expected, atol=1e-5)
    np.testing.assert_allclose(protocol.ink_images(white.astype(np.uint8) * 255), expected,
                               atol=1e-5)


def test_batch_order_draws_distinct_classes_and_samples_deterministically():
    labels = np.repeat(np.arange(50), 6)
    order = protocol.batch_order(labels, 8, 3, steps=40, seed=3)
    assert order.shape == (40, 24)
    np.testing.assert_array_equal(order, protocol.batch_order(labels, 8, 3, 40, 3))
    for batch in order:
        classes = labels[batch].reshape(8, 3)
        assert (classes == classes[:, :1]).all() and len(set(classes[:, 0])) == 8
        assert len(set(batch)) == 24
    counts = np.bincount(labels[order[:, ::3]].ravel(), minlength=50)
    assert counts.max() - counts.min() <= 2  # classes are visited in reshuffled passes
    with pytest.raises(ValueError, match="cannot draw"):
        protocol.batch_order(labels, 8, 7, 1, 0)


@needs_data
def test_pml_side_trains_on_the_same_batches():
    pml = importlib.import_module("pml_omniglot")
    row = pml.run("ProxyAnchor", "paper", steps=2, seed=0, classes_per_batch=4,
                  samples_per_class=2, test_classes=10)
    assert 0 <= row["R@1"] <= 100 and np.isfinite(row["final_loss"])


@needs_data
def test_protocol_trains_with_adamw_weight_decay(monkeypatch):
    import keras

    made = []
    monkeypatch.setattr(keras.optimizers, "AdamW", lambda *a, **k: made.append(k) or
                        keras.optimizers.Adam(*a))
    row = protocol.run_protocol(protocol.make_loss("MultiSimilarity"), steps=2,
                                classes_per_batch=4, samples_per_class=2, weight_decay=0.1,
                                test_classes=10, run_eagerly=True)
    assert made == [{"weight_decay": 0.1}] and np.isfinite(row["final_loss"])


def test_rotated_classes_are_new_characters_turned_by_quarter_turns():
    images = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 1)
    x, y = protocol.with_rotated_classes(images, np.array([0, 1], np.int32))
    assert x.shape == (8, 3, 3, 1) and y.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    np.testing.assert_array_equal(x[2, :, :, 0], np.rot90(images[0, :, :, 0]))
    np.testing.assert_array_equal(x[7, :, :, 0], np.rot90(images[1, :, :, 0], 3))


@needs_data
@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_mode_runs_every_row(name, tmp_path):
    script = importlib.import_module(name)
    summary = script.main(["--quick", "--out-dir", str(tmp_path), "--threads", "1"])
    rows = script.rows(**({"eval_every": 1} if name == "reproduce_proxy_anchor" else {}))
    assert [entry["row"] for entry in summary] == [row.name for row in rows]
    for entry in summary:
        assert 0 <= entry["R@1"] <= 100 and np.isfinite(entry["MAP@R"])
    assert (tmp_path / f"{script.NAME}.png").stat().st_size > 0
    assert "| row |" in (tmp_path / f"{script.NAME}.md").read_text()
    records = [json.loads(line) for line in open(tmp_path / f"{script.NAME}.jsonl")]
    assert len(records) == len(rows)
    script.main(["--quick", "--out-dir", str(tmp_path)])  # resumes: nothing is rerun
    assert len(open(tmp_path / f"{script.NAME}.jsonl").readlines()) == len(rows)


@needs_data
def test_rows_option_runs_only_the_named_rows(tmp_path):
    script = importlib.import_module("reproduce_multi_similarity")
    summary = script.main(["--quick", "--out-dir", str(tmp_path), "--threads", "1",
                           "--rows", "BinLifted"])
    assert [entry["row"] for entry in summary] == ["BinLifted (32 x 4)"]
    records = [json.loads(line) for line in open(tmp_path / f"{script.NAME}.jsonl")]
    assert [r["row"] for r in records] == ["BinLifted (32 x 4)"]


def test_error_bars_only_with_several_seeds():
    import reproduction

    one = [{"n": 1, "R@1": 60.0, "R@1 std": 0.0}, {"n": 1, "R@1": 70.0, "R@1 std": 0.0}]
    assert reproduction.error_bars(one) is None
    two = [{"n": 2, "R@1": 60.0, "R@1 std": 0.5}, {"n": 1, "R@1": 70.0, "R@1 std": 0.0}]
    assert reproduction.error_bars(two) == [0.5, 0.0]


def test_seeds_text_counts_the_seeds_of_the_entries():
    import reproduction

    assert reproduction.seeds_text([{"n": 1}, {"n": 1}]) == "one seed"
    assert reproduction.seeds_text([{"n": 3}, {"n": 3}]) == "mean ± std over 3 seeds"
    assert reproduction.seeds_text([{"n": 2}, {"n": 3}]) == "mean ± std over 2-3 seeds"
    assert reproduction.seeds_text([]) == "one seed"


@needs_data
def test_protocol_saves_weights_and_starts_from_them(tmp_path):
    path = str(tmp_path / "cnn.weights.h5")
    kwargs = dict(steps=2, classes_per_batch=4, samples_per_class=2, test_classes=10,
                  run_eagerly=True)
    trained = protocol.run_protocol(protocol.make_loss("MultiSimilarity"), seed=0,
                                    save_weights=path, **kwargs)
    resumed = protocol.run_protocol(protocol.make_loss("MultiSimilarity"), seed=1,
                                    initial_weights=path, **kwargs)
    assert resumed["untrained_R1"] == trained["R@1"]  # seed 1 starts from seed 0's weights
    with pytest.raises(FileExistsError, match="save_weights"):
        protocol.run_protocol(protocol.make_loss("MultiSimilarity"), save_weights=path,
                              **kwargs)


@needs_data
def test_cross_batch_memory_fine_tuning_quick_mode(tmp_path):
    script = importlib.import_module("reproduce_cross_batch_memory")
    summary = script.main(["--quick", "--out-dir", str(tmp_path), "--threads", "1"])
    assert [entry["row"] for entry in summary] == [
        "8 x 2", "8 x 2 + memory 64", "8 x 2 + memory 64, momentum keys 0.99",
        "8 x 2 + memory 64, momentum keys 0.999", "32 x 4"]
    records = [json.loads(line) for line in open(tmp_path / f"{script.NAME}.jsonl")]
    assert len({r["untrained_R1"] for r in records}) == 1  # all start from the same weights
    weights = tmp_path / f"{script.NAME}_pretrained_2.weights.h5"
    made = weights.stat().st_mtime_ns
    assert (tmp_path / f"{script.NAME}.png").stat().st_size > 0
    script.main(["--quick", "--out-dir", str(tmp_path)])  # reuses the weights and the runs
    assert weights.stat().st_mtime_ns == made
    assert len(open(tmp_path / f"{script.NAME}.jsonl").readlines()) == 5


def test_every_result_records_the_cpu_and_the_load():
    """Both sides' rows carry `protocol.machine()`: the benchmarks' CPU model and the load."""
    from benchmarks.__main__ import cpu_model

    recorded = protocol.machine()
    assert recorded["cpu"] == cpu_model() and recorded["cpu"]
    assert recorded["load"] >= 0.0
