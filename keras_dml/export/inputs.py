"""Step 2 of an export: the serving input, its spec, in-graph decoding and checks.

Two input formats:
- `"image_bytes"`: a 1-D string batch of encoded JPEG / PNG / GIF / BMP / WebP
  images, decoded and preprocessed in the graph with exactly
  `keras_dml.data.decode_image` and `Preprocessing.eval`, the evaluation
  pipeline's functions.
- `"images"`: a float batch `(batch, H, W, C)` that is fed to the model as is
  (the client applies the preprocessing recorded in the sidecar).

Every check runs at serving time with a message naming the offending input
and, for a bad image, its index in the request, because TF Serving hands
requests to the graph without validating shapes or values:

- encoded bytes that are no image, or a JPEG / PNG cut short (no end marker):
  `image_bytes[i] is not an encoded image ...`, `image_bytes[i] is a truncated
  PNG ...`;
- a float batch of the wrong shape: `images must have shape (batch, H, W, C),
  got shape [...]`; with NaN or Inf: `images[i] has NaN or Inf values`.

An empty request (batch 0) is valid and gets empty outputs.
"""

import dataclasses
import json
import os


from keras_dml import backend
from keras_dml.data.preprocessing import Preprocessing, decode_image

__all__ = ["MissingPreprocessing", "ServingInput", "as_preprocessing", "serving_input",
           "shape_list"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")

INPUT_FORMATS = ("image_bytes", "images")

# Leading bytes of the formats `tf.io.decode_image` decodes.
_SIGNATURES = {
    "JPEG": (0, b"\xff\xd8\xff"),
    "PNG": (0, b"\x89PNG\r\n\x1a\n"),
    "GIF": (0, b"GIF8"),
    "BMP": (0, b"BM"),
    "WebP": (8, b"WEBP"),
}


@dataclasses.dataclass(frozen=True)
class ServingInput:
    """What a signature takes and how it becomes the model's input batch.

    Attributes:
        input_format: `"image_bytes"` or `"images"`.
        spec: `tf.TensorSpec` of the signature input (its `name` is the
            signature's input key).
        image_spec: `tf.TensorSpec` of the model's input batch.
        preprocessing: The `Preprocessing` applied in the graph
            (`"image_bytes"`) or expected from clients (`"images"`), or None.
    """

    input_format: str
    spec: tf.TensorSpec
    image_spec: tf.TensorSpec
    preprocessing: Preprocessing = None

    @property
    def name(self):
        return self.spec.name

    def to_images(self, inputs):
        """Checks the serving input and maps it to the model's input batch."""
        inputs = assert_shape(inputs, self.spec)
        if self.input_format == "images":
            return assert_finite_images(inputs, self.name)
        return decode_images(inputs, self.preprocessing, self.image_spec.dtype)

    def gallery_images(self, batch):
        """A gallery batch (encoded bytes, or model-ready images) as model input.

        Unlike `to_images` it runs in Python on known shapes, so errors are
        raised before anything is written.
        """
        if batch.dtype == tf.string:
            if self.preprocessing is None:
                raise ValueError("Encoded gallery images need preprocessing= to decode them.")
            return decode_images(batch, self.preprocessing, self.image_spec.dtype)
        expected = tuple(self.image_spec.shape[1:])
        if batch.shape.rank != 4 or any(e is not None and e != a
                                        for e, a in zip(expected, batch.shape[1:])):
            raise ValueError(
                f"gallery_images must have shape (N, {', '.join(map(str, expected))}), "
                f"got a batch of shape {tuple(batch.shape)}."
            )
        return tf.cast(batch, self.image_spec.dtype)

    def describe(self):
        """A JSON-friendly description for the sidecar."""
        if self.input_format == "image_bytes":
            text = ("Encoded JPEG/PNG/GIF/BMP/WebP images; decoded, resized and "
                    "normalised in the graph with `preprocessing`.")
        elif self.preprocessing is not None:
            text = ("Images already preprocessed as `preprocessing` describes "
                    "(resize, centre crop, normalisation), fed to the network as is.")
        else:
            text = "Model-ready image batch, fed to the network as is."
        return {
            "format": self.input_format,
            "dtype": self.spec.dtype.name,
            "shape": shape_list(self.spec.shape),
            "description": text,
            "preprocessing_in_graph": self.input_format == "image_bytes",
        }


class MissingPreprocessing(ValueError):
    """An `image_bytes` export needs a `Preprocessing`, and none was given or recorded."""


def as_preprocessing(value):
    """A `Preprocessing` from an instance, a dict or a JSON file (None stays None).

    A JSON file may hold the `Preprocessing.to_dict()` fields, or any object
    with a `"preprocessing"` key (such as an export sidecar).
    """
    if value is None or isinstance(value, Preprocessing):
        return value
    if isinstance(value, dict):
        fields = value.get("preprocessing", value)
        return Preprocessing.from_dict(fields) if fields else None  # null or {}: none
    if isinstance(value, (str, os.PathLike)):
        with tf.io.gfile.GFile(os.fspath(value)) as f:
            return as_preprocessing(json.load(f))
    raise ValueError(
        "preprocessing must be a keras_dml.data.Preprocessing, a dict or a JSON "
        f"file path, got {type(value).__name__}."
    )


def serving_input(model, input_format="image_bytes", preprocessing=None):
    """Builds the `ServingInput` of `model` for `input_format`.

    Args:
        model: A built Keras model with one image input `(batch, H, W, C)`.
        input_format: `"image_bytes"` or `"images"`. Defaults to `"image_bytes"`.
        preprocessing: `Preprocessing` (or dict / JSON path). Required for
            `"image_bytes"` unless the model has a `preprocessing` attribute (a
            `DMLModel` fitted on a keras_dml stream records the stream's).

    Raises:
        MissingPreprocessing: `"image_bytes"` without a preprocessing.
        ValueError: Unknown format, or a preprocessing whose output shape does
            not fit the model's input.
    """
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}.")
    preprocessing = as_preprocessing(preprocessing)
    if preprocessing is None:
        preprocessing = getattr(model, "preprocessing", None)
        preprocessing = preprocessing if isinstance(preprocessing, Preprocessing) else None
    if input_format == "image_bytes" and preprocessing is None:
        raise MissingPreprocessing(
            "input_format='image_bytes' decodes and preprocesses images in the graph "
            "and needs the evaluation preprocessing, which this model does not record (a "
            "DMLModel fitted on a keras_dml stream records it): pass preprocessing="
            "keras_dml.data.Preprocessing(image_size=..., resize_size=..., "
            "normalization=...) as used for evaluation, or use "
            "input_format='images' for model-ready image batches."
        )
    image_spec = _image_spec(model, preprocessing)
    if input_format == "images":
        spec = tf.TensorSpec(image_spec.shape, image_spec.dtype, name="images")
    else:
        spec = tf.TensorSpec([None], tf.string, name="image_bytes")
    return ServingInput(input_format, spec, image_spec, preprocessing)


