"""`two_view_batches`: two augmented views of every instance, for SimCLR-style training."""

import numpy as np

from keras_dml import backend
from keras_dml import hyperparameters
from keras_dml.data.pipeline import batches_from_sampler
from keras_dml.data.inputs import IMAGES, SAMPLES, as_data
from keras_dml.data.sources import make_source

__all__ = ["two_view_batches"]

tf = backend.require_tensorflow("keras_dml.data.two_view_batches (tf.data)")

_LABELS = ("instance", "class")


def _permutations(n, batch_size, seed):
    """Batches of distinct indices: each epoch a fresh permutation, the remainder dropped."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start:start + batch_size]


@hyperparameters.renamed_keywords(source="data")
def two_view_batches(data, augment, instances_per_batch, *, labels="instance", seed=None,
                     preprocessing=None):
    """An infinite `tf.data.Dataset` of `(x, y)` batches of two views per instance.

    Each batch draws `instances_per_batch` distinct instances (without replacement
    within an epoch) and applies `augment` twice to the batch, so every instance
    appears as two independently augmented views, next to each other: rows 2i and
    2i + 1 are the views of instance i. With `labels="instance"` (the default)
    `y` is the instance's index in `data`, so `keras_dml.losses.NTXent` (or
    `SupervisedContrastive`) sees the other view as the only positive: SimCLR
    without labels. With `labels="class"`, `y` is the instance's class label (the
    supervised contrastive setting).

    Args:
        data: unlabelled images (an array (N, ...)), `(x, y)` arrays,
            `(paths, labels)`, a `keras_dml.datasets.LabeledImages` or a
            `tf.data.Dataset` of `(x, y)`, as for `class_balanced_batches`.
            `source=` is its deprecated name.
        augment: `augment(images) -> images`, a batch transform in TF ops whose
            random draws differ between calls (Keras preprocessing layers such as
            `keras.layers.RandomCrop`/`RandomFlip` in a `keras.Sequential`, or
            `tf.image.random_*`). Both views must come out with the same shape.
        instances_per_batch: B; batches hold 2 B images. At most the number of
            instances in `data`.
        labels: "instance" or "class". Defaults to "instance".
        seed: seed of the instance order. Defaults to None.
        preprocessing: `keras_dml.data.Preprocessing` for decoded files (its
            eval transform is applied before `augment`). Defaults to None.

    Returns:
        An infinite `tf.data.Dataset` of `(x (2 B, ...), y int32 (2 B,))`.

    Examples:

    >>> augment = keras.Sequential([keras.layers.RandomTranslation(0.1, 0.1),
    ...                             keras.layers.RandomRotation(0.05)])
    >>> ds = keras_dml.data.two_view_batches(images, augment, 128, seed=0)  # doctest: +SKIP
    >>> model.compile("adam", loss=keras_dml.losses.NTXent(temperature=0.1))
    >>> model.fit(ds, steps_per_epoch=100)  # doctest: +SKIP

    Reference: Chen et al., "A Simple Framework for Contrastive Learning of Visual
    Representations" (SimCLR), ICML 2020, Algorithm 1.
    """
    hyperparameters.one_of("labels", labels, _LABELS)
    if not callable(augment):
        raise ValueError(f"augment must be a callable images -> images, got {augment!r}.")
    given = as_data(data, (*SAMPLES, IMAGES), "data")
    if given.form == IMAGES:
        if labels == "class":
            raise ValueError('labels="class" needs labelled data: pass (x, y).')
        given = given.with_labels(np.zeros(len(given.x), np.int64))
    source = make_source(given, preprocessing=preprocessing, training=False)
    n = len(source.labels)
    batch = hyperparameters.integer_at_least("instances_per_batch", instances_per_batch, 1)
    if batch > n:
        raise ValueError(f"instances_per_batch={batch} is larger than data ({n} "
                         "instances).")
    if labels == "instance":
        source.labels = np.arange(n)

    def two_views(x, y):
        views = tf.stack([augment(x), augment(x)], axis=1)
        shape = tf.concat([[-1], tf.shape(views)[2:]], axis=0)
        return tf.reshape(views, shape), tf.repeat(y, 2)

    return batches_from_sampler(source, lambda: _permutations(n, batch, seed), batch, seed=seed,
                                map_fn=two_views)
