"""Combined losses: compile(loss=[...], loss_weights=[...]), per-term metrics, save/load."""

import keras
import numpy as np
import pytest

import loss_checks as checks
from keras_dml import losses


def data(classes=4, k=4, inputs=6, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), k).astype("int32")
    return rng.normal(size=(len(y), inputs)).astype("float32"), y


def test_total_is_the_weighted_sum_of_terms_on_the_same_batch():
    x, y = data()
    ms, pa = losses.MultiSimilarity(), losses.ProxyAnchor(4)
    combined = losses.Combined([ms, pa], weights=[1.0, 0.5])
    embeddings = x[:, :6]
    total = float(combined(y, embeddings))
    np.testing.assert_allclose(total, float(ms(y, embeddings)) + 0.5 * float(pa(y, embeddings)),
                               rtol=1e-6)


def test_dml_model_compile_list_tracks_terms_and_saves(tmp_path):
    x, y = data()
    model = checks.small_model(dim=8, inputs=6)
    model.compile(keras.optimizers.Adam(1e-2),
                  loss=[losses.MultiSimilarity(), losses.ProxyAnchor(4)], loss_weights=[1.0, 0.5])
    combined = model.dml_loss
    assert isinstance(combined, losses.Combined)
    proxies = combined.losses[1].proxies
    assert any(w is proxies for w in model.trainable_weights)
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, shuffle=False).history
    assert set(history) == {"loss", "multi_similarity", "proxy_anchor"}
    np.testing.assert_allclose(
        history["loss"], np.add(history["multi_similarity"], 0.5 * np.asarray(
            history["proxy_anchor"])), rtol=1e-5)
    path = str(tmp_path / "combined.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.dml_loss.weights == [1.0, 0.5]
    np.testing.assert_allclose(loaded.dml_loss.losses[1].proxies.numpy(), proxies.numpy())
    np.testing.assert_allclose(loaded.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)[
        "loss"], model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)["loss"],
        rtol=1e-5)


def test_names_configs_and_errors():
    combined = losses.Combined(["keras_dml>MultiSimilarity", losses.Circle(),
                                losses.MultiSimilarity(alpha=3.0)])
    assert [m.name for m in combined.trainable_layer.terms] == [
        "multi_similarity", "circle", "multi_similarity_2"]
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(combined))
    assert clone.losses[2].alpha == 3.0 and clone.weights == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="one weight per loss"):
        losses.Combined([losses.Circle()], weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="non-empty list"):
        losses.Combined(losses.Circle())
    with pytest.raises(ValueError, match="continuous"):
        losses.Combined([losses.Circle(), losses.LogRatio()])
