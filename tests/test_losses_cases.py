"""The generic checks over every loss's hyperparameter settings, one table per family,
keyed by loss: the value against a NumPy loop, exact weights, execution modes, mixed
precision, degenerate and easy batches, serialization and a trained, saved DMLModel.

- pair losses (keras_dml/losses/{contrastive,triplet,lifted,binomial,multi_similarity}.py):
  cases (id, loss factory, loop of tests/reference.py);
- the pair family ({circle,supervised_contrastive,smooth_ap,multiple_negatives}.py): loops
  of tests/reference_margin_softmax_and_pair_family.py and pytorch-metric-learning 2.9;
- proxy losses ({proxy_anchor,proxy_nca,normalized_softmax,soft_triple}.py): loops of
  tests/reference.py against known proxies.

tests/test_losses_contract.py runs the contract on every registered loss's registry
example; a check that would only repeat it (same hyperparameters, same tolerances) is
not run again here. A loss's own tests (its equations' weights, miners, arguments) are
in tests/test_losses_<module>.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
import reference_margin_softmax_and_pair_family as family_ref
from keras_dml import mining, weighting
from keras_dml.losses import (
    BinLifted, BinomialDeviance, Circle, Contrastive, GeneralizedLiftedStructure,
    LiftedStructure, MultipleNegativesRanking, MultiSimilarity, NormalizedSoftmax, NTXent,
    ProxyAnchor, ProxyNCA, RelativeAbsoluteWeighting, SmoothAP, SoftTriple,
    SupervisedContrastive, Triplet)
from keras_dml.models import DMLModel
from pair_loss_checks import _batch, _uneven
from proxy_checks import CLASSES, with_proxies
from proxy_checks import batch as proxy_batch


def _params(cases):
    return [pytest.param(*case, id=case[0]) for case in cases]


# == pair losses: (id, loss factory, NumPy loop of tests/reference.py) =================

PAIR_CASES = [
    ("contrastive_cos", lambda: Contrastive(), lambda x, y: ref.contrastive(x, y)),
    ("contrastive_cos_m", lambda: Contrastive(pos_margin=0.8, neg_margin=0.1),
     lambda x, y: ref.contrastive(x, y, "cosine", 0.8, 0.1)),
    ("contrastive_euc", lambda: Contrastive(metric="euclidean", neg_margin=2.5),
     lambda x, y: ref.contrastive(x, y, "euclidean", 0.0, 2.5)),
    ("contrastive_euc_m", lambda: Contrastive(metric="euclidean", pos_margin=1.0, neg_margin=3.0),
     lambda x, y: ref.contrastive(x, y, "euclidean", 1.0, 3.0)),
    ("triplet_all", lambda: Triplet(margin=0.3), lambda x, y: ref.triplet(x, y, 0.3)),
    ("triplet_hard", lambda: Triplet(miner=mining.HardMiner()),
     lambda x, y: ref.triplet(x, y, 0.1, mining="hard")),
    ("triplet_semihard", lambda: Triplet(margin=0.4, miner=mining.SemiHardMiner()),
     lambda x, y: ref.triplet(x, y, 0.4, mining="semihard")),
    ("triplet_easy", lambda: Triplet(miner=mining.EasyMiner(), margin=0.5),
     lambda x, y: ref.triplet(x, y, 0.5, mining="easy")),
    ("triplet_sq_all", lambda: Triplet(metric="squared_euclidean", margin=2.0),
     lambda x, y: ref.triplet(x, y, 2.0, "squared_euclidean")),
    ("triplet_euc_semihard", lambda: Triplet(metric="euclidean", margin=1.0,
                                             miner=mining.SemiHardMiner()),
     lambda x, y: ref.triplet(x, y, 1.0, "euclidean", "semihard")),
    ("triplet_miner_margin", lambda: Triplet(margin=0.2, miner=mining.SemiHardMiner(0.2)),
     lambda x, y: ref.triplet(x, y, 0.2, mining="semihard", miner_margin=0.2)),
    ("lifted", lambda: LiftedStructure(), lambda x, y: ref.lifted_structure(x, y)),
    ("lifted_m", lambda: LiftedStructure(margin=3.0),
     lambda x, y: ref.lifted_structure(x, y, 3.0)),
    ("lifted_cos", lambda: LiftedStructure(0.5, metric="cosine"),
     lambda x, y: ref.lifted_structure(x, y, 0.5, "cosine")),
    ("glifted", lambda: GeneralizedLiftedStructure(),
     lambda x, y: ref.generalized_lifted(x, y)),
    ("glifted_neg_margin", lambda: GeneralizedLiftedStructure(margin=-2.5),
     lambda x, y: ref.generalized_lifted(x, y, -2.5)),
    ("glifted_euc", lambda: GeneralizedLiftedStructure(0.5, metric="euclidean"),
     lambda x, y: ref.generalized_lifted(x, y, 0.5, "euclidean")),
    ("binomial", lambda: BinomialDeviance(), lambda x, y: ref.binomial(x, y)),
    ("binomial_soft", lambda: BinomialDeviance(alpha=1.0, beta=5.0, base=0.2),
     lambda x, y: ref.binomial(x, y, 1.0, 5.0, 0.2)),
    ("bin_lifted", lambda: BinLifted(), lambda x, y: ref.bin_lifted(x, y)),
    ("bin_lifted_soft", lambda: BinLifted(alpha=3.0, beta=10.0, base=0.1),
     lambda x, y: ref.bin_lifted(x, y, 3.0, 10.0, 0.1)),
    ("ms", lambda: MultiSimilarity(), lambda x, y: ref.multi_similarity(x, y)),
    ("ms_eps", lambda: MultiSimilarity(alpha=1.0, beta=20.0, base=0.3,
                                              miner=mining.MultiSimilarityMiner(0.3)),
     lambda x, y: ref.multi_similarity(x, y, 1.0, 20.0, 0.3, 0.3)),
    ("ms_no_mining", lambda: MultiSimilarity(miner=None),
     lambda x, y: ref.multi_similarity(x, y, mining=False)),
    ("raw", lambda: RelativeAbsoluteWeighting(), lambda x, y: ref.multi_similarity(x, y)),
]
# The settings the execution-mode, precision, degenerate- and easy-batch checks run on.
MAIN = ("contrastive_cos", "contrastive_euc", "triplet_all", "triplet_hard",
        "triplet_semihard", "lifted", "glifted", "binomial", "bin_lifted", "ms")
MAIN_CASES = _params([case for case in PAIR_CASES if case[0] in MAIN])
DEGENERATE_CASES = _params([case for case in PAIR_CASES if case[0] in MAIN + (
    "triplet_easy", "triplet_miner_margin", "ms_no_mining")])
DEGENERATE = {
    "all_singletons": np.arange(6, dtype="int32"),
    "one_class": np.zeros(6, "int32"),
    "k1_two_samples": np.array([0, 1], "int32"),
    "single_sample": np.array([0], "int32"),
}
SERIALIZED = [
    Contrastive(metric="euclidean", pos_margin=0.1, neg_margin=2.0, miner=mining.PairMarginMiner()),
    Triplet(margin=0.3, metric="squared_euclidean", miner=mining.SemiHardMiner()),
    Triplet(miner=mining.HardMiner(margin=0.2)),
    LiftedStructure(margin=2.0, metric="cosine"),
    GeneralizedLiftedStructure(margin=0.5, miner=mining.EasyMiner()),
    BinomialDeviance(alpha=1.0, beta=20.0, base=0.3),
    BinLifted(alpha=3.0),
    RelativeAbsoluteWeighting(miner=mining.MultiSimilarityMiner(0.2)),
]
TRAINED = {"triplet": Triplet(miner=mining.HardMiner()), "lifted": LiftedStructure(),
           "binomial": BinomialDeviance(), "raw": RelativeAbsoluteWeighting()}


def _at_margin_scale(name, x):
    """Euclidean cases' distances of the order of their margins."""
    return 0.6 * x if "euc" in name or name.startswith("lifted") and "cos" not in name else x


