"""Distance weighted sampling (Wu et al. 2017): negatives drawn against the sphere's density."""

import keras

from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.hyperparameters import finite, integer_at_least
from keras_dml.mining.base import Miner

__all__ = ["DistanceWeighted", "largest_per_row", "log_inverse_sphere_density"]

# 1 - d^2 / 4 is clamped here before its log: d = 2 (antipodal points) would give log 0.
_MIN_ANTIPODAL_FACTOR = 1e-8


def log_inverse_sphere_density(distance, dim, cutoff):
    """log q(d)^-1 up to a constant, with d clipped below at `cutoff`.

    On the unit sphere in R^n the distance d between two uniformly random points
    has density q(d) proportional to d^(n-2) (1 - d^2/4)^((n-3)/2), 0 < d < 2.
    """
    distance = keras.ops.maximum(distance, cutoff)
    antipodal = keras.ops.maximum(1.0 - 0.25 * keras.ops.square(distance), _MIN_ANTIPODAL_FACTOR)
    return (-(dim - 2.0) * keras.ops.log(distance)
            - 0.5 * (dim - 3.0) * keras.ops.log(antipodal))


@keras.saving.register_keras_serializable(package="keras_dml")
class DistanceWeighted(Miner):
    """Distance weighted sampling of negatives (Wu et al., "Sampling Matters", 2017).

    Requires L2-normalised embeddings: the miner receives their cosine similarities
    S (every keras_dml loss passes a similarity to its miner) and works with the
    Euclidean distances on the unit sphere, d = sqrt(2 - 2 S). For each anchor a it
    keeps every positive pair, and samples `negatives_per_positive` negatives per
    positive pair, without replacement, with probability proportional to

        w_an = q(max(d_an, cutoff))^-1      if d_an < nonzero_loss_cutoff, else 0,

    q(d) ~ d^(n-2) (1 - d^2/4)^((n-3)/2) the density of distances between random
    points of the sphere in dimension n. Sampling against q makes the sampled
    distances spread over the whole range instead of concentrating near sqrt(2);
    clipping d at `cutoff` caps the weight of the very close (noisy) negatives,
    and negatives farther than `nonzero_loss_cutoff` (where the margin loss is 0
    with its defaults) are never drawn. An anchor whose negatives are all beyond
    the cutoff samples among them uniformly, as in Wu et al.'s code.

    Computation is in log space, O(N^2) memory, static shapes (XLA, `jax.jit`):
    draws are Gumbel-top-k (exactly sampling without replacement proportionally to
    w), with noise from the miner's `keras.random.SeedGenerator` (`seed_generator`),
    and the draws are selected without sorting (see `largest_per_row`). Kept pairs
    are a mask, so a negative is kept at most once per anchor (Wu et al. draw with
    replacement); an anchor with fewer candidates than draws keeps all its candidates.

    Args:
        cutoff: lower clip of the distance in the weights. Defaults to 0.5 (Wu et al.).
        nonzero_loss_cutoff: negatives at or beyond this distance are not sampled;
            None samples from all negatives. Defaults to 1.4 (Wu et al.'s code, the
            margin loss's alpha + beta at initialisation).
        negatives_per_positive: draws per positive pair. Defaults to 1 (Wu et al.).
        dim: embedding dimension n. Defaults to None: every keras_dml loss supplies
            it from its inputs.
        seed: int seed of the sampler; None draws a non-deterministic seed.

    Examples:

    >>> loss = keras_dml.losses.Margin(miner=keras_dml.mining.DistanceWeighted(seed=0))

    Reference:
        Wu, Manmatha, Smola, Kraehenbuehl, "Sampling Matters in Deep Embedding
        Learning", ICCV 2017, section 4.
    """

    def __init__(self, cutoff=0.5, nonzero_loss_cutoff=1.4, negatives_per_positive=1, dim=None,
                 seed=None):
        self.cutoff = _distance("cutoff", cutoff)
        self.nonzero_loss_cutoff = (
            None if nonzero_loss_cutoff is None
            else _distance("nonzero_loss_cutoff", nonzero_loss_cutoff)
        )
        if self.nonzero_loss_cutoff is not None and self.nonzero_loss_cutoff <= self.cutoff:
            raise ValueError(
                f"nonzero_loss_cutoff ({nonzero_loss_cutoff}) must exceed cutoff ({cutoff})."
            )
        self.negatives_per_positive = integer_at_least("negatives_per_positive",
                                                       negatives_per_positive, 1)
        self.dim = None if dim is None else integer_at_least("dim", dim, 2)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.seed = seed
        #: the state of the miner's draws (a Keras variable): a model that tracks it
        #: advances it at every step, also inside a compiled JAX step
        self.seed_generator = keras.random.SeedGenerator(seed, name="distance_weighted_seed")
        self._bound_dim = None

    def bind_dimension(self, dim):
        """Use `dim` as n unless `dim` was given to the constructor (called by losses)."""
        if dim is not None:
            self._bound_dim = int(dim)

    def sampling_log_weights(self, similarity, negative, dim):
        """log w_an of every candidate negative, and the candidate mask."""
        distance = keras.ops.sqrt(keras.ops.maximum(2.0 - 2.0 * similarity, 0.0))
        log_weights = log_inverse_sphere_density(distance, float(dim), self.cutoff)
        candidates = negative
        if self.nonzero_loss_cutoff is not None:
            candidates = negative & (distance < self.nonzero_loss_cutoff)
        # Anchors with no negative in range sample uniformly among all negatives.
        in_range = keras.ops.any(candidates, axis=1, keepdims=True)
        candidates = keras.ops.where(in_range, candidates, negative)
        log_weights = keras.ops.where(in_range, log_weights, 0.0)
        return log_weights, candidates

    def mine(self, similarity, positive, negative):
        dim = self.dim or self._bound_dim
        if dim is None:
            raise ValueError(
                "DistanceWeighted needs the embedding dimension n for the sphere's distance "
                "density: pass DistanceWeighted(dim=n), or use it with a keras_dml loss, which "
                "supplies it."
            )
        _check_cosine(similarity)
        similarity = keras.ops.clip(similarity, -1.0, 1.0)
        log_weights, candidates = self.sampling_log_weights(similarity, negative, dim)
        draws = self.negatives_per_positive * keras.ops.sum(keras.ops.cast(positive, "int32"),
                                                            axis=1)
        draws = keras.ops.minimum(draws, keras.ops.sum(keras.ops.cast(candidates, "int32"),
                                                       axis=1))
        # [sampling] Gumbel-top-k: the `draws` largest log w + Gumbel keys per row.
        uniform = keras.random.uniform(keras.ops.shape(similarity), minval=1e-20, maxval=1.0,
                                       seed=self.seed_generator)
        gumbel = -keras.ops.log(-keras.ops.log(uniform))
        shift = keras.ops.max(keras.ops.where(candidates, log_weights, ops.FLOAT32_MIN), axis=1,
                              keepdims=True)
        return positive, largest_per_row(log_weights - shift + gumbel, candidates, draws)

    def get_config(self):
        return {"cutoff": self.cutoff, "nonzero_loss_cutoff": self.nonzero_loss_cutoff,
                "negatives_per_positive": self.negatives_per_positive, "dim": self.dim,
                "seed": self.seed}


