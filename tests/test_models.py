"""DMLModel: real loss in logs, global batch under tf.distribute, loss-owned weights."""

import contextlib
import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import losses, mining
from keras_dml.layers import EmbeddingHead
from keras_dml.losses.registry import ENTRIES
from keras_dml.models import DMLModel


@keras.saving.register_keras_serializable(package="keras_dml_tests")
class _Temperature(keras.layers.Layer):
    def build(self, input_shape):
        self.log_scale = self.add_weight(shape=(), initializer="zeros", name="log_scale")


@keras.saving.register_keras_serializable(package="keras_dml_tests")
class _LearnedScaleMS(losses.MultiSimilarity):
    """MultiSimilarity times exp(log_scale): a tiny loss that owns one trainable weight."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.trainable_layer = _Temperature()

    def call(self, y_true, y_pred):
        if not self.trainable_layer.built:
            self.trainable_layer.build((None, y_pred.shape[-1]))
        return super().call(y_true, y_pred) * tf.exp(self.trainable_layer.log_scale)


def _data(n=48, d=10, classes=12, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype("float32"), np.repeat(np.arange(classes), n // classes)


def _model(embedding_dim=8):
    inputs = keras.Input((10,))
    hidden = keras.layers.Dense(16, activation="tanh")(inputs)
    return DMLModel(inputs, EmbeddingHead(embedding_dim)(hidden))


def _dataset(x, y, batch=24):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def test_fit_history_and_evaluate_show_the_real_loss():
    x, y = _data()
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=losses.MultiSimilarity())
    expected_first = float(losses.MultiSimilarity()(y[:24], model(x[:24])))
    first = {}
    logged = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: first.setdefault(batch, logs["loss"]))
    history = model.fit(_dataset(x, y), epochs=3, verbose=0, callbacks=[logged])
    assert first[0] == pytest.approx(expected_first, rel=1e-5)  # the first batch's loss
    assert history.history["loss"][-1] < history.history["loss"][0]
    evaluated = model.evaluate(_dataset(x, y), verbose=0)
    halves = [float(losses.MultiSimilarity()(y[s], model(x[s])))
              for s in (slice(0, 24), slice(24, 48))]
    assert evaluated == pytest.approx(np.mean(halves), rel=1e-5)  # batches of equal size


def _counted_passes(x, y, batch=24):
    """A dataset of `(x, y)` batches that counts the passes started over it."""
    passes = []

    def generate():
        passes.append(1)
        for start in range(0, len(x), batch):
            yield x[start:start + batch], y[start:start + batch]

    spec = (tf.TensorSpec((None, x.shape[1]), tf.float32), tf.TensorSpec((None,), tf.int64))
    return tf.data.Dataset.from_generator(generate, output_signature=spec), passes


@pytest.mark.slow
@pytest.mark.parametrize("distributed", [False, True])
def test_fit_starts_one_pass_over_a_dataset_after_the_first_call(distributed,
                                                                  mirrored_strategy):
    """The first `fit` also checks the first batch's labels; later calls on the same
    dataset start only Keras' own pass. Under a strategy too: the model is built
    whole (its heads build every sublayer), so no batch is pulled to build it."""
    x, y = _data()
    scope = mirrored_strategy.scope() if distributed else contextlib.nullcontext()
    with scope:
        model = _model()
        model.compile(optimizer="sgd", loss=losses.MultiSimilarity())
    data, passes = _counted_passes(x, y)
    model.fit(data, steps_per_epoch=2, verbose=0)
    first = len(passes)
    assert first == 2
    model.fit(data, steps_per_epoch=2, verbose=0)
    model.fit(data, steps_per_epoch=2, verbose=0)
    assert len(passes) == first + 2
    bad, _ = _counted_passes(x, np.full_like(y, 2**25))  # a new dataset is checked again
    with pytest.raises(ValueError, match="labels"):
        model.fit(bad, steps_per_epoch=2, verbose=0)


class CountedTraces(DMLModel):
    traces = 0

    def train_step(self, *args):
        type(self).traces += 1  # once per trace: the step runs as a graph
        return super().train_step(*args)


@pytest.mark.parametrize("make_loss", [losses.MultiSimilarity, _LearnedScaleMS])
def test_fit_traces_the_step_once(make_loss):
    # An optimizer built inside the first trace makes TensorFlow trace the step twice.
    inputs = keras.Input((10,))
    model = CountedTraces(inputs, EmbeddingHead(8)(keras.layers.Dense(16)(inputs)))
    model.compile(optimizer="adam", loss=make_loss())
    CountedTraces.traces = 0
    x, y = _data()
    model.fit(_dataset(x, y), epochs=2, verbose=0)
    assert CountedTraces.traces == 1
    assert len(model.optimizer.variables) > 1


def test_compile_by_registered_name_and_jit_compile():
    x, y = _data()
    model = _model()
    model.compile(optimizer="adam", loss="keras_dml>MultiSimilarity", jit_compile=True)
    assert isinstance(model.dml_loss, losses.MultiSimilarity)
    history = model.fit(_dataset(x, y), epochs=2, verbose=0)
    assert all(np.isfinite(history.history["loss"]))


def test_sample_weights_reach_the_loss():
    x, y = _data()
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=losses.MultiSimilarity(miner=None))
    weights = np.zeros(len(y), "float32")
    zero = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(24),
                          verbose=0)
    assert zero == 0.0


@pytest.mark.slow
def test_mirrored_strategy_update_equals_single_device_on_the_concatenated_batch(
        mirrored_strategy):
    assert len(tf.config.list_logical_devices("CPU")) >= 2
    x, y = _data(n=32, classes=8)
    loss = losses.MultiSimilarity(miner=None)

    def build():
        keras.utils.set_random_seed(3)
        model = _model()
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
        return model

    single = build()
    start = [w.copy() for w in single.get_weights()]
    single.fit(_dataset(x, y, batch=32), epochs=1, verbose=0)
    with mirrored_strategy.scope():
        mirrored = build()
    mirrored.set_weights(start)
    mirrored.fit(_dataset(x, y, batch=32), epochs=1, verbose=0)
    for a, b, w0 in zip(single.get_weights(), mirrored.get_weights(), start):
        assert np.abs(a - w0).max() > 1e-4  # something was learned
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _single_and_mirrored(strategy, make_loss, x, y, seed=3):
    """One SGD epoch from the same start, on one device and on two mirrored CPUs."""

    def build():
        keras.utils.set_random_seed(seed)
        model = _model()
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=make_loss())
        return model

    single = build()
    single.fit(_dataset(x, y, batch=len(y)), epochs=1, verbose=0)  # builds the loss weights
    start = [w.copy() for w in single.get_weights()]
    single_history = single.fit(_dataset(x, y, batch=len(y)), epochs=1, verbose=0)
    with strategy.scope():
        mirrored = build()
    mirrored.fit(_dataset(x, y, batch=len(y)), epochs=1, verbose=0)
    mirrored.set_weights(start)
    history = mirrored.fit(_dataset(x, y, batch=len(y)), epochs=1, verbose=0)
    return start, single, mirrored, {"single": single_history.history["loss"],
                                     "mirrored": history.history["loss"]}


@pytest.mark.parametrize("make_loss", [
    lambda: losses.ProxyAnchor(num_classes=8, proxy_lr_multiplier=10.0),
    lambda: losses.Margin(num_classes=8),
], ids=["proxy_anchor_lr_x10", "margin_beta_per_class"])
def test_mirrored_loss_owned_weights_update_equals_single_device(make_loss, mirrored_strategy):
    # each replica holds the whole gradient of the loss's weights: counted once
    x, y = _data(n=32, classes=8)
    start, single, mirrored, _ = _single_and_mirrored(mirrored_strategy, make_loss, x, y)
    owned = {w.path for w in single.loss_layer.trainable_weights}
    for a, b, w0, w in zip(single.get_weights(), mirrored.get_weights(), start,
                           single.weights):
        if w.path in owned:
            assert np.abs(a - w0).max() > 1e-4  # the loss's weights were trained
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=w.path)


def _registered(name, **kwargs):
    entry = ENTRIES[name]
    return lambda: entry.cls(**{**entry.example, **kwargs})


# Every registered loss with its registry example, plus the code paths an example does
# not take: a mined Triplet, N-pair-mc's reference set, a Combined of a batch-global and
# a per-query term, and the "sum" and "mean_with_sample_weight" reductions.
_LOSSES = {name: _registered(name) for name in sorted(ENTRIES)}
_LOSSES.update({
    "Triplet_semihard": _registered("Triplet", miner="SemiHardMiner"),
    "NPair_one_per_class": _registered("NPair", tuples="one_per_class"),
    "Combined_ms_histogram": lambda: losses.Combined(
        [losses.MultiSimilarity(), losses.Histogram()], weights=[1.0, 0.5]),
    "MultiSimilarity_sum": _registered("MultiSimilarity", reduction="sum"),
    "Histogram_sum": _registered("Histogram", reduction="sum"),
    "NCA_mean_with_sample_weight": _registered("NCA", reduction="mean_with_sample_weight"),
})


def _labels_for(name, n, classes, seed=0):
    entry = ENTRIES.get(name.split("_")[0])
    if entry is not None and entry.labels == "continuous":
        return np.random.default_rng(seed).normal(size=(n, 2)).astype("float32")
    return np.repeat(np.arange(classes), n // classes)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_LOSSES))
def test_mirrored_update_equals_single_device_for_every_loss(name, mirrored_strategy):
    x, _ = _data(n=32, classes=8)
    y = _labels_for(name, 32, 8)
    start, single, mirrored, history = _single_and_mirrored(mirrored_strategy, _LOSSES[name],
                                                            x, y)
    changed = [np.abs(a - w0).max() for a, w0 in zip(single.get_weights(), start)]
    assert max(changed) > 1e-5
    for a, b, w in zip(single.get_weights(), mirrored.get_weights(), single.weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=w.path)
    # the loss the replicas report is the global batch's, as on one device
    np.testing.assert_allclose(history["mirrored"], history["single"], rtol=1e-5)


def test_mirrored_margin_with_distance_weighted_sampling_trains_beta(mirrored_strategy):
    x, y = _data(n=32, classes=8)
    start, _, mirrored, history = _single_and_mirrored(
        mirrored_strategy, lambda: losses.Margin(miner=mining.DistanceWeighted(seed=0)), x, y)
    assert np.isfinite(history["mirrored"][0]) and history["mirrored"][0] > 0
    beta = mirrored.loss_layer.weights[0]
    index = [i for i, w in enumerate(mirrored.weights) if w.path == beta.path][0]
    assert mirrored.get_weights()[index] != pytest.approx(start[index])  # beta learned


def test_loss_owned_weight_is_tracked_trained_saved_and_restored(tmp_path):
    x, y = _data()
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LearnedScaleMS())
    paths = [w.path for w in model.trainable_weights]
    assert any("log_scale" in p for p in paths)
    assert not any("log_scale" in w.path for w in model.embedder().weights)
    model.fit(_dataset(x, y), epochs=2, verbose=0)
    trained = float(model.loss_layer.log_scale)
    assert trained != 0.0
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert float(restored.loss_layer.log_scale) == pytest.approx(trained)
    assert restored.evaluate(_dataset(x, y), verbose=0) == pytest.approx(
        model.evaluate(_dataset(x, y), verbose=0), rel=1e-5)
    restored.fit(_dataset(x, y), epochs=1, verbose=0)  # training resumes
    assert float(restored.loss_layer.log_scale) != pytest.approx(trained)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_nan_inputs_stop_training_before_any_update(jit_compile):
    x, y = _data()
    x[5, 0] = np.nan
    model = _model()
    model.compile(optimizer="adam", loss=losses.MultiSimilarity(), jit_compile=jit_compile)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        model.fit(_dataset(x, y, batch=48), epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_nan_embeddings_are_a_value_error_in_eager_loss_calls():
    x, y = _data()
    x[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        losses.MultiSimilarity()(y, x)


@pytest.mark.parametrize("labels, embeddings, message", [
    (np.zeros(5, "int32"), np.zeros((4, 3), "float32"), "disagree in batch size"),
    (np.zeros(4, "int32"), np.zeros((4, 3, 1), "float32"), "rank 2"),
    (np.array([0.5, 1, 2, 3]), np.zeros((4, 3), "float32"), "integer class ids"),
    (np.zeros((4, 2), "int32"), np.zeros((4, 3), "float32"), r"shape \(N,\) or \(N, 1\)"),
    (np.zeros(4, "int32"), np.zeros((4, 3), "int32"), "floating point"),
])
def test_bad_input_is_a_clear_value_error(labels, embeddings, message):
    with pytest.raises(ValueError, match=message):
        losses.MultiSimilarity()(labels, embeddings)


def test_labels_of_shape_n_by_1_and_float_integral_labels_are_accepted():
    x, y = _data()
    loss = losses.MultiSimilarity()
    reference = float(loss(y, x))
    assert float(loss(y[:, None], x)) == pytest.approx(reference)
    assert float(loss(y.astype("float32"), x)) == pytest.approx(reference)


@pytest.mark.slow
def test_mixed_precision_training_keeps_float32_embeddings(mixed_precision):
    x, y = _data()
    model = _model()
    assert model.output.dtype == "float32"
    model.compile(optimizer="adam", loss=losses.MultiSimilarity())
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    history = model.fit(_dataset(x, y), epochs=2, verbose=0)
    assert all(np.isfinite(history.history["loss"]))


def test_model_without_loss_or_labels_explains_itself():
    x, y = _data()
    model = _model()
    model.compile(optimizer="adam", loss=losses.MultiSimilarity())
    with pytest.raises(ValueError, match="labels"):
        model.fit(tf.data.Dataset.from_tensor_slices(x).batch(8), epochs=1, verbose=0)


def test_an_unreduced_loss_is_refused_at_compile():
    model = _model()
    with pytest.raises(ValueError, match="reduction='none'"):
        model.compile(optimizer="adam", loss=losses.MultiSimilarity(reduction="none"))
    with pytest.raises(ValueError, match="reduction=None"):
        model.compile(optimizer="adam", loss=losses.Combined(
            [losses.MultiSimilarity(), losses.NCA(reduction=None)]))


def test_mirrored_combined_of_mean_and_sum_terms_is_a_clear_error(mirrored_strategy):
    x, y = _data(n=32, classes=8)
    with mirrored_strategy.scope():
        model = _model()
        model.compile(optimizer="sgd", loss=losses.Combined(
            [losses.MultiSimilarity(), losses.NCA(reduction="sum")]))
    with pytest.raises(ValueError, match="must all be mean-reduced or all 'sum'-reduced"):
        model.fit(_dataset(x, y, batch=32), epochs=1, verbose=0)


def test_compile_by_bare_class_name():
    x, y = _data()
    model = _model()
    model.compile(optimizer="sgd", loss="MultiSimilarity")
    assert isinstance(model.dml_loss, losses.MultiSimilarity)
    assert np.isfinite(model.fit(_dataset(x, y), epochs=1, verbose=0).history["loss"][0])


def test_a_bare_name_keras_also_has_is_an_error_naming_both_spellings():
    with pytest.raises(ValueError, match=r'ambiguous.*"keras_dml>Circle".*keras.losses.Circle\(\)'):
        _model().compile(optimizer="sgd", loss="Circle")
    _model().compile(optimizer="sgd", loss="keras_dml>Circle")


def test_a_misspelt_loss_name_suggests_the_keras_dml_one():
    with pytest.raises(ValueError, match="Unknown loss 'MultiSimilarty'.*did you mean "
                                         "'MultiSimilarity'"):
        _model().compile(optimizer="sgd", loss="MultiSimilarty")


def test_compile_with_a_non_dml_loss_is_a_clear_error():
    model = _model()
    with pytest.raises(ValueError, match="needs a keras_dml loss"):
        model.compile(optimizer="adam", loss="mse")  # resolves to a plain function


def test_checkpoint_folders_exist_before_training(tmp_path):
    """Workers of a multi-worker run that save together raced on Keras' check-then-create
    of a ModelCheckpoint folder (FileExistsError): fit creates the folder first."""
    x, y = _data()
    model = _model()
    model.compile(optimizer="adam", loss=losses.MultiSimilarity())
    folder = tmp_path / "checkpoints" / "run"
    seen = []
    probe = keras.callbacks.LambdaCallback(on_train_begin=lambda logs: seen.append(folder.is_dir()))
    saver = keras.callbacks.ModelCheckpoint(str(folder / "model-{epoch}.keras"))
    model.fit(_dataset(x, y), epochs=1, verbose=0, callbacks=[probe, saver])
    assert seen == [True]
    assert os.listdir(folder) == ["model-1.keras"]


def test_fit_on_a_keras_dml_stream_gives_no_shuffle_warning():
    """A stream orders itself; Keras' "`shuffle=True` was passed, but will be ignored"
    must not appear on every call (an explicit shuffle=True still reaches Keras)."""
    from keras_dml import data

    x, y = _data()
    model = _model()
    model.compile(optimizer="sgd", loss=losses.MultiSimilarity())
    stream = data.class_balanced_batches((x, y), classes_per_batch=4, samples_per_class=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(stream, steps_per_epoch=2, verbose=0)
        model.fit(_dataset(x, y), epochs=1, verbose=0)
    assert not [w for w in caught if "shuffle" in str(w.message)]
    with pytest.warns(UserWarning, match="shuffle=True"):
        model.fit(_dataset(x, y), epochs=1, verbose=0, shuffle=True)
