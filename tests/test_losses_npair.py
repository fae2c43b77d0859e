"""NPair (weighted contrastive eq. 2, Sohn), including N-pair-mc (one pair per class)."""

import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
from keras_dml import weighting
from keras_dml.losses import NPair
from keras_dml.mining import MultiSimilarityMiner


@pytest.mark.slow
@pytest.mark.parametrize("l2_penalty, metric, k, scale", [
    (0.002, "dot", 2, 0.5),
    (0.0, "dot", 3, 0.3),
    (0.05, "cosine", 4, 1.0),
    (0.002, "dot", 5, 0.2),
])
def test_npair_matches_reference_and_autodiff(l2_penalty, metric, k, scale):
    labels, x = checks.batch(classes=4, k=k, dim=6, seed=k, scale=scale)
    loss = NPair(l2_penalty=l2_penalty, metric=metric)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    np.testing.assert_allclose(value, ref.npair(labels, x, l2_penalty, metric), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def test_npair_k2_is_n_pair_mc_with_all_in_batch_negatives():
    # With k = 2 each anchor has one positive: L_a = -log softmax over {p} u N_a.
    labels, x = checks.batch(classes=5, k=2, dim=4, seed=1, scale=0.5)
    s = x.astype(np.float64) @ x.T.astype(np.float64)
    expected = []
    for a in range(10):
        p = a ^ 1
        logits = np.array([s[a, p]] + [s[a, j] for j in range(10) if labels[j] != labels[a]])
        expected.append(np.log(np.exp(logits).sum()) - logits[0])
    np.testing.assert_allclose(float(NPair(l2_penalty=0.0)(labels, x)), np.mean(expected),
                               rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("labels, l2_penalty, metric", [
    (np.repeat(np.arange(5), 4), 0.0, "dot"),
    (np.repeat(np.arange(4), 2), 0.002, "dot"),
    (np.array([3, 1, 3, 2, 1, 1, 0, 2, 5]), 0.05, "cosine"),  # unsorted, one singleton
    (np.array([0, 0, 1]), 0.0, "cosine"),  # a single pair: no negatives
])
def test_npair_one_per_class_is_n_pair_mc(labels, l2_penalty, metric):
    labels = labels.astype("int32")
    x = (0.4 * np.random.default_rng(len(labels)).normal(size=(len(labels), 6))).astype("float32")
    loss = NPair(l2_penalty=l2_penalty, metric=metric, tuples="one_per_class")
    value, _ = checks.assert_modes_agree(loss, labels, x)
    np.testing.assert_allclose(value, ref.npair_mc(labels, x, l2_penalty, metric), rtol=1e-5,
                               atol=1e-7)
    checks.assert_exact_weights(loss, labels, x)
    # pair_weights (the N x N view) is the gradient of the C x C path's value
    w = weighting.pair_weights(loss, labels, x)
    if metric == "dot" and l2_penalty == 0.0:
        positive = labels[:, None] == labels[None, :]
        signed = np.where(positive, -w, w)
        _, gradient = checks.value_and_gradient(loss, labels, x)
        np.testing.assert_allclose(gradient, (signed + signed.T) @ x, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("l2_penalty, miner", [(0.0, None), (0.01, MultiSimilarityMiner(0.05))])
def test_npair_one_per_class_batch_mean_equals_the_per_sample_path(jit_compile, l2_penalty,
                                                                   miner):
    # the default reduction computes the mean over the C pairs directly; a sample
    # weight of ones and reduction="none" go through Keras' per-sample path
    labels = np.array([3, 1, 3, 2, 1, 1, 0, 2, 5, 2], "int32")
    x = tf.Variable(np.random.default_rng(5).normal(size=(10, 6)).astype("float32"))

    def value_and_gradient(loss, **kwargs):
        @tf.function(jit_compile=jit_compile)
        def run():
            with tf.GradientTape() as tape:
                value = tf.reduce_mean(loss(labels, x, **kwargs))
            return value, tape.gradient(value, x)

        return [t.numpy() for t in run()]

    def make(**kwargs):
        return NPair(l2_penalty=l2_penalty, tuples="one_per_class", miner=miner, **kwargs)

    direct = value_and_gradient(make())
    for per_sample in (value_and_gradient(make(), sample_weight=np.ones(10, "float32")),
                       value_and_gradient(make(reduction="none"))):
        np.testing.assert_allclose(direct[0], per_sample[0], rtol=1e-6)
        np.testing.assert_allclose(direct[1], per_sample[1], rtol=1e-5, atol=1e-7)
    assert direct[0] > 0 and np.abs(direct[1]).max() > 0


def test_npair_one_per_class_with_a_miner_mines_the_c_by_c_matrix():
    labels, x = checks.batch(classes=5, k=3, dim=6, seed=3, scale=0.6)
    loss = NPair(l2_penalty=0.0, tuples="one_per_class", miner=MultiSimilarityMiner(0.05))
    value, _ = checks.assert_modes_agree(loss, labels, x)
    checks.assert_exact_weights(loss, labels, x)
    unmined = float(NPair(l2_penalty=0.0, tuples="one_per_class")(labels, x))
    assert 0.0 < value < unmined  # easy negatives dropped from the denominators


@pytest.mark.slow  # peer reference (PyTorch, PML)
def test_npair_one_per_class_equals_pytorch_metric_learning():
    torch = pytest.importorskip("torch")
    pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 6, size=24).astype("int32")
    x = rng.normal(size=(24, 10)).astype("float32")
    # PML's NPairsLoss: one pair per class, dot product of L2-normalised embeddings
    value, gradient = checks.value_and_gradient(
        NPair(l2_penalty=0.0, metric="cosine", tuples="one_per_class"), labels, x)
    peer_x = torch.tensor(x, requires_grad=True)
    peer = pml_losses.NPairsLoss()(peer_x, torch.tensor(labels, dtype=torch.long))
    peer.backward()
    np.testing.assert_allclose(value, peer.item(), rtol=1e-5)
    np.testing.assert_allclose(gradient, peer_x.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_npair_penalty_gradient_reaches_embeddings():
    labels, x = checks.batch(classes=3, k=2, dim=4, seed=2)
    _, with_penalty = checks.value_and_gradient(NPair(l2_penalty=0.1), labels, x)
    _, without = checks.value_and_gradient(NPair(l2_penalty=0.0), labels, x)
    np.testing.assert_allclose(with_penalty - without, 2 * 0.1 * x / len(x), rtol=1e-4,
                               atol=1e-6)


def test_npair_pair_weights_are_non_negative_and_sum_per_anchor():
    labels, x = checks.batch(classes=3, k=3, dim=5, seed=4, scale=0.5)
    w = weighting.pair_weights(NPair(), labels, x)
    assert np.all(w >= 0)
    positive = labels[:, None] == labels[None, :]
    np.fill_diagonal(positive, False)
    # the positive weights of each anchor equal the total of its negative weights
    np.testing.assert_allclose((w * positive).sum(1), (w * ~positive).sum(1), rtol=1e-5)


@pytest.mark.slow
def test_npair_degenerate_and_easy_batches():
    for tuples in ("all", "one_per_class"):
        checks.assert_degenerate_finite(NPair(l2_penalty=0.0, tuples=tuples),
                                        expect_zero=("no_positives", "one_class",
                                                     "single_sample"))
    # all pairs easy: positives far more similar than every negative
    labels = np.repeat(np.arange(3), 2).astype("int32")
    x = np.repeat(np.eye(3, 4, dtype="float32") * 30.0, 2, axis=0)
    value, gradient = checks.value_and_gradient(NPair(l2_penalty=0.0), labels, x, "jit")
    assert value < 1e-6 and np.all(np.abs(gradient) < 1e-6)


def test_npair_serialization_and_mixed_precision(tmp_path):
    loss = NPair(l2_penalty=0.01, metric="cosine", miner=MultiSimilarityMiner(0.2),
                 tuples="one_per_class")
    clone = checks.assert_config_round_trip(loss)
    assert clone.l2_penalty == 0.01 and clone.miner.epsilon == 0.2
    assert clone.tuples == "one_per_class"
    checks.assert_save_load(NPair(l2_penalty=0.01), tmp_path)
    checks.assert_save_load(NPair(tuples="one_per_class"), tmp_path)
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=5, scale=0.3)
    checks.assert_mixed_precision(lambda: NPair(), labels, x)
    checks.assert_mixed_precision(lambda: NPair(tuples="one_per_class"), labels, x)


@pytest.mark.parametrize("kwargs", [{"l2_penalty": -1.0}, {"metric": "euclidean"},
                                    {"l2_penalty": float("nan")}, {"tuples": "some"}])
def test_npair_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        NPair(**kwargs)


def test_npair_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="shape"):
        NPair()(np.zeros((4, 2), "int32"), np.zeros((4, 3), "float32"))
    with pytest.raises(ValueError, match="NaN"):
        NPair()(np.arange(2), np.array([[np.nan, 0.0], [1.0, 0.0]], "float32"))


def test_npair_one_per_class_in_a_jit_compiled_fit_uses_static_shapes(monkeypatch):
    from keras_dml.backend import primitives

    contexts = []

    def spy():
        contexts.append(static_shapes())
        return contexts[-1]

    static_shapes = primitives.static_shapes
    monkeypatch.setattr(primitives, "static_shapes", spy)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype("float32")
    y = np.repeat(np.arange(16), 4).astype("int32")
    histories = []
    for jit_compile in (False, True):
        model = checks.small_model(dim=8, inputs=6)
        model.compile(optimizer="sgd", loss=NPair(tuples="one_per_class"),
                      jit_compile=jit_compile)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
        histories.append(model.fit(data, epochs=2, verbose=0).history["loss"])
    assert contexts == [False, True]  # padded pairs only under XLA
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-5)
