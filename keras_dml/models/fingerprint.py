"""`model_fingerprint`: a short hash of a model's weights and layer structure.

An index records the fingerprint of the model that made its embeddings, and an
export records the fingerprint of the embedder it serves, so a service can
check that both come from the same model.
"""

import hashlib

import numpy as np

__all__ = ["model_fingerprint"]


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
