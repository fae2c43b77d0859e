"""Which `Preprocessing` a keras_dml stream applies, and whether a model rescales again.

`class_balanced_batches` and `evaluation_batches` record the `Preprocessing` they
apply to their dataset (`stream_preprocessing`). `DMLModel.fit` keeps the training
stream's in the model's config (so `keras-dml export model.keras` needs no flags),
and `DMLModel.fit` and the evaluation callbacks warn when a model that rescales its
inputs itself (Keras Applications' MobileNetV3, EfficientNet(V2) and ConvNeXt
`include_preprocessing`, or any `Rescaling` / `Normalization` layer before the first
layer with weights) is fed a stream that already normalises.
"""

import warnings
import weakref

import keras
import numpy as np

_RECORDED = weakref.WeakKeyDictionary()
_RESCALING_LAYERS = (keras.layers.Rescaling, keras.layers.Normalization)


def record_preprocessing(dataset, preprocessing):
    """Records that `dataset` applies `preprocessing` (None: nothing); returns `dataset`."""
    if preprocessing is not None:
        _RECORDED[dataset] = preprocessing
    return dataset


def stream_preprocessing(dataset):
    """The `Preprocessing` a keras_dml stream applies, or None (any other dataset, an
    in-memory stream without one, or a stream transformed after it was made)."""
    try:
        return _RECORDED.get(dataset)
    except TypeError:  # not weak-referenceable: arrays, tuples
        return None


def input_rescaling(model):
    """The `Rescaling`, `Normalization` and `keras_dml.layers.BackbonePreprocessing`
    layers `model` applies to its inputs before its first other layer with weights
    (nested models included), in order."""
    from keras_dml.layers import BackbonePreprocessing

    found = []
    for layer in _flat_layers(model):
        if isinstance(layer, (*_RESCALING_LAYERS, BackbonePreprocessing)):
            found.append(layer)
        elif layer.weights:
            break
    return found


def _flat_layers(model):
    for layer in getattr(model, "layers", ()):
        if isinstance(layer, keras.Model):
            yield from _flat_layers(layer)
        else:
            yield layer


def normalised_twice(model, preprocessing):
    """A warning when `model` rescales its inputs itself and `preprocessing` already
    normalises them; None otherwise.

    Args:
        model: A Keras model.
        preprocessing: The `keras_dml.data.Preprocessing` of the stream fed to it, or None.
    """
    if preprocessing is None or preprocessing.normalization == "none":
        return None
    layers = input_rescaling(model)
    if not layers:
        return None
    names = ", ".join(f"{type(layer).__name__} {layer.name!r}" for layer in layers)
    pixels = np.stack([np.zeros(preprocessing.channels, np.float32),
                       np.full(preprocessing.channels, 255.0, np.float32)])[None, None]
    # (1, 1, 2, channels): black and white
    normalised = preprocessing.normalize(pixels)
    seen, meant = _through(layers, normalised), _through(layers, pixels)
    ranges = "" if seen is None or meant is None else (
        f"; the network sees values in {_range(seen)} instead of {_range(meant)}")
    return (f"keras_dml: inputs normalised twice: the stream's Preprocessing(normalization="
            f"{preprocessing.normalization!r}) maps pixels to {_range(normalised)}, and the "
            f"model rescales them again ({names}){ranges}. Feed a model that rescales "
            "inside [0, 255] pixels: Preprocessing(normalization='none') "
            "(docs/common_mistakes.md lists what each backbone family wants).")


def warn_if_normalised_twice(model, preprocessing):
    """`warnings.warn` of `normalised_twice` (shown once per process for one model
    and stream, wherever it is checked)."""
    message = normalised_twice(model, preprocessing)
    if message:
        warnings.warn(message)


def _through(layers, x):
    try:
        for layer in layers:
            x = layer(x)
    except (ValueError, TypeError):  # e.g. a channel count the layer was not built for
        return None
    return x


def _range(x):
    x = np.asarray(x)
    return f"[{x.min():.3g}, {x.max():.3g}]"
