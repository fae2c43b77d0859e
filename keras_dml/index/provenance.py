"""What made an index: the model's fingerprint, its preprocessing, dimension and metric.

An index answers only for the model that embedded its items: a query embedded
by another model (a retrained run, another run) scores unrelated items. Every
index therefore records its provenance, and `check_model` refuses a model
with another fingerprint unless the caller allows it explicitly.
"""

import hashlib

import numpy as np


class ModelMismatchError(ValueError):
    """The model embedding the queries is not the model that built the index."""


def model_fingerprint(model):
    """A short hex hash of a Keras model's weights and architecture.

    Hashes each weight's shape, dtype and values in order, and the model's
    input and output shapes: the same model loaded in any process gives the
    same fingerprint; retraining (new weights) or another architecture gives
    another. Layer names are left out (Keras numbers them per process).

    Examples:

    >>> import keras
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> model_fingerprint(model) == model_fingerprint(model)
    True
    """
    digest = hashlib.sha256()
    for shapes in (getattr(model, "inputs", None), getattr(model, "outputs", None)):
        for tensor in shapes or []:
            digest.update(repr(tuple(tensor.shape)).encode())
    for weight in model.weights:
        value = np.ascontiguousarray(np.asarray(weight.numpy() if hasattr(weight, "numpy")
                                                else weight))
        digest.update(f"{value.shape}{value.dtype}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()[:16]


def check_model(provenance, fingerprint, allow_mismatch=False, run=None):
    """Refuses a model whose `fingerprint` differs from the index's `provenance`.

    Args:
        provenance: The index's provenance dict (`model_fingerprint`, `run`, ...).
        fingerprint: `model_fingerprint` of the model at hand.
        allow_mismatch: True returns the message (to warn with) instead of raising.
        run: The path of the model at hand, named in the message. Defaults to None.

    Returns:
        None when the fingerprints agree (or the index records none), else the
        mismatch message (only with `allow_mismatch=True`).

    Raises:
        ModelMismatchError: The fingerprints differ, naming both (and both runs).
    """
    recorded = (provenance or {}).get("model_fingerprint")
    if recorded is None or recorded == fingerprint:
        return None
    built = provenance.get("run")
    message = (f"the index was built by model {recorded}"
               + (f" (run {built})" if built else "")
               + f", but the model at hand is {fingerprint}"
               + (f" (run {run})" if run else "")
               + ": its embeddings would score unrelated items. Rebuild the index with this "
               "model, or accept the mismatch explicitly (allow_mismatch=True; CLI: "
               "--allow-model-mismatch).")
    if allow_mismatch:
        return message
    raise ModelMismatchError(message[0].upper() + message[1:])