def _image_spec(model, preprocessing):
    inputs = _model_inputs(model)
    if inputs is None:
        if preprocessing is None:
            raise ValueError(
                f"Cannot infer the input shape of {type(model).__name__} (it has no "
                "functional inputs): pass preprocessing= to fix the image size."
            )
        return tf.TensorSpec((None, *preprocessing.output_shape), tf.float32)
    if len(inputs) != 1:
        raise ValueError(f"Only single-input models can be exported, got {len(inputs)} inputs.")
    shape, dtype = tuple(inputs[0].shape), tf.as_dtype(inputs[0].dtype)
    if len(shape) != 4:
        raise ValueError(
            f"The model input must be an image batch (batch, H, W, C), got shape {shape}."
        )
    if preprocessing is None:
        return tf.TensorSpec(shape, dtype)
    produced = preprocessing.output_shape
    if any(m is not None and m != p for m, p in zip(shape[1:], produced)):
        raise ValueError(
            f"Preprocessing produces images of shape {produced} but the model expects "
            f"{shape[1:]}: set Preprocessing(image_size=..., channels=...) to match."
        )
    return tf.TensorSpec((None, *produced), dtype)


def _model_inputs(model):
    if not model.built:
        raise ValueError(f"The model {model.name!r} is not built: call it on a batch first.")
    try:
        return model.inputs
    except AttributeError:
        return None


