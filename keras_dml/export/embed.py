"""Step 3 of an export: the model as an `images -> embeddings` function, and gallery embedding."""

import numpy as np

from keras_dml import backend
from keras_dml.hyperparameters import integer_at_least

__all__ = ["embedding_fn", "gallery_embeddings"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")


def embedding_fn(model, image_spec, l2_normalize=True):
    """`images -> float32 (batch, d)` embeddings of `model` in inference mode, and d.

    An empty batch gives a `(0, d)` result without running the model (some
    layers, e.g. a `Flatten` before a `Dense`, cannot take a batch of 0).

    Args:
        model: A Keras model mapping an image batch to one embedding tensor.
        image_spec: `tf.TensorSpec` of the model's input batch.
        l2_normalize: Scale embeddings to unit L2 norm (idempotent for models
            that end with `EmbeddingHead`). Defaults to True.

    Returns:
        `(embed, dim)`.
    """
    def run(images):
        outputs = model(images, training=False)
        if isinstance(outputs, (list, tuple, dict)):
            raise ValueError(
                f"The model must return one embedding tensor, got a {type(outputs).__name__} "
                f"of {len(outputs)} outputs."
            )
        outputs = tf.cast(outputs, tf.float32)
        if outputs.shape.rank != 2 or outputs.shape[-1] is None:
            raise ValueError(
                f"The model must return embeddings of shape (batch, d), got shape {outputs.shape}."
            )
        return tf.math.l2_normalize(outputs, axis=1) if l2_normalize else outputs

    dim = _output_dim(model)
    if dim is None:
        dim = int(tf.function(run).get_concrete_function(image_spec).structured_outputs.shape[-1])

    def embed(images):
        return tf.cond(tf.shape(images)[0] > 0, lambda: run(images),
                       lambda: tf.zeros([0, dim], tf.float32))

    return embed, dim


def _output_dim(model):
    """d from a functional model's single (batch, d) output, else None."""
    try:
        outputs = model.outputs
    except AttributeError:  # subclassed model: no symbolic outputs
        return None
    if outputs and len(outputs) == 1 and len(outputs[0].shape) == 2 \
            and outputs[0].shape[-1] is not None:
        return int(outputs[0].shape[-1])
    return None


def gallery_embeddings(embed, serving, images=None, embeddings=None, labels=None,
                       batch_size=256):
    """`(embeddings, labels)` of a gallery given as images (embedded here) or embeddings.

    Labels found in a `(images, labels)` dataset are used when `labels` is None.
    """
    if (images is None) == (embeddings is None):
        raise ValueError("Pass exactly one of gallery_images and gallery_embeddings.")
    if embeddings is not None:
        return embeddings, labels
    batch_size = integer_at_least("batch_size", batch_size, 1, strict=True)
    embeddings, found = embed_gallery(embed, serving, images, batch_size)
    return embeddings, found if labels is None else labels


def embed_gallery(embed, serving, images, batch_size=256):
    """Embeds gallery images batch by batch (the loop of `keras_dml.inference`); returns
    `(embeddings, labels or None)`.

    Args:
        embed: The export's `embedding_fn`.
        serving: The export's `ServingInput` (decodes encoded gallery images).
        images: Model-ready images `(N, H, W, C)`, a list / array of encoded
            image bytes, or a `tf.data.Dataset` of such images or of
            `(images, labels)` (labels by the inference label rule).
        batch_size: Images embedded at once. Defaults to 256.
    """
    from keras_dml.inference import ArrayBatches, embed_finite

    if isinstance(images, tf.data.Dataset):
        batches = _dataset_batches(images, batch_size)
    else:
        batches = ArrayBatches(_as_array(images), None, batch_size)
    to_images = tf.function(serving.gallery_images)
    embed = tf.function(embed)

    def forward(x):
        return embed(to_images(tf.convert_to_tensor(x)))

    return embed_finite(forward, batches, name="gallery_images")


def _as_array(images):
    """Images as an array; encoded images as an object array (NumPy's fixed-width
    byte strings would drop trailing zero bytes)."""
    if isinstance(images, (list, tuple)) and images and isinstance(images[0], (bytes, str)):
        return np.array(images, dtype=object)
    return np.asarray(images)


def _dataset_batches(dataset, batch_size):
    """`dataset` as batches: single images (or `(image, label)` samples) batched."""
    spec = dataset.element_spec
    has_labels = isinstance(spec, tuple)
    image_spec = spec[0] if has_labels else spec
    if has_labels and len(spec) != 2:
        raise ValueError(
            f"A gallery dataset must yield images or (images, labels), got {spec}."
        )
    single_rank = 0 if image_spec.dtype == tf.string else 3
    return dataset.batch(batch_size) if image_spec.shape.rank == single_rank else dataset
