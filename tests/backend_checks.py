"""Backend-neutral helpers of the contract tests that run on TensorFlow, JAX and PyTorch.

NumPy in, NumPy out: a loss is called on NumPy arrays (Keras converts them for the
running backend), and its gradient is taken with the backend's own autodiff
(`tf.GradientTape`, `jax.value_and_grad`, `torch.autograd`), imported only when that
backend runs. Nothing here imports TensorFlow at module level.
"""

import keras
import numpy as np

import reference as ref
import reference_classifier_and_view_family as view_ref
import reference_margin_softmax_and_pair_family as family_ref
import reference_ranked_tuplet_angular_snr as ranked_tuplet_angular_snr
import reference_pml_twins as twins_ref
from keras_dml.losses import ENTRIES

NAMES = sorted(ENTRIES)
CLASSES, PER_CLASS, DIM = 4, 3, 8


def make(name, **kwargs):
    """The registry's small instance of loss `name`, its own weights built and, for the
    proxies, set to seeded NumPy values (the same on every backend)."""
    entry = ENTRIES[name]
    loss = entry.cls(**{**entry.example, **kwargs})
    layer = getattr(loss, "trainable_layer", None)
    if layer is not None and not layer.built:
        layer.build((None, DIM))
    if getattr(loss, "proxies", None) is not None:
        shape = tuple(loss.proxies.shape)
        loss.proxies.assign(np.random.default_rng(1).normal(size=shape).astype("float32"))
    return loss


