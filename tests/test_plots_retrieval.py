"""Tests for keras_dml.plots.retrieval: each figure is written and draws the right data."""

import os

import keras
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from keras_dml import plots  # noqa: E402
from keras_dml.callbacks import RecallAtK  # noqa: E402
from keras_dml.evaluation import nearest_neighbors  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    with open(path, "rb") as handle:
        assert handle.read(8) == PNG_MAGIC


def blobs(classes=4, per_class=15, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class)
    centres = rng.normal(size=(classes, dim)) * 8
    return (centres[labels] + rng.normal(size=(len(labels), dim))).astype("float32"), labels


def test_recall_curves_from_history_and_callback(tmp_path):
    history = keras.callbacks.History()
    history.epoch = [0, 1, 2]
    history.history = {"loss": [3, 2, 1], "val_recall@10": [0.5, 0.6, 0.7],
                       "val_recall@2": [0.2, 0.3, 0.35], "val_map@r": [0.1, 0.1, 0.2]}
    drawn = plots.recall_curves(history, path=tmp_path / "r.png")
    assert list(drawn) == ["val_recall@2", "val_recall@10"]
    np.testing.assert_array_equal(drawn["val_recall@10"][0], [1, 2, 3])
    np.testing.assert_allclose(drawn["val_recall@2"][1], [20, 30, 35])
    assert_png(tmp_path / "r.png")

    x, y = blobs()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    recall = RecallAtK((x, y), ks=(1, 4), every_n_epochs=2, verbose=0)
    fit_history = model.fit(x, y, epochs=4, verbose=0, callbacks=[recall])
    with pytest.raises(ValueError, match="pass the RecallAtK callback"):
        plots.recall_curves(fit_history, path=tmp_path / "bad.png")
    drawn = plots.recall_curves(recall, path=tmp_path / "cb.png", keys=["val_recall@4"])
    np.testing.assert_array_equal(drawn["val_recall@4"][0], [2, 4])
    np.testing.assert_allclose(drawn["val_recall@4"][1],
                               np.array(recall.history["val_recall@4"]) * 100)
    assert_png(tmp_path / "cb.png")
    with pytest.raises(ValueError, match="no recall@K"):
        plots.recall_curves({"epoch": [0], "loss": [1.0]}, path=tmp_path / "x.png")


def test_tsne_map_separates_classes(tmp_path):
    x, y = blobs(classes=3, per_class=20)
    drawn = plots.tsne_map(x, y, path=tmp_path / "t.png", max_points=50, perplexity=10,
                            threads=1)
    assert_png(tmp_path / "t.png")
    assert drawn["points"].shape == (50, 2) and len(drawn["indices"]) == 50
    np.testing.assert_array_equal(drawn["labels"], y[drawn["indices"]])
    # Well separated classes stay separated on the map: each point's 2-D nearest
    # neighbour shares its class.
    nearest, _ = nearest_neighbors(drawn["points"].astype("float32"), k=1, metric="euclidean")
    assert np.mean(drawn["labels"][nearest[:, 0]] == drawn["labels"]) > 0.95
    with pytest.raises(ValueError, match="at least 3 points"):
        plots.tsne_map(x[:2], y[:2], path=tmp_path / "u.png")


def test_retrieval_grid_frames_and_neighbours(tmp_path):
    x, y = blobs(classes=3, per_class=6, dim=4)
    x[5] = x[12]  # an exact duplicate in another class: retrieved, framed red
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(len(x), 8, 8, 3)).astype("uint8")
    drawn = plots.retrieval_grid(images, y, x, path=tmp_path / "g.png", queries=[5, 0], k=3)
    assert_png(tmp_path / "g.png")
    np.testing.assert_array_equal(drawn["queries"], [5, 0])
    expected, _ = nearest_neighbors(x, k=3)
    np.testing.assert_array_equal(drawn["neighbors"], expected[[5, 0]])
    assert drawn["neighbors"][0, 0] == 12 and not drawn["correct"][0, 0]
    np.testing.assert_array_equal(drawn["correct"], y[drawn["neighbors"]] == y[[5, 0]][:, None])
    grey = plots.retrieval_grid(rng.normal(size=(len(x), 8, 8)), y, x,
                                path=tmp_path / "h.png", queries=4, k=2)
    assert grey["neighbors"].shape == (4, 2) and len(set(grey["queries"])) == 4
    with pytest.raises(ValueError, match="images"):
        plots.retrieval_grid(images[:3], y, x, path=tmp_path / "i.png")
    with pytest.raises(ValueError, match="row indices"):
        plots.retrieval_grid(images, y, x, path=tmp_path / "j.png", queries=[99])


def test_retrieval_grid_reads_only_the_image_files_it_shows(tmp_path):
    from PIL import Image

    x, y = blobs(classes=3, per_class=6, dim=4)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(len(x), 8, 8, 3)).astype("uint8")
    paths = [str(tmp_path / f"{i}.png") for i in range(len(x))]
    for image, path in zip(images, paths):
        Image.fromarray(image).save(path)
    from_arrays = plots.retrieval_grid(images, y, x, path=tmp_path / "a.png", queries=[0], k=2)
    shown = set(from_arrays["queries"]) | set(from_arrays["neighbors"].ravel())
    for i in set(range(len(x))) - shown:  # files never shown are never opened
        os.remove(paths[i])
    from_files = plots.retrieval_grid(paths, y, x, path=tmp_path / "f.png", queries=[0], k=2)
    assert_png(tmp_path / "f.png")
    np.testing.assert_array_equal(from_files["neighbors"], from_arrays["neighbors"])
    with open(paths[0], "w") as handle:
        handle.write("<html>not an image</html>")
    with pytest.raises(ValueError, match=r"cannot read or decode image .*0\.png"):
        plots.retrieval_grid(paths, y, x, path=tmp_path / "g.png", queries=[0], k=2)


def test_recall_curves_start_at_the_untrained_point_in_steps(tmp_path):
    history = {"epoch": [-1, 0, 1], "val_recall@1": [0.3, 0.6, 0.8],
               "val_recall@8": [0.6, 0.8, 0.9]}
    drawn = plots.recall_curves(history, path=tmp_path / "r.png", steps_per_epoch=250)
    np.testing.assert_array_equal(drawn["val_recall@1"][0], [0, 250, 500])
    np.testing.assert_allclose(drawn["val_recall@8"][1], [60, 80, 90])
    assert_png(tmp_path / "r.png")


def test_tsne_map_colours_a_few_classes_and_greys_the_rest(tmp_path):
    x, y = blobs(classes=30, per_class=6, dim=8)
    names = [f"class {c}" for c in range(30)]
    drawn = plots.tsne_map(x, y, path=tmp_path / "t.png", max_points=100, perplexity=10,
                            threads=1, highlight=5, class_names=names)
    assert_png(tmp_path / "t.png")
    assert len(drawn["coloured"]) == 5 and len(drawn["indices"]) == 100
    for c in drawn["coloured"]:  # every image of a coloured class is drawn
        assert np.sum(drawn["labels"] == c) == 6
    with pytest.raises(ValueError, match="highlight"):
        plots.tsne_map(x, y, path=tmp_path / "u.png", highlight=21)
    images = np.random.default_rng(0).random((len(x), 8, 8))
    plots.retrieval_grid(images, y, x, path=tmp_path / "g.png", queries=3, k=2,
                         class_names=names)
    assert_png(tmp_path / "g.png")
