"""CrossBatchMemory: PML's values and gradients, state, warm-up, saving, tf.distribute."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import losses
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel


def _batches(count=6, n=8, d=8, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, classes, n), rng.normal(size=(n, d)).astype("float32"))
            for _ in range(count)]


def _pml_values_and_grads(batches, memory_size):
    torch = pytest.importorskip("torch")
    pml = pytest.importorskip("pytorch_metric_learning.losses")
    xbm = pml.CrossBatchMemory(pml.MultiSimilarityLoss(), batches[0][1].shape[1],
                               memory_size=memory_size)
    out = []
    for labels, embeddings in batches:
        e = torch.tensor(embeddings, requires_grad=True)
        value = xbm(e, torch.tensor(labels))
        value.backward()
        out.append((value.item(), e.grad.numpy()))
    return out


def _ours_values_and_grads(batches, loss):
    """(value, d value / d embeddings) per batch; `loss` is the loss or a tf.function of it."""
    out = []
    for labels, embeddings in batches:
        e = tf.constant(embeddings)
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = loss(labels, e)
        out.append((float(value), tape.gradient(value, e).numpy()))
    return out


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf_function"])
def test_values_and_gradients_equal_pml_before_and_after_wrap_around(function):
    batches = _batches()  # 6 batches of 8 into a memory of 20: wraps at the third
    expected = _pml_values_and_grads(batches, 20)
    loss = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), memory_size=20)
    call = tf.function(lambda y, e: loss(y, e)) if function else loss
    got = _ours_values_and_grads(batches, call)
    for step, ((value, grad), (pml_value, pml_grad)) in enumerate(zip(got, expected)):
        assert value == pytest.approx(pml_value, rel=1e-5, abs=1e-6), step
        np.testing.assert_allclose(grad, pml_grad, rtol=1e-4, atol=1e-6, err_msg=str(step))
    assert int(loss.memory.filled) == 20 and int(loss.memory.next_slot) == 48 % 20


def test_memory_holds_the_last_entries_and_excludes_only_the_batch_own_copies():
    loss = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), memory_size=10)
    batches = _batches(count=2, n=6)
    for labels, embeddings in batches:
        loss(labels, embeddings)
    # slots 0-5 then 6-9, 0-1: the oldest 2 entries were overwritten
    np.testing.assert_array_equal(loss.memory.labels.numpy()[[6, 7, 8, 9, 0, 1]],
                                  batches[1][0])
    np.testing.assert_allclose(loss.memory.embeddings.numpy()[2:6], batches[0][1][2:6])
    # a single batch against a memory that holds only itself: the in-batch loss
    fresh = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), memory_size=10)
    labels, embeddings = batches[0]
    assert float(fresh(labels, embeddings)) == pytest.approx(
        float(losses.MultiSimilarity(miner=None)(labels, embeddings)), rel=1e-5)


def test_warmup_uses_the_batch_alone_and_leaves_the_memory_empty():
    loss = losses.CrossBatchMemory(losses.Contrastive(), memory_size=32, warmup_steps=2)
    batches = _batches(count=3)
    for labels, embeddings in batches[:2]:
        assert float(loss(labels, embeddings)) == pytest.approx(
            float(losses.Contrastive()(labels, embeddings)), rel=1e-6)
        assert int(loss.memory.filled) == 0
    loss(*batches[2])
    assert int(loss.memory.filled) == 8 and int(loss.memory.steps) == 3
    loss.reset()
    assert int(loss.memory.filled) == 0 and int(loss.memory.steps) == 0


def test_paper_form_adds_the_weighted_memory_loss_to_the_batch_loss():
    batches = _batches(count=3)
    pml_form = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), 16)
    paper = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), 16,
                                    include_batch_loss=True, memory_weight=0.5)
    for labels, embeddings in batches:
        memory_value = float(pml_form(labels, embeddings))
        batch_value = float(losses.MultiSimilarity(miner=None)(labels, embeddings))
        assert float(paper(labels, embeddings)) == pytest.approx(
            batch_value + 0.5 * memory_value, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("make", [losses.BinomialDeviance, losses.GeneralizedLiftedStructure,
                                  losses.NCA, losses.MultiSimilarity,
                                  lambda: losses.InstanceCrossEntropy(scale=16.0),
                                  losses.Triplet, losses.Margin])
def test_wrapped_losses_are_finite_with_xla_and_empty_slots(make):
    loss = losses.CrossBatchMemory(make(), memory_size=64)
    call = tf.function(lambda y, e: loss(y, e), jit_compile=True)
    for labels, embeddings in _batches(count=2):
        assert np.isfinite(float(call(labels, embeddings)))


def test_rejects_losses_without_a_memory_form_and_bad_sizes():
    with pytest.raises(ValueError, match="pair loss"):
        losses.CrossBatchMemory(losses.ProxyAnchor(num_classes=4), memory_size=16)
    with pytest.raises(ValueError, match="memory_size"):
        losses.CrossBatchMemory(losses.MultiSimilarity(), memory_size=0)
    with pytest.raises(ValueError, match="does not fit"):
        losses.CrossBatchMemory(losses.MultiSimilarity(), memory_size=4)(*_batches(1)[0])


def _model():
    inputs = keras.Input((8,))
    return DMLModel(inputs, EmbeddingHead(6)(keras.layers.Dense(12, activation="tanh")(inputs)))


@pytest.mark.slow
def test_fit_fills_evaluate_does_not_and_the_memory_is_saved_with_the_model(tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 8)).astype("float32"), np.repeat(np.arange(8), 4)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    model = _model()
    model.compile(optimizer="adam", loss=losses.CrossBatchMemory(
        losses.MultiSimilarity(miner=None), memory_size=40))
    model.fit(data, epochs=1, verbose=0)
    bank = model.loss_layer
    assert int(bank.filled) == 32 and int(bank.steps) == 2
    model.evaluate(data, verbose=0)
    model.predict(x, verbose=0)
    assert int(bank.filled) == 32 and int(bank.steps) == 2
    path = tmp_path / "xbm.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored.dml_loss, losses.CrossBatchMemory)
    np.testing.assert_array_equal(restored.loss_layer.labels.numpy(), bank.labels.numpy())
    np.testing.assert_allclose(restored.loss_layer.embeddings.numpy(), bank.embeddings.numpy())
    assert int(restored.loss_layer.next_slot) == 32
    restored.fit(data, epochs=1, verbose=0)
    assert int(restored.loss_layer.filled) == 40  # training continues into the same memory


@pytest.mark.slow
def test_wrapped_loss_weights_are_trained_and_saved_with_the_model(tmp_path):
    """XBM(Margin): Margin's learnable beta is in the model's weights, trained by fit,
    and restored from a .keras file, as it is without the wrapper."""
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(32, 8)).astype("float32"), np.repeat(np.arange(8), 4)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=losses.CrossBatchMemory(losses.Margin(), memory_size=48))
    beta = model.dml_loss.loss.trainable_layer.beta
    assert any(w is beta for w in model.trainable_weights)
    assert not any(w is beta for w in model.encoder_variables())
    model.fit(data, epochs=2, verbose=0)
    trained = beta.numpy().copy()
    assert abs(float(trained[0]) - 1.2) > 1e-3  # beta learned (it starts at 1.2)
    assert int(model.loss_layer.filled) == 48 and int(model.loss_layer.steps) == 4
    path = tmp_path / "xbm_margin.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    restored_beta = restored.dml_loss.loss.trainable_layer.beta
    np.testing.assert_allclose(restored_beta.numpy(), trained)
    assert any(w is restored_beta for w in restored.trainable_weights)
    np.testing.assert_array_equal(restored.loss_layer.labels.numpy(),
                                  model.loss_layer.labels.numpy())
    restored.fit(data, epochs=1, verbose=0)
    assert float(restored_beta.numpy()[0]) != pytest.approx(float(trained[0]), abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("wrapped", [lambda: losses.MultiSimilarity(miner=None),
                                     losses.Margin], ids=["multi_similarity", "margin"])
def test_mirrored_replicas_enqueue_the_gathered_batch_and_train_like_one_device(
        mirrored_strategy, wrapped):
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(32, 8)).astype("float32"), np.repeat(np.arange(8), 4)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def build():
        keras.utils.set_random_seed(4)
        model = _model()
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=losses.CrossBatchMemory(
            wrapped(), memory_size=24))
        return model

    single = build()
    single.fit(data, epochs=1, verbose=0)
    with mirrored_strategy.scope():
        mirrored = build()
    mirrored.fit(data, epochs=1, verbose=0)
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    bank = mirrored.loss_layer
    per_replica = mirrored_strategy.run(lambda: tf.identity(bank.labels.value))
    labels = [v.numpy() for v in mirrored_strategy.experimental_local_results(per_replica)]
    np.testing.assert_array_equal(labels[0], labels[1])
    np.testing.assert_array_equal(labels[0], single.loss_layer.labels.numpy())
    # the wrapped loss's own weights (Margin's beta) are among the compared weights
    owned = len(single.loss_layer.trainable_weights)
    assert owned == (1 if isinstance(single.dml_loss.loss, losses.Margin) else 0)
    if owned:  # beta moved, by the same step on two replicas as on one device
        assert abs(float(single.loss_layer.trainable_weights[0].numpy()[0]) - 1.2) > 1e-3


@pytest.mark.slow
def test_momentum_encoder_fills_the_memory_with_its_keys_and_is_saved(tmp_path):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(16, 8)).astype("float32"), np.repeat(np.arange(4), 4)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    keras.utils.set_random_seed(5)
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=losses.CrossBatchMemory(
        losses.MultiSimilarity(miner=None), memory_size=48, momentum=0.9))
    start = [w.numpy().copy() for w in model.encoder_variables()]
    first_keys = model.predict(x, verbose=0)
    model.fit(data, epochs=1, verbose=0)  # step 1: the key encoder is a copy
    np.testing.assert_allclose(model.loss_layer.embeddings.numpy()[:16], first_keys, atol=1e-5)
    after_one = [w.numpy().copy() for w in model.encoder_variables()]
    model.fit(data, epochs=1, verbose=0)  # step 2: shadow = 0.9 start + 0.1 after step 1
    encoder = model.key_encoder
    for shadow, w0, w1 in zip(encoder.shadows, start, after_one):
        np.testing.assert_allclose(shadow.numpy(), 0.9 * w0 + 0.1 * w1, rtol=1e-5, atol=1e-6)
    assert any(np.abs(w1 - w0).max() > 1e-4 for w0, w1 in zip(start, after_one))
    path = tmp_path / "moco.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    for a, b in zip(restored.key_encoder.shadows, encoder.shadows):
        np.testing.assert_allclose(a.numpy(), b.numpy())
    assert len(restored.embedder().weights) == len(model.embedder().weights)
    restored.fit(data, epochs=1, verbose=0)