def largest_per_row(keys, candidates, counts):
    """Mask of the `counts[a]` largest `keys[a, j]` among `candidates[a, :]`, per row a.

    Exact, O(N M) memory, no sort (XLA sorts slowly on CPU): up to 32 draws per
    row are taken by repeated row-wise max, more by a 32-step bisection over the
    float32 total order. Tied keys (probability 0 for continuous keys) may keep
    more than `counts[a]` entries.
    """
    keys = keras.ops.where(candidates, keras.ops.cast(keys, "float32"), -float("inf"))
    counts = keras.ops.cast(counts, "int32")
    return keras.ops.cond(keras.ops.max(counts, initial=0) <= 32,
                          lambda: _by_argmax(keys, counts), lambda: _by_bisection(keys, counts))


def _by_argmax(keys, counts):
    def body(step, keys, kept):
        row_max = keras.ops.max(keys, axis=1, keepdims=True)
        take = keras.ops.expand_dims(step < counts, 1) & (row_max > -float("inf"))
        best = (keys >= row_max) & take
        return step + 1, keras.ops.where(best, -float("inf"), keys), kept | best

    kept = keras.ops.zeros(keras.ops.shape(keys), "bool")
    most = keras.ops.max(counts, initial=0)
    start = keras.ops.convert_to_tensor(0, "int32")
    _, _, kept = keras.ops.while_loop(lambda step, *_: step < most, body, (start, keys, kept))
    return kept


def _by_bisection(keys, counts):
    finite = keys > -float("inf")
    bits = primitives.bitcast(keys, "int32")
    # Flip the magnitude bits of negative floats: integer order == float order.
    ordered = keras.ops.where(bits < 0, keras.ops.bitwise_xor(bits, 0x7FFFFFFF), bits)
    counts = keras.ops.expand_dims(keras.ops.cast(counts, "float32"), 1)

    def halve(_, bounds):  # invariant: count(>= low) >= counts > count(>= high + 1)
        low, high = bounds
        # ceil((low + high) / 2) without leaving int32 (no int64: JAX runs 32-bit)
        middle = (keras.ops.floor_divide(low, 2) + keras.ops.floor_divide(high, 2)
                  + keras.ops.floor_divide(low % 2 + high % 2 + 1, 2))
        above = keras.ops.cast(finite & (ordered >= middle), "float32")
        enough = keras.ops.sum(above, axis=1, keepdims=True) >= counts
        return (keras.ops.where(enough, middle, low),
                keras.ops.where(enough, high, middle - 1))

    low = keras.ops.full(keras.ops.shape(counts), -(2**31), "int32")
    high = keras.ops.full(keras.ops.shape(counts), 2**31 - 1, "int32")
    low, _ = keras.ops.fori_loop(0, 32, halve, (low, high))  # 32 halvings: one value
    return finite & (ordered >= low) & (counts > 0)


def _distance(name, value):
    value = finite(name, value)
    if not 0.0 <= value <= 2.0:
        raise ValueError(f"{name} must be a distance on the unit sphere in [0, 2], got {value}.")
    return value


def _check_cosine(similarity):
    """Eagerly refuse similarities that cannot come from L2-normalised embeddings."""
    if not primitives.is_concrete(similarity):
        return
    values = keras.ops.convert_to_numpy(similarity)
    largest = float(abs(values).max()) if values.size > 0 else 0.0
    if largest > 1.0 + 1e-3:
        raise ValueError(
            "DistanceWeighted requires cosine similarities of L2-normalised embeddings "
            f"(values in [-1, 1]); got a similarity of magnitude {largest:.4g}. Use a "
            "cosine loss, or L2-normalise the embeddings."
        )