def batch(name, seed=0, n=CLASSES * PER_CLASS, dim=DIM):
    """Labels (4 classes x 3 int32, or continuous (N, 2) float32) and embeddings."""
    rng = np.random.default_rng(seed)
    x = (0.7 * rng.normal(size=(n, dim))).astype("float32")
    if ENTRIES[name].labels == "continuous":
        return rng.normal(size=(n, 2)).astype("float32"), x
    return np.repeat(np.arange(CLASSES), n // CLASSES).astype("int32"), x


def numpy(tensor):
    """A backend tensor (or variable) as a NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(tensor))


def value_and_gradient(loss, labels, embeddings, jit=False):
    """(loss value, d value / d embeddings) by the running backend's autodiff.

    `jit=True` compiles the step as each backend's `fit` does by default: XLA
    (`tf.function(jit_compile=True)`) on TensorFlow, `jax.jit` on JAX; PyTorch's Keras
    trainer runs eagerly, so there it is the eager step.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = loss(labels, x)
            return value, tape.gradient(value, x)

        if jit:
            step = tf.function(step, jit_compile=True)
        value, gradient = step(tf.constant(embeddings))
    elif backend == "jax":
        import jax

        step = jax.value_and_grad(lambda x: loss(labels, x))
        if jit:
            step = jax.jit(step)
        value, gradient = step(jax.numpy.asarray(embeddings))
    elif backend == "torch":
        import torch

        x = torch.tensor(embeddings, requires_grad=True)
        value = loss(labels, x)
        (gradient,) = torch.autograd.grad(value, x)
        value = value.detach()
    else:
        raise ValueError(f"No autodiff helper for the Keras backend {backend!r}.")
    return float(numpy(value)), numpy(gradient)


def finite_difference(function, x, step=1e-5):
    """Central differences of the float64 NumPy `function` at every entry of `x`."""
    x = np.asarray(x, np.float64)
    gradient = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        gradient[index] = (function(up) - function(down)) / (2 * step)
    return gradient


def _proxies(loss):
    return numpy(loss.proxies).astype("float64")


def _multi_similarity(loss, labels, x):
    miner = loss.miner
    epsilon = 0.1 if miner is None else miner.epsilon
    return ref.multi_similarity(x, labels, loss.alpha, loss.beta, loss.base, epsilon,
                                mining=miner is not None)


#: Loss name -> NumPy loop of tests/reference*.py for the registry example: fn(loss,
#: labels, embeddings as float64) -> the batch value.
REFERENCES = {
    "ArcFace": lambda loss, y, x: family_ref.margin_softmax(
        x, y, _proxies(loss), "arc", loss.margin, loss.scale, 1),
    "BalancedContrastive": lambda loss, y, x: ref.balanced_contrastive(
        y, x, np.bincount(y), loss.lam, loss.margin),
    "BinLifted": lambda loss, y, x: ref.bin_lifted(x, y, loss.alpha, loss.beta, loss.base),
    "BinomialDeviance": lambda loss, y, x: ref.binomial(x, y, loss.alpha, loss.beta, loss.base),
    "Circle": lambda loss, y, x: family_ref.circle(x, y, loss.margin, loss.gamma),
    "Contrastive": lambda loss, y, x: ref.contrastive(x, y, loss.metric, loss.pos_margin,
                                                      loss.neg_margin),
    "CosFace": lambda loss, y, x: family_ref.margin_softmax(
        x, y, _proxies(loss), "cos", loss.margin, loss.scale, 1),
    "GeneralizedLiftedStructure": lambda loss, y, x: ref.generalized_lifted(
        x, y, loss.margin, loss.metric),
    "Histogram": lambda loss, y, x: ref.histogram(y, x, loss.bins),
    "Instance": lambda loss, y, x: view_ref.instance(x, y, loss.gamma),
    "InstanceCrossEntropy": lambda loss, y, x: ref.ice_loss(y, ref.cosine(x), loss.scale),
    "LargeMarginSoftmax": lambda loss, y, x: view_ref.multiplicative_margin_softmax(
        x, y, _proxies(loss), loss.margin, loss.scale),
    "LiftedStructure": lambda loss, y, x: ref.lifted_structure(x, y, loss.margin, loss.metric),
    "LogRatio": lambda loss, y, x: ref.log_ratio(x, ref.squared_euclidean(y),
                                                 loss.max_partners, loss.epsilon),
    "Margin": lambda loss, y, x: ref.margin(y, x, loss.alpha, loss.beta,
                                            loss.nu, average=loss.average),
    "MultiSimilarity": lambda loss, y, x: _multi_similarity(loss, y, x),
    "MultipleNegativesRanking": lambda loss, y, x: family_ref.multiple_negatives_ranking(
        x, y, loss.scale, loss.symmetric),
    "NCA": lambda loss, y, x: ref.nca(y, x, loss.scale, loss.metric),
    "NPair": lambda loss, y, x: ref.npair(y, x, loss.l2_penalty, loss.metric),
    "NTXent": lambda loss, y, x: family_ref.ntxent(x, y, loss.temperature),
    "NormalizedSoftmax": lambda loss, y, x: ref.normalized_softmax(
        x, y, _proxies(loss), loss.temperature),
    "P2SGrad": lambda loss, y, x: view_ref.p2sgrad(x, y, _proxies(loss)),
    "ProxyAnchor": lambda loss, y, x: ref.proxy_anchor(
        x, y, _proxies(loss), loss.alpha, loss.delta)[0],
    "ProxyNCA": lambda loss, y, x: ref.proxy_nca(x, y, _proxies(loss), loss.scale),
    "RelativeAbsoluteWeighting": lambda loss, y, x: _multi_similarity(loss, y, x),
    "SmoothAP": lambda loss, y, x: family_ref.smooth_ap(x, y, loss.temperature,
                                                        loss.include_anchor),
    "SoftTriple": lambda loss, y, x: ref.soft_triple(
        x, y, _proxies(loss), loss.proxies_per_class, loss.la, loss.gamma, loss.tau,
        loss.margin),
    "SphereFace": lambda loss, y, x: view_ref.multiplicative_margin_softmax(
        x, y, _proxies(loss), loss.margin, loss.scale, unit_weights=True),
    "SubCenterArcFace": lambda loss, y, x: family_ref.margin_softmax(
        x, y, _proxies(loss), "arc", loss.margin, loss.scale, loss.sub_centers),
    "SupervisedContrastive": lambda loss, y, x: family_ref.supcon(x, y, loss.temperature),
    "Triplet": lambda loss, y, x: ref.triplet(x, y, loss.margin, loss.metric),
    "VICReg": lambda loss, y, x: view_ref.vicreg(x, loss.invariance_lambda, loss.variance_mu,
                                                 loss.covariance_v, loss.eps),
}
REFERENCES.update(ranked_tuplet_angular_snr.REFERENCES)
REFERENCES.update(twins_ref.REFERENCES)  # FastAP, PNP, ThresholdConsistentMargin, ...
