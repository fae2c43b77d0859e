"""Tests for keras_dml.training.projector: the files TensorBoard's projector reads."""

import numpy as np
import pytest
import tensorflow as tf

from keras_dml.training.projector import write_projector


def test_vectors_metadata_sprite_and_config(tmp_path):
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(10, 4)).astype(np.float32)
    labels = np.arange(10) % 3
    images = rng.random((10, 6, 6)).astype(np.float32)
    written = write_projector(tmp_path, embeddings, labels, images=images,
                              class_names=["a\tb", "c", "d"], thumbnail=8)
    np.testing.assert_allclose(np.loadtxt(written["vectors"], delimiter="\t"), embeddings,
                               rtol=1e-5)
    rows = (tmp_path / "metadata.tsv").read_text().splitlines()
    assert rows[0] == "label\tclass" and rows[1] == "0\ta b" and len(rows) == 11
    sprite = tf.io.decode_png(tf.io.read_file(written["sprite"])).numpy()
    assert sprite.shape == (32, 32, 3)  # 4 x 4 grid of 8-pixel thumbnails
    first = tf.image.resize(images[:1, :, :, None], (8, 8), antialias=True).numpy()[0, :, :, 0]
    np.testing.assert_allclose(sprite[:8, :8, 0], first * 255, atol=1.0)  # two uint8 roundings
    assert (sprite[24:, 16:] == 255).all()  # cells after the last image stay white
    text = (tmp_path / "projector_config.pbtxt").read_text()
    projector = pytest.importorskip("tensorboard.plugins.projector.projector_config_pb2")
    from google.protobuf import text_format

    config = text_format.Parse(text, projector.ProjectorConfig())
    (info,) = config.embeddings
    assert info.tensor_path == "vectors.tsv" and info.metadata_path == "metadata.tsv"
    assert list(info.tensor_shape) == [10, 4] and list(info.sprite.single_image_dim) == [8, 8]


def test_sampling_and_errors(tmp_path):
    embeddings = np.arange(40, dtype=np.float32).reshape(20, 2)
    write_projector(tmp_path, embeddings, np.arange(20), max_points=5)
    kept = np.loadtxt(tmp_path / "vectors.tsv", delimiter="\t")
    assert kept.shape == (5, 2) and np.all(np.diff(kept[:, 0]) > 0)
    labels = [int(r.split("\t")[0]) for r in (tmp_path / "metadata.tsv").read_text()
              .splitlines()[1:]]
    np.testing.assert_array_equal(labels, kept[:, 0] / 2)  # rows stay aligned
    with pytest.raises(ValueError, match="must match"):
        write_projector(tmp_path, embeddings, np.arange(3))