def assert_shape(tensor, spec):
    """`tensor`, after a run-time check that its shape matches `spec`.

    The error names the input, the expected and the received shape. The check
    compares a string of the run-time shape, which graph optimisers cannot fold
    away using the signature's declared shape.
    """
    expected = ", ".join(["batch"] + [str(d) if d is not None else "any"
                                      for d in spec.shape[1:]])
    pattern = ",".join(["[0-9]+"] + [str(d) if d is not None else "[0-9]+"
                                     for d in spec.shape[1:]])
    actual = tf.strings.reduce_join(tf.strings.as_string(tf.shape(tensor)), separator=",")
    message = tf.strings.join(
        [f"{spec.name} must have shape ({expected}), got shape [", actual, "]"])
    ok = tf.strings.regex_full_match(actual, pattern)
    with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
        return tf.identity(tensor)


def assert_finite_images(images, name="images"):
    """`images`, after a run-time check that every value is finite (names the first bad one)."""
    finite = tf.reduce_all(tf.math.is_finite(images), axis=tf.range(1, tf.rank(images)))
    # Padding with True keeps argmin defined for an empty batch.
    first_bad = tf.argmin(tf.cast(tf.concat([finite, [True]], 0), tf.int32),
                          output_type=tf.int32)
    message = tf.strings.join([
        f"{name}[", tf.strings.as_string(first_bad),
        "] has NaN or Inf values; images must be finite"])
    with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(finite), [message])]):
        return tf.identity(images)


def _starts_with(padded, format_name):
    offset, magic = _SIGNATURES[format_name]
    return tf.equal(tf.strings.substr(padded, offset, len(magic)), magic)


def _contains(data, marker):
    """Whether the uint8 vector `data` contains the byte string `marker`."""
    n = tf.size(data) - len(marker) + 1
    hit = tf.ones([tf.maximum(n, 0)], tf.bool)
    for i, byte in enumerate(marker):
        hit = tf.logical_and(hit, tf.equal(data[i:i + tf.maximum(n, 0)], byte))
    return tf.reduce_any(hit)


def assert_encoded_image(encoded, index, name="image_bytes"):
    """Assert ops: `encoded` starts like a JPEG/PNG/GIF/BMP/WebP file and, for JPEG
    and PNG, holds the format's end marker (EOI, IEND), so a file cut short is
    reported with its index instead of the decoder's anonymous error."""
    # Padding keeps substr in range for short strings.
    padded = tf.strings.join([encoded, b"\0" * 12])
    ok = tf.constant(False)
    for format_name in _SIGNATURES:
        ok = tf.logical_or(ok, _starts_with(padded, format_name))
    size = tf.strings.as_string(tf.strings.length(encoded))
    where = [f"{name}[", tf.strings.as_string(index), "] "]
    not_image = tf.strings.join(
        where + ["is not an encoded image (", size,
                 f" bytes); expected {'/'.join(_SIGNATURES)} data"])
    checks = [tf.debugging.Assert(ok, [not_image])]
    data = tf.io.decode_raw(encoded, tf.uint8)
    for format_name, marker, marker_name in (("JPEG", b"\xff\xd9", "EOI marker"),
                                             ("PNG", b"IEND", "IEND chunk")):
        complete = tf.logical_or(tf.logical_not(_starts_with(padded, format_name)),
                                 _contains(data, marker))
        truncated = tf.strings.join(
            where + [f"is a truncated {format_name} (", size,
                     f" bytes, no {marker_name})"])
        with tf.control_dependencies(checks):
            checks.append(tf.debugging.Assert(complete, [truncated]))
    return checks


def decode_images(image_bytes, preprocessing, dtype=tf.float32):
    """Encoded images `(batch,)` -> preprocessed batch, as the evaluation pipeline does."""
    spec = tf.TensorSpec(preprocessing.output_shape, tf.float32)

    def one(args):
        index, encoded = args
        with tf.control_dependencies(assert_encoded_image(encoded, index)):
            image = decode_image(encoded, channels=preprocessing.channels)
        return preprocessing.eval(image)

    indices = tf.range(tf.shape(image_bytes)[0])
    images = tf.map_fn(one, (indices, image_bytes), fn_output_signature=spec)
    return tf.cast(images, dtype)


def shape_list(shape):
    """A TensorShape as a JSON list (None for unknown dims)."""
    return [None if d is None else int(d) for d in shape]
