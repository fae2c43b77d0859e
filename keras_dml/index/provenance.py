"""What made an index: the model's fingerprint, its preprocessing, the dimension and metric.

Every saved index (`index.json`) and every Milvus collection records an
`Index.provenance` dict: `model_fingerprint` (`model_fingerprint(model)`, or
None), `preprocessing` (a `keras_dml.data.Preprocessing` as a dict, or None),
`dim`, `metric` and, where known, `run` (the run directory). Searching with
another model's embeddings is refused (`ModelMismatchError`) unless asked for.
"""

import hashlib
import warnings

import numpy as np

__all__ = ["ModelMismatchError", "check", "compare_models", "model_fingerprint"]

FIELDS = ("model_fingerprint", "preprocessing", "dim", "metric", "run")


class ModelMismatchError(ValueError):
    """The model at hand is not the one whose embeddings the index holds."""


def model_fingerprint(model):
    """A short hash of a model's weights and layer structure, stable across processes.

    The embedder of a `DMLModel` is hashed (its heads and proxies do not make
    the embeddings). Two models with the same layer classes, weight shapes and
    weight values have the same fingerprint, whatever their layers' names.

    Examples:

    >>> import keras
    >>> a = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> b = keras.models.clone_model(a); b.set_weights(a.get_weights())
    >>> model_fingerprint(a) == model_fingerprint(b)
    True
    """
    if hasattr(model, "embedder"):
        model = model.embedder()
    digest = hashlib.sha256()
    layers = getattr(model, "_flatten_layers", None)
    classes = ([type(layer).__name__ for layer in layers(include_self=True)] if layers
               else [type(model).__name__])
    digest.update(",".join(classes).encode())
    for weight in model.weights:
        value = np.ascontiguousarray(np.asarray(weight))
        digest.update(f"{value.dtype.str}{value.shape}".encode())
        digest.update(value.tobytes())
    return "sha256:" + digest.hexdigest()[:16]


def check(provenance):
    """`provenance` as a dict with every field of `FIELDS` (missing ones None)."""
    if provenance is None:
        return dict.fromkeys(FIELDS)
    if not isinstance(provenance, dict):
        raise ValueError(f"provenance must be a dict, got {type(provenance).__name__}.")
    unknown = set(provenance) - set(FIELDS)
    if unknown:
        raise ValueError(f"Unknown provenance fields {sorted(unknown)}; known: {list(FIELDS)}.")
    return {**dict.fromkeys(FIELDS), **provenance}


def describe(provenance):
    """`fingerprint (run path)` for messages."""
    text = str(provenance.get("model_fingerprint"))
    return f"{text} (run {provenance['run']})" if provenance.get("run") else text


def compare_models(recorded, given, allow_mismatch=False, where="The index"):
    """Refuses (or with `allow_mismatch`, warns about) a model other than the recorded one.

    Args:
        recorded: The index's provenance dict.
        given: The provenance of the model at hand (its `model_fingerprint`
            and, where known, `run`).
        allow_mismatch: Warn instead of raising. Defaults to False.
        where: What holds the embeddings, for the message.

    Raises:
        ModelMismatchError: Both fingerprints are known and differ, naming both.
    """
    ours, theirs = recorded.get("model_fingerprint"), given.get("model_fingerprint")
    if ours is None or theirs is None:
        if ours is None and theirs is not None:
            warnings.warn(f"{where} records no model fingerprint (made before keras_dml "
                          "recorded one): it cannot check that its embeddings come from "
                          f"model {describe(given)}.", stacklevel=3)
        return
    if ours == theirs:
        return
    message = (f"{where} holds embeddings of model {describe(recorded)}, but the model at hand "
               f"is {describe(given)}: its scores would be meaningless. Rebuild the index "
               "with this model, or pass allow_mismatch=True if you know they agree.")
    if not allow_mismatch:
        raise ModelMismatchError(message)
    warnings.warn("allow_mismatch=True: " + message, stacklevel=3)
