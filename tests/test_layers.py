import keras
import numpy as np
import pytest

from keras_dml.layers import EmbeddingHead, L2Normalize


@pytest.mark.parametrize("shape", [(6, 6, 3), (7, 4), (12,)])
def test_embedding_head_pools_projects_and_normalises_any_rank(shape):
    inputs = keras.Input(shape)
    model = keras.Model(inputs, EmbeddingHead(5)(inputs))
    out = model(np.random.default_rng(0).normal(size=(3,) + shape).astype("float32")).numpy()
    assert out.shape == (3, 5)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_embedding_head_max_pooling_and_unnormalised_output():
    x = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
    head = EmbeddingHead(4, pooling="max", normalize=False, kernel_initializer="identity")
    out = head(x).numpy()
    np.testing.assert_allclose(out, x.max(axis=(1, 2)), rtol=1e-6)


def test_embedding_head_is_float32_under_mixed_precision(mixed_precision):
    inputs = keras.Input((4, 4, 2))
    model = keras.Model(inputs, EmbeddingHead(3)(keras.layers.Conv2D(4, 3)(inputs)))
    assert model.output.dtype == "float32"
    assert model(np.ones((1, 4, 4, 2))).dtype == "float32"


def test_serialization_round_trip(tmp_path):
    inputs = keras.Input((4, 4, 2))
    model = keras.Model(inputs, EmbeddingHead(3, pooling="max")(inputs))
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 2)).astype("float32")
    np.testing.assert_allclose(restored(x), model(x), rtol=1e-6)
    assert EmbeddingHead.from_config(model.layers[-1].get_config()).pooling == "max"


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        EmbeddingHead(0)
    with pytest.raises(ValueError, match="pooling must be one of"):
        EmbeddingHead(4, pooling="median")


def test_l2_normalize_keeps_zero_vectors_finite():
    out = L2Normalize()(np.zeros((2, 3), "float32")).numpy()
    assert np.isfinite(out).all() and not out.any()


@pytest.mark.parametrize("dim", [0, -3, 2.5, True])
def test_embedding_head_dim_must_be_a_positive_integer(dim):
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        EmbeddingHead(dim)


def test_drop_path_drops_whole_samples_while_training_only():
    from keras_dml.layers import DropPath

    layer = DropPath(0.5, seed=1)
    x = np.ones((400, 3, 2), "float32")
    y = keras.ops.convert_to_numpy(layer(x, training=True))
    per_sample = y.reshape(400, -1)
    kept = per_sample[:, 0] > 0
    assert set(np.unique(per_sample)) == {0.0, 2.0}  # dropped, or kept and scaled by 1/0.5
    assert np.all(per_sample == per_sample[:, :1])  # a whole sample at a time
    assert 0.4 < kept.mean() < 0.6
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), x)
    again = keras.ops.convert_to_numpy(layer(x, training=True))
    assert not np.array_equal(again, y)  # new draws each call
    restored = DropPath.from_config(layer.get_config())
    assert restored.rate == 0.5 and restored.seed == 1
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\)"):
        DropPath(1.0)