@pytest.mark.parametrize("name,factory,reference", _params(PAIR_CASES))
@pytest.mark.parametrize("batch", ["balanced", "uneven"])
def test_value_matches_numpy_reference(name, factory, reference, batch):
    labels, x = _batch(seed=2) if batch == "balanced" else _uneven(seed=3)
    x = _at_margin_scale(name, x)
    expected = reference(x.astype("float64"), labels)
    np.testing.assert_allclose(float(factory()(labels, x)), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name,factory,reference", _params(PAIR_CASES))
def test_weights_are_the_exact_derivative(name, factory, reference):
    labels, x = _uneven(seed=4)
    autodiff, weights = weighting.autodiff_weights(factory(), labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name,factory,reference", MAIN_CASES)
def test_eager_function_and_jit_agree(name, factory, reference):
    labels, x = _uneven(seed=14)
    loss = factory()
    eager = checks.value_and_gradient(loss, labels, x)
    for mode in ("function", "jit"):
        value, grad = checks.value_and_gradient(loss, labels, x, mode)
        np.testing.assert_allclose(value, eager[0], rtol=1e-5)
        np.testing.assert_allclose(grad, eager[1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES)
def test_mixed_float16_policy_matches_float32(name, factory, reference):
    labels, x = _batch(seed=15, dim=8)
    x = _at_margin_scale(name, x)
    expected = float(factory()(labels, x))
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        value = factory()(labels, tf.constant(x, tf.float16))
        assert value.dtype == tf.float32
        reference_half = float(factory()(labels, x.astype("float16").astype("float32")))
        np.testing.assert_allclose(float(value), reference_half, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(value), expected, rtol=1e-3, atol=1e-3)
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow
@pytest.mark.parametrize("name,factory,reference", DEGENERATE_CASES)
@pytest.mark.parametrize("batch", list(DEGENERATE))
def test_degenerate_batches_are_finite_and_zero(name, factory, reference, batch):
    labels = DEGENERATE[batch]
    x = np.random.default_rng(16).normal(size=(len(labels), 4)).astype("float32")
    value, grad = checks.value_and_gradient(factory(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    if not name.startswith(("bin", "contrastive", "ms_no")):  # these pull lone positives
        assert value == 0.0 and np.all(grad == 0.0)
    assert value == pytest.approx(reference(x.astype("float64"), labels), abs=1e-6)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES)
def test_all_pairs_easy_batch_is_finite(name, factory, reference):
    # three classes on orthogonal axes: positives coincide, negatives are orthogonal
    labels = np.array([0, 0, 1, 1, 2, 2], "int32")
    x = np.repeat(np.eye(3, dtype="float32"), 2, axis=0) * 3.0
    value, grad = checks.value_and_gradient(factory(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    assert value == pytest.approx(reference(x.astype("float64"), labels), rel=1e-4, abs=1e-5)
    if name.startswith(("triplet", "contrastive_cos", "ms", "raw")):
        assert np.all(np.abs(grad) < 1e-6)  # every constraint satisfied: nothing to learn


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(case).__name__ for case in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    checks.assert_config_round_trip(loss)  # from_config, keras.saving, losses.get by name
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    registered = f"keras_dml>{type(loss).__name__}"
    assert keras.saving.get_registered_object(registered) is type(loss)
    labels, x = _batch(seed=17)
    assert float(restored(labels, x)) == pytest.approx(float(loss(labels, x)), rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("loss", TRAINED.values(), ids=list(TRAINED))
def test_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    labels, x = _batch(classes=6, per_class=4, dim=10, seed=18)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((10,))
    model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss)
    history = model.fit(x, labels, batch_size=24, epochs=6, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    after = model.evaluate(x, labels, batch_size=24, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.loss) is type(loss)
    assert loaded.loss.get_config() == loss.get_config()
    np.testing.assert_allclose(loaded.evaluate(x, labels, batch_size=24, verbose=0), after,
                               rtol=1e-5)
    string_model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    string_model.compile(optimizer="sgd", loss=f"keras_dml>{type(loss).__name__}")
    assert type(string_model.loss) is type(loss)


# == the pair family: loops of tests/reference_margin_softmax_and_pair_family.py ========

FAMILY_CASES = {
    "Circle": (lambda: Circle(), lambda x, y: family_ref.circle(x, y)),
    "Circle-face": (lambda: Circle(margin=0.25, gamma=256.0),
                    lambda x, y: family_ref.circle(x, y, 0.25, 256.0)),
    "SupCon": (lambda: SupervisedContrastive(), lambda x, y: family_ref.supcon(x, y)),
    "SupCon-0.5": (lambda: SupervisedContrastive(0.5),
                   lambda x, y: family_ref.supcon(x, y, 0.5)),
    "NTXent": (lambda: NTXent(), lambda x, y: family_ref.ntxent(x, y)),
    "NTXent-0.2": (lambda: NTXent(0.2), lambda x, y: family_ref.ntxent(x, y, 0.2)),
    "SmoothAP": (lambda: SmoothAP(), lambda x, y: family_ref.smooth_ap(x, y)),
    "SmoothAP-paper": (lambda: SmoothAP(0.05, include_anchor=False),
                       lambda x, y: family_ref.smooth_ap(x, y, 0.05, False)),
}
UNSORTED = np.array([3, 1, 3, 2, 1, 1, 0, 2, 5, 0], "int32")  # unequal counts, a singleton
FAMILY_SERIALIZED = [Circle(margin=0.25, gamma=128.0), SupervisedContrastive(0.2),
                     NTXent(0.5), SmoothAP(0.05, include_anchor=False),
                     MultipleNegativesRanking(10.0, symmetric=True)]


def _unsorted(seed):
    return UNSORTED, np.random.default_rng(seed).normal(size=(len(UNSORTED), 6)).astype("f")


@pytest.mark.parametrize("name", FAMILY_CASES)
@pytest.mark.parametrize("labels", ["cxk", "unsorted"])
def test_matches_numpy_reference_with_exact_weights(name, labels):
    make, reference = FAMILY_CASES[name]
    if labels == "cxk":
        labels, x = checks.batch(classes=4, k=3, dim=6, seed=2)
    else:
        labels, x = _unsorted(seed=5)
    loss = make()
    np.testing.assert_allclose(float(loss(labels, x)), reference(x, labels), rtol=1e-5,
                               atol=1e-6)
    checks.assert_exact_weights(loss, labels, x, atol=1e-5)


def _pml_value_and_gradient(name, labels, x):
    import torch
    from pytorch_metric_learning import losses as pml

    loss = {"Circle": pml.CircleLoss(), "SupervisedContrastive": pml.SupConLoss(),
            "NTXent": pml.NTXentLoss(), "SmoothAP": pml.SmoothAPLoss()}[name]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    value = loss(xt, torch.tensor(labels, dtype=torch.long))
    value.backward()
    return float(value), xt.grad.numpy()


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.parametrize("cls", [Circle, SupervisedContrastive, NTXent, SmoothAP],
                         ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("classes, k", [(4, 4), (8, 2)])
def test_equals_pytorch_metric_learning(cls, classes, k):
    # Sorted C x k labels: the batches PML's SmoothAPLoss accepts; every anchor has a
    # positive and a negative, where PML's averages agree with the mean over anchors.
    labels, x = checks.batch(classes=classes, k=k, dim=16, seed=classes)
    ours = labels
    if cls is SmoothAP and classes != k:
        # PML 2.9's SmoothAPLoss reshapes the batch into blocks of C rows, not k
        # (num_classes_batch = batch_size // num_unique_labels is k): it is right only
        # for C == k, and otherwise equals the true Smooth-AP of k classes x C samples.
        ours = np.repeat(np.arange(k), classes).astype("int32")
        assert abs(family_ref.smooth_ap(x, labels) - family_ref.smooth_ap(x, ours)) > 1e-3
    value, gradient = checks.value_and_gradient(cls(), ours, x)
    expected, expected_gradient = _pml_value_and_gradient(cls.__name__, labels, x)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    scale = np.abs(expected_gradient).max()
    np.testing.assert_allclose(gradient / scale, expected_gradient / scale, rtol=1e-5, atol=1e-5)


# Circle, SupervisedContrastive and NTXent (defaults, C x k batches): the contract test's
# test_modes_agree_and_weights_are_exact, with the same loss_checks.assert_modes_agree.
@pytest.mark.parametrize("make", [SmoothAP, lambda: MultipleNegativesRanking(symmetric=True)],
                         ids=["SmoothAP", "MultipleNegativesRanking-symmetric"])
def test_eager_function_and_xla_agree(make):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=4)
    if make is SmoothAP:  # unsorted, uneven classes: the loop over positive slots
        labels, x = _unsorted(seed=1)
    checks.assert_modes_agree(make(), labels, x)


@pytest.mark.parametrize("cls", [Circle, SupervisedContrastive, NTXent, SmoothAP,
                                 MultipleNegativesRanking], ids=lambda cls: cls.__name__)
def test_mixed_float16_gives_float32(cls):
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=5, scale=0.5)
    checks.assert_mixed_precision(cls, labels, x)


# MultipleNegativesRanking's degenerate batches: the contract test's.
@pytest.mark.parametrize("cls", [Circle, SupervisedContrastive, NTXent, SmoothAP],
                         ids=lambda cls: cls.__name__)
def test_degenerate_batches_are_finite(cls):
    # SupCon keeps the paper's value without negatives (A(i) = P(i)), and SmoothAP's
    # AP of an all-positive ranking is 1 up to rounding in its gradient: finite, not 0.
    zero = {SupervisedContrastive: ("single_sample",),
            SmoothAP: ("single_sample",)}.get(cls, ("one_class", "single_sample"))
    rng = np.random.default_rng(3)
    for name, labels in checks.DEGENERATE_BATCHES.items():
        x = rng.normal(size=(len(labels), 8)).astype("float32")
        value, gradient = checks.value_and_gradient(cls(), labels.astype("int32"), x)
        assert np.isfinite(value) and np.all(np.isfinite(gradient)), name
        if name in zero:
            assert value == 0.0 and not np.any(gradient), (name, value)


@pytest.mark.parametrize("loss", FAMILY_SERIALIZED,
                         ids=[type(case).__name__ for case in FAMILY_SERIALIZED])
def test_config_and_save_load(loss, tmp_path):
    checks.assert_config_round_trip(loss)
    if not isinstance(loss, MultipleNegativesRanking):
        checks.assert_save_load(loss, tmp_path)


# == proxy losses: loops of tests/reference.py against known proxies ===================

PROXY_CASES = {
    "ProxyAnchor": lambda: ProxyAnchor(CLASSES),
    "ProxyAnchor-16-0.2": lambda: ProxyAnchor(CLASSES, alpha=16.0, delta=0.2),
    "ProxyAnchor-4-0": lambda: ProxyAnchor(CLASSES, alpha=4.0, delta=0.0),
    "ProxyNCA": lambda: ProxyNCA(CLASSES),
    "ProxyNCA-9": lambda: ProxyNCA(CLASSES, scale=9.0),
    "NormalizedSoftmax": lambda: NormalizedSoftmax(CLASSES),
    "NormalizedSoftmax-0.5": lambda: NormalizedSoftmax(CLASSES, temperature=0.5),
    "SoftTriple": lambda: SoftTriple(CLASSES),
    "SoftTriple-3": lambda: SoftTriple(CLASSES, centers_per_class=3, la=10.0, gamma=0.5,
                                       tau=0.5, margin=0.1),
    "SoftTriple-1": lambda: SoftTriple(CLASSES, centers_per_class=1, tau=0.2),
}


def _proxy_reference(loss, labels, x, proxies):
    if isinstance(loss, ProxyAnchor):
        return ref.proxy_anchor(x, labels, proxies, loss.alpha, loss.delta)[0]
    if isinstance(loss, ProxyNCA):
        return ref.proxy_nca(x, labels, proxies, loss.scale)
    if isinstance(loss, NormalizedSoftmax):
        return ref.normalized_softmax(x, labels, proxies, loss.temperature)
    return ref.soft_triple(x, labels, proxies, loss.proxies_per_class, loss.la, loss.gamma,
                           loss.tau, loss.margin)


@pytest.mark.parametrize("name", PROXY_CASES)
def test_matches_numpy_reference_and_autodiff(name):
    loss = PROXY_CASES[name]()
    labels, x = proxy_batch(seed=3)
    proxies = with_proxies(loss)
    np.testing.assert_allclose(float(loss(labels, x)), _proxy_reference(loss, labels, x, proxies),
                               rtol=1e-5, atol=1e-5)
    autodiff, weights = weighting.autodiff_weights(loss, labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("cls", [ProxyAnchor, ProxyNCA, NormalizedSoftmax, SoftTriple],
                         ids=lambda cls: cls.__name__)
def test_proxy_eager_function_and_xla_agree(cls):
    loss = cls(CLASSES)
    labels, x = proxy_batch(seed=6)
    with_proxies(loss)
    eager = float(loss(labels, x))
    graph = float(tf.function(loss)(labels, x))
    xla = float(tf.function(loss, jit_compile=True)(labels, x))
    np.testing.assert_allclose([graph, xla], [eager, eager], rtol=1e-5)
