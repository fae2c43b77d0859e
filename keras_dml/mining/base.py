"""Miners: classes whose call maps (similarity, positive mask, negative mask) to kept-pair masks.

A miner runs without gradient and never changes the loss formula: it only decides
which pairs the loss sees. Any miner can be given to any pair loss
(`Contrastive(miner=...)`, `MultiSimilarity(miner=...)`). Miners always look at a
similarity (higher = closer); losses on distances pass the negated distance.
"""

import keras

from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.hyperparameters import finite

__all__ = ["Miner", "MultiSimilarityMiner", "get", "serialize"]


class Miner:
    """Base class: subclasses implement `mine(similarity, positive, negative)`."""

    #: row a of the kept masks depends on row a of the inputs only, so the miner can
    #: run on a block of query rows (the engine's row blocks for large batches)
    row_local = False

    def __call__(self, similarity, positive, negative):
        similarity = keras.ops.stop_gradient(ops.to_float32(similarity))
        positive, negative = self.mine(similarity, positive, negative)
        return keras.ops.stop_gradient(positive), keras.ops.stop_gradient(negative)

    def mine(self, similarity, positive, negative):
        raise NotImplementedError

    def bind_dimension(self, dim):
        """Told the embedding dimension by the loss before mining (most miners ignore it)."""
        # a statement besides the docstring: AutoGraph cannot convert an empty body
        del dim

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


@keras.saving.register_keras_serializable(package="keras_dml")
class MultiSimilarityMiner(Miner):
    """Valid-triplet hard mining (VTHM) of the multi-similarity / RAW loss.

    For each anchor i, with s_ip the hardest (least similar) positive and s_in the
    hardest (most similar) negative, keeps

        negative j  when  s_ij > s_ip - epsilon,
        positive j  when  s_ij < s_in + epsilon,

    so only pairs that can take part in a violated triplet are kept (unified view,
    section 5.1; Wang et al. CVPR 2019, eq. 7-8). An anchor without negatives keeps
    no positive, and one without positives keeps no negative.

    Args:
        epsilon: the margin. Defaults to 0.1 (unified view, section 6).
    """

    row_local = True

    def __init__(self, epsilon=0.1):
        self.epsilon = finite("epsilon", epsilon)

    def mine(self, similarity, positive, negative):
        hardest_positive = ops.masked_min(
            similarity, positive, keepdims=True, empty_value=ops.FLOAT32_MAX
        )
        # one (N, M) masked copy at a time: the second waits for the first reduction
        with primitives.control_dependencies([hardest_positive]):
            hardest_negative = ops.masked_max(
                similarity, negative, keepdims=True, empty_value=ops.FLOAT32_MIN
            )
        kept_negative = negative & (similarity > hardest_positive - self.epsilon)
        kept_positive = positive & (similarity < hardest_negative + self.epsilon)
        return kept_positive, kept_negative

    def get_config(self):
        return {"epsilon": self.epsilon}


def get(identifier):
    """A miner from None, a Miner, its registered name ("SemiHardMiner",
    "keras_dml>SemiHardMiner", built with its defaults) or a serialized config."""
    if identifier is None or isinstance(identifier, Miner):
        return identifier
    if isinstance(identifier, dict):
        return keras.saving.deserialize_keras_object(identifier)
    if isinstance(identifier, str):
        name = identifier if ">" in identifier else f"keras_dml>{identifier}"
        cls = keras.saving.get_registered_object(name)
        if isinstance(cls, type) and issubclass(cls, Miner):
            return cls()
    raise ValueError(f"Cannot interpret {identifier!r} as a keras_dml miner: give a "
                     "keras_dml.mining.Miner or its registered name, e.g. \"SemiHardMiner\".")


def serialize(miner):
    """The Keras config of `miner` (for a loss's `get_config`), or None without one."""
    return None if miner is None else keras.saving.serialize_keras_object(miner)
