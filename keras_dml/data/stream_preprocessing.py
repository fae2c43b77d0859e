"""Which `Preprocessing` a keras_dml stream applies, and whether a model rescales again.

`class_balanced_batches` and `evaluation_batches` return a `keras_dml.data.Stream`
carrying the `Preprocessing` they apply (`stream_preprocessing`). `DMLModel.fit` keeps the training
stream's in the model's config (so `keras-dml export model.keras` needs no flags),
and `DMLModel.fit` and the evaluation callbacks warn when a model that rescales its
inputs itself (Keras Applications' MobileNetV3, EfficientNet(V2) and ConvNeXt
`include_preprocessing`, or any `Rescaling` / `Normalization` layer before the first
layer with weights) is fed a stream that already normalises.
"""

import sys
import warnings

import keras
import numpy as np

__all__ = ["input_rescaling", "lost_preprocessing", "model_preprocessing", "normalised_twice",
           "record_preprocessing", "recorded_preprocessing", "stream_preprocessing",
           "warn_if_normalised_twice", "warn_if_prepared_otherwise"]

_RESCALING_LAYERS = (keras.layers.Rescaling, keras.layers.Normalization)


def _streams():
    """`keras_dml.data.stream` when imported (a stream exists only then), else None:
    this module stays free of TensorFlow."""
    return sys.modules.get("keras_dml.data.stream")


def record_preprocessing(dataset, preprocessing):
    """`dataset` as a `keras_dml.data.Stream` carrying `preprocessing` (None: nothing)."""
    from keras_dml.data.stream import Stream

    if isinstance(dataset, Stream):
        return dataset.carrying(preprocessing=preprocessing)
    return Stream(dataset, preprocessing=preprocessing)


def stream_preprocessing(dataset):
    """The `Preprocessing` a keras_dml stream carries, or None (any other value, an
    in-memory stream without one, or a dataset made from a stream by a transformation
    that drops it: `lost_preprocessing` says so)."""
    streams = _streams()
    if streams is None or not isinstance(dataset, streams.Stream):
        return None
    return dataset.preprocessing


def lost_preprocessing(dataset):
    """One line saying that `dataset`, made from a keras_dml stream, no longer carries
    its preprocessing, and how to keep it; None otherwise."""
    streams = _streams()
    return None if streams is None else streams.lost_sentence(dataset, "preprocessing")


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


def recorded_preprocessing(model):
    """The `Preprocessing` `model` records (a fitted `DMLModel`, its `embedder()`), or None."""
    from keras_dml.data.preprocessing import Preprocessing

    recorded = getattr(model, "preprocessing", None)
    return recorded if isinstance(recorded, Preprocessing) else None


def model_preprocessing(model, preprocessing=None, what="image files"):
    """The `Preprocessing` that `what` are embedded with by `model`.

    `preprocessing` when given, else the one `model` records, else `keras-dml
    train`'s for the model's input (`default_preprocessing`; no normalisation for a
    model that rescales inside), with a warning naming it.

    Raises:
        ValueError: Nothing is given or recorded and the model has no
            `(batch, H, W, C)` Keras input to take a size from.
    """
    from keras_dml.data.preprocessing import default_preprocessing

    if preprocessing is not None:
        return preprocessing
    recorded = recorded_preprocessing(model)
    if recorded is not None:
        return recorded
    inputs = getattr(model, "inputs", None)
    if not inputs or len(inputs[0].shape) != 4 or inputs[0].shape[1] is None:
        raise ValueError(f"{what} need preprocessing=keras_dml.data.Preprocessing(...): the "
                         "model records none and has no (batch, H, W, C) Keras input to take "
                         "its size from.")
    _, height, _, channels = (int(d) if d is not None else None for d in inputs[0].shape)
    assumed = default_preprocessing(
        height, channels if channels in (1, 3) else 3,
        normalization="none" if input_rescaling(model) else "unit")
    warnings.warn(
        f"keras_dml: {getattr(model, 'name', 'the model')} records no preprocessing, so "
        f"{what} are embedded as keras-dml train prepares them for a {height} px input: "
        f"{assumed.describe()}. If it was trained otherwise, pass preprocessing="
        "keras_dml.data.Preprocessing(...) (a DMLModel fitted on a keras_dml stream "
        "records its own).", stacklevel=3)
    return assumed


def prepared_otherwise(model, preprocessing):
    """A warning when a stream evaluated with `preprocessing` is prepared otherwise
    (resize, crop, channels, normalisation) than `model` records; None otherwise."""
    recorded = recorded_preprocessing(model)
    if preprocessing is None or recorded is None or (
            preprocessing.evaluation_dict() == recorded.evaluation_dict()):
        return None
    return (f"keras_dml: the images are prepared as {preprocessing.describe()}, but "
            f"{getattr(model, 'name', 'the model')} was trained on {recorded.describe()}: "
            "its embeddings and metrics will be off. Pass the split itself (its image files "
            "are then prepared as the model records) or keras_dml.data.evaluation_batches("
            "split, model.preprocessing).")


def warn_if_prepared_otherwise(model, preprocessing):
    """`warnings.warn` of `prepared_otherwise`."""
    message = prepared_otherwise(model, preprocessing)
    if message:
        warnings.warn(message, stacklevel=3)
