"""`class_balanced_batches`: the C x k tf.data pipeline of the metric learning papers."""

import dataclasses
import sys
import warnings
import weakref

import numpy as np
import tensorflow as tf

from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.data.sources import make_source


def class_balanced_batches(source, classes_per_batch, samples_per_class, *,
                           small_classes="replace", seed=None, preprocessing=None,
                           training=True, map_fn=None, num_replicas=None, start_step=0):
    """An infinite `tf.data.Dataset` of `(x, y)` batches of C classes x k samples.

    Each batch holds exactly `classes_per_batch` distinct classes and
    `samples_per_class` distinct samples of each (see `ClassBalancedSampler`
    for the order: classes without replacement within an epoch over classes,
    samples likewise within a class). Indices are generated in NumPy (memory
    O(number of samples); no per-class datasets, so SOP's 11,318 classes are
    cheap); images are gathered (arrays) or read, decoded and augmented
    (files) one batch per parallel `map` call with `AUTOTUNE`, then
    prefetched.

    Distribution: batches are class-major (`x[c*k:(c+1)*k]` share a class),
    so when `strategy.experimental_distribute_dataset` splits the global batch
    C x k into contiguous per-replica slices, each replica receives
    `C / num_replicas` whole classes and the gathered batch is still C x k.
    `classes_per_batch` must therefore be divisible by the number of replicas.

    Bad files: a batch in which an image is missing or cannot be decoded is
    skipped (never a crash mid-epoch, never a shifted label) and a running
    count of skipped batches is printed to stderr. Use
    `keras_dml.data.verify_images` to find and drop such files up front.

    Args:
        source: In-memory `(x, y)` arrays; `(paths, labels)` with image file
            paths; a `keras_dml.datasets.LabeledImages` (arrays, or paths
            decoded lazily); or a `tf.data.Dataset` of `(x, y)` such as a tfds
            split (`as_supervised=True`), read once: fixed-shape `x` is held
            in memory, string `x` (tfds `decoders={"image":
            tfds.decode.SkipDecoding()}`) is held encoded and decoded per batch.
        classes_per_batch: C.
        samples_per_class: k.
        small_classes: `"replace"` (draw with replacement) or `"drop"` for
            classes with fewer than k samples; their count is warned about.
            Defaults to `"replace"`.
        seed: Seed for the index stream and the augmentation; the same seed
            gives the same stream. Defaults to `None`.
        preprocessing: `keras_dml.data.Preprocessing` applied to decoded
            files (defaults to `Preprocessing()`) or to in-memory images
            (defaults to none).
        training: `preprocessing.train` (random crop + flip) when True, else
            `preprocessing.eval`. Defaults to True.
        map_fn: Optional `map_fn(x, y) -> (x, y)` applied per batch in TF ops.
        num_replicas: Replicas the global batch is split over. Defaults to
            `None`: the current `tf.distribute` strategy's
            `num_replicas_in_sync`.
        start_step: Index of the first batch delivered: the stream is
            step-indexed, so with a `seed` batch `i` is the same whether the
            stream started at 0 or at `start_step <= i` (the sampler is replayed
            in NumPy, cheap). `keras_dml.backup.TrainingBackup` sets it on
            resume through `stream_position(dataset)`. Defaults to 0.

    Returns:
        An infinite `tf.data.Dataset` of `(x, y)`, `x` of shape
        `(C * k, ...)`, `y` int32 `(C * k,)`.

    Examples:

    >>> x = np.random.rand(100, 8, 8, 1).astype("float32")
    >>> y = np.repeat(np.arange(10), 10)
    >>> ds = class_balanced_batches((x, y), 4, 3, seed=0)
    >>> xb, yb = next(iter(ds))
    >>> xb.shape
    TensorShape([12, 8, 8, 1])

    Reference: Wang et al., ICE (section 4.1); Liu et al., "A unified view"
    (section 6, K instances per class).
    """
    if num_replicas is None:
        num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if classes_per_batch % num_replicas:
        raise ValueError(
            f"classes_per_batch={classes_per_batch} must be divisible by the "
            f"number of replicas ({num_replicas}) so each replica gets whole classes."
        )
    data = make_source(source, preprocessing=preprocessing, training=training)
    # Validate (and warn about small classes) now, not at the first iteration.
    ClassBalancedSampler(data.labels, classes_per_batch, samples_per_class,
                         small_classes=small_classes, seed=seed)

    def make_sampler():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ClassBalancedSampler(data.labels, classes_per_batch,
                                        samples_per_class, small_classes, seed)

    return batches_from_sampler(data, make_sampler,
                                classes_per_batch * samples_per_class,
                                seed=seed, map_fn=map_fn, start_step=start_step)


