"""Class-balanced C x k batches read per worker under `tf.distribute`.

Every input pipeline (one per worker) draws the global batch of step t from the
same seed with the same step-indexed sampler, so all workers agree on it: exactly the batch
`class_balanced_batches(..., seed=seed)` gives a single process. Each worker then
reads and decodes only its share: the contiguous slice of the class-major batch
that its replicas own (whole classes, `C / num_replicas` per replica). The
replicas' slices are disjoint, so no sample is drawn twice across workers in a
step, and the batch gathered by `DMLModel` is the single-process batch, in order.

Cost per worker and step: the index draw for the whole batch (O(C k) stateless TF
ops inside the pipeline) and the images of its own share only.
"""

import numpy as np

from keras_dml import backend, hyperparameters
from keras_dml.data.pipeline import StreamPosition, batches_from_indices, sampler_steps
from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.data.inputs import SAMPLES, as_data
from keras_dml.data.sources import DECODED_CACHE_MB, make_source

__all__ = ["distributed_class_balanced_batches", "replica_slices", "worker_stream_start"]

tf = backend.require_tensorflow("keras_dml.data.distributed_class_balanced_batches (tf.data)")

#: The attribute of a `distributed_class_balanced_batches` dataset holding its position.
_POSITION = "keras_dml_position"


def worker_stream_start(dataset):
    """The `StreamPosition` of a dataset made by `distributed_class_balanced_batches`
    (it carries it), else `None`. `keras_dml.training.distribute.BackupAndRestore` sets
    its `start` when it restores a backup, so the stream resumes where it stopped."""
    if not isinstance(dataset, tf.distribute.DistributedDataset):
        return None
    return getattr(dataset, _POSITION, None)


def replica_slices(global_batch, num_replicas, pipeline_id, num_pipelines):
    """`(start, stop, pieces)`: the slice of a global batch one input pipeline reads
    and the number of per-replica batches it is cut into (replicas are numbered
    worker-major, as `MultiWorkerMirroredStrategy` numbers them)."""
    if num_replicas % num_pipelines:
        raise ValueError(f"{num_replicas} replicas cannot be split evenly over "
                         f"{num_pipelines} input pipelines.")
    per_replica = global_batch // num_replicas
    pieces = num_replicas // num_pipelines
    start = pipeline_id * pieces * per_replica
    return start, start + pieces * per_replica, pieces


@hyperparameters.renamed_keywords(source="data")
def distributed_class_balanced_batches(strategy, data, classes_per_batch,
                                       samples_per_class, *, seed, small_classes="replace",
                                       preprocessing=None, training=True, map_fn=None,
                                       start_step=0, decoded_cache_mb=DECODED_CACHE_MB):
    """C x k class-balanced batches for `strategy`, each worker reading its share.

    The global batch of step t is the batch `class_balanced_batches(data, C, k,
    seed=seed)` yields at step t (same classes, same samples, same order), split
    over the `strategy.num_replicas_in_sync` replicas in whole classes. Each worker's
    pipeline (`strategy.distribute_datasets_from_function`) draws the global indices
    from the shared seed and reads only the images of its own replicas.

    Args:
        strategy: A `tf.distribute.Strategy` (MultiWorkerMirrored, Mirrored, ...).
        data: As for `class_balanced_batches`. `source=` is its deprecated name.
        classes_per_batch: C for the global batch; divisible by the number of
            replicas.
        samples_per_class: k.
        seed: Integer seed shared by all workers (required: without it the workers
            would draw different global batches).
        small_classes, preprocessing, training, map_fn, decoded_cache_mb: As for
            `class_balanced_batches`. Augmentation is seeded per replica batch, so
            augmented pixels differ from a single-process run; indices do not. A
            `map_fn(x, y, step)` gets `step * replicas + replica`, an id of its own
            for each replica's share of a step.
        start_step: Global step of the first batch. Defaults to 0.

    Returns:
        A `tf.distribute.DistributedDataset` for `model.fit` (infinite: pass
        `steps_per_epoch`), carrying its `StreamPosition` (`worker_stream_start`).
    """
    if seed is None or isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError("distributed_class_balanced_batches needs an integer seed shared "
                         f"by all workers (they draw the same global batch); got {seed!r}.")
    replicas = strategy.num_replicas_in_sync
    if classes_per_batch % replicas:
        raise ValueError(
            f"classes_per_batch={classes_per_batch} must be divisible by the number of "
            f"replicas ({replicas}) so each replica gets whole classes.")
    source = make_source(as_data(data, SAMPLES, "data"), preprocessing=preprocessing,
                         training=training, decoded_cache_mb=decoded_cache_mb)
    sampler = ClassBalancedSampler(source.labels, classes_per_batch, samples_per_class,
                                   small_classes=small_classes, seed=seed)
    global_batch = sampler.batch_size
    position = StreamPosition(start_step, seed, global_batch)

    def dataset_fn(context):
        start, stop, pieces = replica_slices(global_batch, context.num_replicas_in_sync,
                                             context.input_pipeline_id,
                                             context.num_input_pipelines)

        first = context.input_pipeline_id * pieces  # this pipeline's first replica

        def shares(step, batch):  # this pipeline's per-replica batches of global step `step`
            share = tf.reshape(batch[start:stop], [pieces, -1])
            replicas = first + tf.range(pieces, dtype=tf.int64)
            return step * context.num_replicas_in_sync + replicas, share

        indices = sampler_steps(sampler, position).map(shares).unbatch()
        # Distinct augmentation seeds per pipeline.
        worker_seed = int(np.random.SeedSequence([seed, context.input_pipeline_id])
                          .generate_state(1)[0] % (2 ** 31))
        return batches_from_indices(source, indices, seed=worker_seed, map_fn=map_fn)

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    setattr(dataset, _POSITION, position)
    return dataset
