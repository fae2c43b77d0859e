"""`class_balanced_batches`: the C x k tf.data pipeline of the metric learning papers."""

import numpy as np

from keras_dml import backend, hyperparameters
from keras_dml.data.arrays import ClassBalancedPyDataset, _positional_parameters
from keras_dml.data.bad_images import BadImageGuard, only_x_y, refill
from keras_dml.data.options import steady
from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.data.stream import Stream
from keras_dml.data.inputs import SAMPLES, as_data
from keras_dml.data.sources import DECODED_CACHE_MB, make_source

__all__ = ["StreamPosition", "batches_from_indices", "batches_from_sampler", "batches_from_stream",
           "class_balanced_batches", "sampler_steps", "stream_position"]

tf = backend.require_tensorflow("keras_dml.data.class_balanced_batches (tf.data)")


@hyperparameters.renamed_keywords(source="data")
def class_balanced_batches(data, classes_per_batch, samples_per_class, *,
                           small_classes="replace", seed=None, preprocessing=None,
                           training=True, map_fn=None, num_replicas=None, start_step=0,
                           skip_bad_images=False, decoded_cache_mb=DECODED_CACHE_MB):
    """An infinite stream of `(x, y)` batches of C classes x k samples.

    Each batch holds exactly `classes_per_batch` distinct classes and
    `samples_per_class` distinct samples of each (see `ClassBalancedSampler`
    for the order: every class once per epoch over classes, samples in passes
    without replacement within a class). Batch `t` is drawn from `(seed, t)`
    by stateless TF ops inside the pipeline (no Python generator; memory
    O(number of samples), so SOP's 11,318 classes are cheap); images are
    gathered (arrays) or read, decoded and augmented (files) one batch per
    parallel `map` call with `AUTOTUNE`, then prefetched. Image files are
    decoded and resized once, on their first draw, when all their resized
    copies fit in `decoded_cache_mb` (the default crop; see that argument).

    Distribution: batches are class-major (`x[c*k:(c+1)*k]` share a class),
    so when `strategy.experimental_distribute_dataset` splits the global batch
    C x k into contiguous per-replica slices, each replica receives
    `C / num_replicas` whole classes and the gathered batch is still C x k.
    `classes_per_batch` must therefore be divisible by the number of replicas.

    Bad files: an image that is missing or cannot be decoded stops iteration
    with an error naming it (its index in the source and its path). With
    `skip_bad_images=True` the file is skipped instead, reported once on
    stderr: in its batch it is replaced by another image of its class (the
    batch stays C x k, labels never shift); a batch in which a class has no
    readable image is skipped, and if `bad_images.MAX_BAD_BATCHES_IN_A_ROW`
    (20) batches in a row are, the stream fails, naming the files, rather
    than hang. `keras_dml.data.bad_images.skipped_files` lists the files left out. Use
    `keras_dml.data.verify_images` to find and drop such files up front.

    Args:
        data: In-memory `(x, y)` arrays; `(paths, labels)` with image file
            paths; a `keras_dml.datasets.LabeledImages` (arrays, or paths
            decoded lazily); or a `tf.data.Dataset` of `(x, y)` such as a tfds
            split (`as_supervised=True`), read once: fixed-shape `x` is held
            in memory, string `x` (tfds `decoders={"image":
            tfds.decode.SkipDecoding()}`) is held encoded and decoded per batch.
            Labels are integer class ids or class names (strings), which
            become ids in sorted order: `np.unique(names)[y]` names a batch's
            `y`. `source=` is its deprecated name.
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
        map_fn: Optional `map_fn(x, y) -> (x, y)` applied per batch in TF ops; one
            with a third parameter is called `map_fn(x, y, step)` with the batch's
            stream index (an int64 scalar tensor), to key its random draws by step
            (`keras_dml.data.AffineJitter` does), as `ClassBalancedPyDataset` does.
        num_replicas: Replicas the global batch is split over. Defaults to
            `None`: the current `tf.distribute` strategy's
            `num_replicas_in_sync`.
        start_step: Index of the first batch delivered: the stream is
            step-indexed, so with a `seed` batch `i` is the same whether the
            stream started at 0 or at `start_step <= i` (batches are drawn from
            their step index: O(1) to skip). `keras_dml.callbacks.TrainingBackup` sets it on
            resume through `stream_position(data)`. Defaults to 0.
        skip_bad_images: Skip unreadable image files (each named once on
            stderr) instead of stopping with an error naming the first.
            Defaults to False.
        decoded_cache_mb: Image files with `training=True` and the
            `"random"` crop: when all the files' resized float32 images
            (`resize_size**2 * channels * 4` bytes each: 62 KiB at 73 x 73 x 3)
            fit in this many MiB, each file is read, decoded and resized once,
            on its first draw, and held; later draws only crop, flip and
            normalise it (the same values as decoding again). An unreadable
            file is never held. 0 decodes on every draw. Defaults to
            `keras_dml.data.sources.DECODED_CACHE_MB` (1024).

    Returns:
        An infinite `keras_dml.data.Stream` (a `tf.data.Dataset`, carrying its
        preprocessing, resume position and bad-image guard) of `(x, y)`, `x` of
        shape `(C * k, ...)`, `y` int32 `(C * k,)`. Labels of 2**24 or more in
        magnitude (hashed ids; not exact in float32, where Keras compares
        them) are replaced by dense ids `0..C-1`.

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
    source = make_source(as_data(data, SAMPLES, "data"), preprocessing=preprocessing,
                         training=training, decoded_cache_mb=decoded_cache_mb)
    sampler = ClassBalancedSampler(source.labels, classes_per_batch, samples_per_class,
                                   small_classes=small_classes, seed=seed)
    return batches_from_stream(source, sampler, seed=seed, map_fn=map_fn,
                               start_step=start_step, skip_bad_images=skip_bad_images)


class StreamPosition:
    """Where a step-indexed batch stream starts; read when iteration starts.

    Attributes:
        start: Index of the first batch the next iterator delivers (settable,
            e.g. by `keras_dml.callbacks.TrainingBackup` on resume).
        seed: The stream's seed (`None`: not reproducible, so a resume can
            only skip ahead, not replay the same batches).
        batch_size: Batch size, recorded to match a backup with its stream.
        replayable: False when the sampler depends on training (hard negative
            class mining): its batches cannot be regenerated from the seed.
    """

    def __init__(self, start=0, seed=None, batch_size=None, replayable=True):
        self.seed = seed
        self.batch_size = batch_size
        self.replayable = replayable
        with tf.init_scope():  # a variable read by the pipeline's map, not a model's
            self._start = tf.Variable(int(start), dtype=tf.int64, trainable=False,
                                      name="stream_start")

    @property
    def start(self):
        return int(self._start.numpy())

    @start.setter
    def start(self, value):
        self._start.assign(int(value))

    def first_step(self):
        """`start` as an int64 tensor, read when the pipeline runs (inside tf.data)."""
        return self._start.read_value()

    def steps(self):
        """An infinite dataset of the step indices `start, start + 1, ...`, with
        `start` read as the iterator delivers its elements (so setting `start`
        before iteration begins moves the stream)."""
        return tf.data.Dataset.counter(dtype=tf.int64).map(lambda n: n + self.first_step())


@hyperparameters.renamed_keywords(dataset="data")
def stream_position(data):
    """The `StreamPosition` of `data`, a `keras_dml.data.Stream` made by
    `class_balanced_batches` (or the other keras_dml samplers; after `.prefetch`,
    `.map` or `.repeat` too: see `Stream`), the `ArrayStreamPosition` of a
    `ClassBalancedPyDataset`, or `None` for any other value.
    `dataset=` is the deprecated name of `data=`."""
    if isinstance(data, (ClassBalancedPyDataset, Stream)):
        return data.position
    return None


def batches_from_stream(data, sampler, seed=None, map_fn=None, start_step=0,
                        skip_bad_images=False):
    """Infinite `(x, y)` batches from a step-indexed sampler over a `Source`.

    Args:
        data: A `keras_dml.data.sources.Source`.
        sampler: A `ClassBalancedSampler` (`sampler.batch(step)` in TF ops).
        seed: Augmentation seed, and the stream's recorded seed. Defaults to `None`.
        map_fn: Optional per-batch `map_fn(x, y) -> (x, y)`.
        start_step: First batch index (see `StreamPosition`). Defaults to 0.
        skip_bad_images: See `class_balanced_batches`. Defaults to False.
    """
    position = StreamPosition(start_step, seed, sampler.batch_size)
    indices = sampler_steps(sampler, position)
    return batches_from_indices(data, indices, seed=seed, map_fn=map_fn,
                                skip_bad_images=skip_bad_images).carrying(position=position)


def sampler_steps(sampler, position):
    """The infinite dataset of `(step, sampler.batch(step))` for the steps of `position`
    (`start`, `start + 1`, ...; `start` read as iteration starts), drawn a whole epoch
    at a time (`sampler.epoch`): the classes and their samples are sorted once per
    epoch, not once per batch.

    Args:
        sampler: A `ClassBalancedSampler`.
        position: The stream's `StreamPosition`.
    """
    per_epoch = sampler.batches_per_epoch

    def epoch_batches(number):  # the `number`-th epoch from the one holding `start`
        epoch = position.first_step() // per_epoch + number
        steps = epoch * per_epoch + tf.range(per_epoch, dtype=tf.int64)
        return steps, sampler.epoch(epoch)

    # unbatch and filter hide the counter's endlessness from tf.data: state it again, so
    # that evaluation refuses this stream as infinite (inference.finite_dataset).
    return (tf.data.Dataset.counter(dtype=tf.int64).map(epoch_batches).unbatch()
            .filter(lambda step, _: step >= position.first_step())
            .apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY)))


def batches_from_sampler(data, make_sampler, batch_size, seed=None, map_fn=None,
                         chunk=32, start_step=0, replayable=True, skip_bad_images=False):
    """Infinite `(x, y)` batches from a Python index sampler over a `Source`.

    For samplers steered while training (hard negative class mining) or
    written in NumPy (the papers' pair designs). Prefer a step-indexed TF
    sampler (`class_balanced_batches`): a Python generator inside `tf.data`
    slows every training step of the process (benchmarks/README.md).

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
        skip_bad_images: See `class_balanced_batches`. Defaults to False.

    Returns:
        A `keras_dml.data.Stream` (see `class_balanced_batches` for bad files).
    """
    position = StreamPosition(start_step, seed, batch_size, replayable)

    def generate():
        sampler = iter(make_sampler())
        first = position.start
        for _ in range(first if replayable else 0):
            next(sampler)
        while True:
            block = np.stack([next(sampler) for _ in range(chunk)])
            yield np.arange(first, first + chunk, dtype=np.int64), block
            first += chunk

    indices = tf.data.Dataset.from_generator(
        generate,
        output_signature=(tf.TensorSpec([chunk], tf.int64),
                          tf.TensorSpec([chunk, batch_size], tf.int64)),
    ).unbatch()
    return batches_from_indices(data, indices, seed=seed, map_fn=map_fn,
                                skip_bad_images=skip_bad_images).carrying(position=position)


def batches_from_indices(data, indices, seed=None, map_fn=None, skip_bad_images=False):
    """`(x, y)` batches from a dataset of `(batch_id, sample_indices)` over a `Source`.

    Images are gathered (arrays) or read, decoded and augmented (files) one
    batch per parallel `map` call, then prefetched. Augmentation is seeded
    statelessly by `(seed, batch_id)`.

    Args:
        data: A `keras_dml.data.sources.Source`.
        indices: `tf.data.Dataset` of `(batch_id, indices)`: scalar int64 and
            `(batch_size,)` int64.
        seed: Augmentation seed. Defaults to `None`.
        map_fn: Optional per-batch `map_fn(x, y) -> (x, y)`, or `map_fn(x, y, batch_id)`
            (see `class_balanced_batches`).
        skip_bad_images: See `class_balanced_batches`. Defaults to False.

    Returns:
        A `keras_dml.data.Stream` carrying `data`'s preprocessing and, for image
        files, its `BadImageGuard` (no position: the callers add theirs).
    """
    labels = tf.constant(data.labels.astype(np.int32))
    stream_seed = int(np.random.SeedSequence(seed).generate_state(1)[0])

    @tf.autograph.experimental.do_not_convert
    def build(batch_id, indices):
        aug_seed = None if seed is None else tf.stack(
            [tf.constant(stream_seed, tf.int64), batch_id])
        x, ok = data.fetch(indices, aug_seed)
        y = tf.gather(labels, indices)
        if skip:
            x, usable = refill(x, y, ok)
        if map_takes_step:
            x, y = map_fn(x, y, batch_id)
        elif map_fn is not None:
            x, y = map_fn(x, y)
        return (batch_id, indices, ok) + ((usable,) if skip else ()) + (x, y)

    skip = skip_bad_images and data.from_files
    map_takes_step = map_fn is not None and _positional_parameters(map_fn) >= 3
    ds = indices.map(build, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    guard = None
    if data.from_files:
        guard = BadImageGuard(data.describe, skip=skip_bad_images, paths=data.paths)
        ds = guard.stream(ds)
    else:
        ds = ds.map(only_x_y).prefetch(tf.data.AUTOTUNE)
    return Stream(steady(ds), preprocessing=data.preprocessing, guard=guard)