@dataclasses.dataclass
class StreamPosition:
    """Where a step-indexed batch stream starts; read each time iteration starts.

    Attributes:
        start: Index of the first batch the next iterator delivers.
        seed: The stream's seed (`None`: not reproducible, so a resume can
            only skip ahead, not replay the same batches).
        batch_size: Batch size, recorded to match a backup with its stream.
        replayable: False when the sampler depends on training (hard negative
            class mining): its batches cannot be regenerated from the seed.
    """

    start: int = 0
    seed: int | None = None
    batch_size: int | None = None
    replayable: bool = True


_POSITIONS = weakref.WeakKeyDictionary()


def stream_position(dataset):
    """The `StreamPosition` of a dataset made by `class_balanced_batches` (or
    the other keras_dml samplers), or `None` for any other dataset."""
    try:
        return _POSITIONS.get(dataset)
    except TypeError:
        return None


def batches_from_sampler(data, make_sampler, batch_size, seed=None, map_fn=None,
                         chunk=32, start_step=0, replayable=True):
    """Infinite `(x, y)` batches from an index sampler over a `Source`.

    Args:
        data: A `keras_dml.data.sources.Source`.
        make_sampler: Called at the start of each iteration of the dataset;
            returns an iterable of int index arrays of length `batch_size`.
        batch_size: Static batch size.
        seed: Augmentation seed (stateless, per batch id). Defaults to `None`.
        map_fn: Optional per-batch `map_fn(x, y) -> (x, y)`.
        chunk: Index batches handed over from Python at a time (amortises
            the generator's per-call cost). Use 1 when the sampler is steered
            while training (hard negative class mining). Defaults to 32.
        start_step: First batch index (see `StreamPosition`). Defaults to 0.
        replayable: Whether `make_sampler()` gives the same stream every time
            (False for a sampler steered while training). Defaults to True.

    Returns:
        A `tf.data.Dataset`. File sources skip batches that fail to decode and
        print a running count (see `class_balanced_batches`).
    """
    labels = tf.constant(data.labels.astype(np.int32))
    stream_seed = int(np.random.SeedSequence(seed).generate_state(1)[0])

    position = StreamPosition(int(start_step), seed, batch_size, replayable)

    def generate():
        sampler = iter(make_sampler())
        first = position.start
        for _ in range(first if replayable else 0):
            next(sampler)
        while True:
            block = np.stack([next(sampler) for _ in range(chunk)])
            yield np.arange(first, first + chunk, dtype=np.int64), block
            first += chunk

    ds = tf.data.Dataset.from_generator(
        generate,
        output_signature=(tf.TensorSpec([chunk], tf.int64),
                          tf.TensorSpec([chunk, batch_size], tf.int64)),
    ).unbatch()

    @tf.autograph.experimental.do_not_convert
    def build(batch_id, indices):
        aug_seed = None if seed is None else tf.stack(
            [tf.constant(stream_seed, tf.int64), batch_id])
        x = data.fetch(indices, aug_seed)
        y = tf.gather(labels, indices)
        if map_fn is not None:
            x, y = map_fn(x, y)
        return batch_id, x, y

    ds = ds.map(build, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if data.from_files:
        initial = (tf.constant(-1, tf.int64), tf.constant(0, tf.int64))
        ds = ds.ignore_errors().scan(initial, _count_skipped_batches)
    ds = ds.map(_drop_batch_id).prefetch(tf.data.AUTOTUNE)
    _POSITIONS[ds] = position
    return ds


@tf.autograph.experimental.do_not_convert
def _drop_batch_id(batch_id, x, y):
    return x, y


@tf.autograph.experimental.do_not_convert
def _count_skipped_batches(state, element):
    """Scan step: warns about gaps in the batch ids left by `ignore_errors`.

    State: `(last batch id, batches delivered)`.
    """
    last_id, delivered = state
    batch_id = element[0]
    gap = batch_id - last_id - 1

    def warn():
        tf.print("keras_dml.data: skipped", gap, "batch(es) with a missing or "
                 "undecodable image (total skipped:", batch_id - delivered,
                 "); keras_dml.data.verify_images finds the files.",
                 output_stream=sys.stderr)
        return gap

    tf.cond(gap > 0, warn, lambda: gap)
    return (batch_id, delivered + 1), element
