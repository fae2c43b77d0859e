"""The main job behind `keras-dml train`: data, model, fit, evaluate, save, plot, export."""

import contextlib
import dataclasses
import inspect
import json
import os
import shutil
import sys
import time
import warnings

import keras
import numpy as np

from keras_dml import backbones, backend, data, datasets, evaluation, fine_tuning, losses
from keras_dml.backend.augmentation import training_call
from keras_dml.callbacks import RecallAtK
from keras_dml.data.image_errors import clear_data_error
from keras_dml.data.preprocessing import default_preprocessing
from keras_dml.evaluation.collapse import TRAIN_CAUSES
from keras_dml.evaluation.embedding import embed_finite
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel
from keras_dml.training_config import (  # noqa: F401 (TrainConfig: re-exported)
    FILE_IMAGE_SIZE,
    LR_SCHEDULES,
    OWN_DATASETS,
    TrainConfig,
    own_files_options,
)

KS = (1, 2, 4, 8)
SUMMARY = "summary.json"
CLASS_NAMES = "class_names.json"
#: Written into a failed run's folder kept for `--resume` (one without a backup is removed).
FAILED = "failed.json"


def make_loss(name, loss_args=None, num_classes=None):
    """A keras_dml loss from its class name ("MultiSimilarity") or registered name.

    `loss_args` are its constructor arguments. A loss that requires `num_classes`
    (the proxy losses) gets `num_classes` (the training split's class count)
    unless `loss_args` sets it.
    """
    kwargs = dict(loss_args or {})
    short = name.split(">")[-1]
    cls = keras.saving.get_registered_object(f"keras_dml>{short}")
    if short not in losses.LOSSES or cls is None:
        raise ValueError(f"Unknown loss {name!r}: expected one of {list(losses.LOSSES)}.")
    required = inspect.signature(cls).parameters.get("num_classes")
    if required is not None and required.default is inspect.Parameter.empty:
        kwargs.setdefault("num_classes", num_classes)
    try:
        return cls(**kwargs)
    except TypeError as error:  # an unknown or missing argument in --loss-args
        raise ValueError(f"{short}: {error}; pass its arguments with --loss-args JSON.") from None


def adam(learning_rate, weight_decay=0.0):
    """Adam at `learning_rate` (a rate or schedule), or AdamW when `weight_decay` > 0."""
    if weight_decay:
        return keras.optimizers.AdamW(learning_rate, weight_decay=weight_decay)
    return keras.optimizers.Adam(learning_rate)


def learning_rate_schedule(learning_rate, total_steps, warmup_steps=0, schedule="constant"):
    """Adam's learning rate: constant, or cosine decay to 0 at `total_steps`; either
    after a linear warm-up from 0 over `warmup_steps`."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"schedule must be one of {LR_SCHEDULES}, got {schedule!r}.")
    if schedule == "constant" and not warmup_steps:
        return learning_rate
    decay_steps = max(total_steps - warmup_steps, 1) if schedule == "cosine" else 10 ** 12
    if not warmup_steps:
        return keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps)
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps, warmup_target=learning_rate, warmup_steps=warmup_steps)


def augmentation(shift=0.0, rotation=0.0, scale=0.0, image_size=None, seed=0):
    """A per-image random affine jitter of training batches, or None when all are 0.

    shift: translation up to this many pixels (of `image_size`); rotation: up to this
    many degrees; scale: zoom up to this fraction. Empty space is filled with 0.
    """
    if not (shift or rotation or scale):
        return None
    layers = []
    if rotation:
        layers.append(keras.layers.RandomRotation(rotation / 360.0, fill_mode="constant",
                                                  seed=seed))
    if scale:
        layers.append(keras.layers.RandomZoom((-scale, scale), fill_mode="constant", seed=seed))
    if shift:
        if not image_size:
            raise ValueError("augmentation: a shift in pixels needs the image size.")
        layers.append(keras.layers.RandomTranslation(shift / image_size, shift / image_size,
                                                     fill_mode="constant", seed=seed))
    return keras.Sequential(layers, name="augmentation")


def _input_spec(split, image_size, backbone="cnn3", crop="random"):
    """(input shape, Preprocessing or None) for a split held in memory or in files.

    Image files are resized to 256/224 x the image size (the papers' 256 for 224)
    and cropped; a Keras Applications `backbone` gets pixels in [0, 255] (its own
    preprocessing runs inside the model), the others [0, 1]."""
    if split.images is not None:
        shape = np.asarray(split.images).shape[1:]
        if len(shape) == 2:
            shape += (1,)
        if image_size:
            shape = (image_size, image_size, shape[-1])
        return shape, None
    preprocessing = default_preprocessing(
        image_size or FILE_IMAGE_SIZE, crop=crop,
        normalization="none" if backbones.is_application(backbone) else "unit")
    return (preprocessing.image_size, preprocessing.image_size, preprocessing.channels), \
        preprocessing


def array_transform(split, input_shape, pixel_max=1.0):
    """Batch transform for in-memory images: float32 in [0, pixel_max], resized to
    `input_shape`.

    uint8 images (Omniglot) are scaled by pixel_max/255; float images (taken to be
    in [0, 1]) by pixel_max. The same function serves training batches and
    evaluation, so both see one scale. A Keras Applications backbone wants
    `pixel_max=255`.
    """
    uint8 = np.asarray(split.images).dtype == np.uint8
    scale = pixel_max / 255.0 if uint8 else pixel_max
    size = tuple(input_shape[:2])
    if not backend.is_tensorflow():
        return _numpy_array_transform(scale, size)
    tf = backend.require_tensorflow("array_transform")

    def transform(x, y):
        x = tf.cast(x, tf.float32) * scale
        if x.shape.rank == 3:
            x = x[..., tf.newaxis]
        if tuple(x.shape[1:3]) != size:
            x = tf.image.resize(x, size, antialias=True)
        return x, y

    return transform


def _numpy_array_transform(scale, size):
    """`array_transform` on NumPy batches (`ClassBalancedPyDataset`, off TensorFlow)."""

    def transform(x, y):
        x = np.asarray(x, np.float32) * np.float32(scale)
        if x.ndim == 3:
            x = x[..., np.newaxis]
        if tuple(x.shape[1:3]) != size:
            x = keras.ops.convert_to_numpy(keras.ops.image.resize(x, size, antialias=True))
        return x, y

    return transform


def _augmented(transform, config, input_shape):
    """The training batches' map: `transform`, then the configured augmentation."""
    augment = augmentation(config.augment_shift, config.augment_rotation, config.augment_scale,
                           input_shape[0], config.seed)
    if augment is None:
        return transform
    augment_batch = (lambda x: augment(x, training=True)) if backend.is_tensorflow() else \
        training_call(augment)  # NumPy batches: jitted on JAX

    def map_fn(x, y):
        if transform is not None:
            x, y = transform(x, y)
        return augment_batch(x), y

    return map_fn


def build_model(config, input_shape, weights=None):
    """The run's `DMLModel`: `config.backbone` with `weights` (defaults to
    `config.weights`), BatchNorm frozen if `config.freeze_bn`, an `EmbeddingHead`.

    From a keras-dml run or `.keras` model (a warm start) the head's weights are
    also taken when their shapes match (same embedding size and features), so the
    run continues from the same embedding; the proxies are not (new classes).
    """
    keras.utils.set_random_seed(config.seed)
    weights = config.weights if weights is None else weights
    source = None if weights in ("none", "imagenet") else backbones.load_source(weights)
    backbone = backbones.get(config.backbone, input_shape, weights=weights,
                             width=config.width, source=source)
    if config.freeze_bn:
        fine_tuning.freeze_batch_norm(backbone)
    embeddings = EmbeddingHead(config.embedding_dim, name="embedding")(backbone.output)
    model = DMLModel(backbone.input, embeddings, name=f"{config.backbone}_embedder")
    if source is not None:
        _warm_start_head(model, source, weights)
    return model


def compile_model(model, config, num_classes, loss=None, jit_compile=None):
    """Compile `model` as `keras-dml train` does: `config`'s loss (or `loss`, a name,
    with its default arguments), wrapped in a `CrossBatchMemory` if `config` asks,
    Adam(W) on `config`'s learning-rate schedule, and the step compiled as
    `step_jit_compile(config.jit_compile)` says (or `jit_compile`)."""
    loss = make_loss(config.loss, config.loss_args, num_classes) if loss is None else \
        make_loss(loss, num_classes=num_classes)
    if config.memory_size:
        loss = losses.CrossBatchMemory(loss, config.memory_size, config.memory_warmup,
                                       include_batch_loss=config.memory_batch_loss,
                                       momentum=config.memory_momentum)
    rate = learning_rate_schedule(config.learning_rate, config.epochs * config.steps_per_epoch,
                                  config.warmup_steps, config.lr_schedule)
    jit_compile = step_jit_compile(config.jit_compile) if jit_compile is None else jit_compile
    model.compile(optimizer=adam(rate, config.weight_decay), loss=loss, jit_compile=jit_compile)


def step_jit_compile(requested):
    """The `jit_compile` of the run's training step: XLA on TensorFlow when `requested`
    (`--jit-compile`; its graph step is faster on a CPU without it); on JAX always, since
    Keras runs an un-jitted JAX step op by op (the main job's step took 4.8x TensorFlow's
    that way, 2026-11-28); on PyTorch when `requested` (`torch.compile`)."""
    return True if backend.name() == "jax" else bool(requested)


def _warm_start_head(model, source, origin):
    """Copies the `embedding` head of `source` into `model` when the shapes match."""
    head = model.get_layer("embedding")
    try:
        backbones.copy_layer_weights(source, model, [head.name], origin)
    except ValueError as error:
        print(f"warm start: the embedding head starts afresh ({error})", flush=True)


def backbone_variables(model):
    """The trainable variables of `model`'s network before its `embedding` head."""
    head = {id(v) for v in model.get_layer("embedding").weights}
    encoder = {id(v) for v in model.encoder_variables()}  # not the proxies
    return [v for v in model.trainable_weights if id(v) in encoder and id(v) not in head]


@contextlib.contextmanager
def _dtype_policy(mixed_precision):
    """Keras' global dtype policy "mixed_float16" within (layers keep theirs)."""
    if not mixed_precision:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def evaluation_splits(splits):
    """(queries, references or None): In-Shop's query vs gallery, else leave-one-out on test."""
    if splits.query is not None and splits.gallery is not None:
        return splits.query, splits.gallery
    return splits.test, None


class Clock:
    """Wall and process CPU seconds per named phase (CPU time counts every thread)."""

    def __init__(self):
        self.phases = {}

    @contextlib.contextmanager
    def phase(self, name):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            before = self.phases.get(name, {"seconds": 0.0, "cpu_seconds": 0.0, "count": 0})
            self.phases[name] = {
                "seconds": before["seconds"] + time.perf_counter() - wall,
                "cpu_seconds": before["cpu_seconds"] + time.process_time() - cpu,
                "count": before["count"] + 1}

    def rounded(self):
        return {name: {k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()}
                for name, p in self.phases.items()}


class RunEvaluation(RecallAtK):
    """`RecallAtK` with the run's protocol, a progress bar, and the last embeddings kept.

    `evaluate_now()` returns the metrics (counts included) and keeps the query
    embeddings in `embeddings`; the epoch logs get `val_recall@1`, ... as from
    `RecallAtK`, and `history` starts with the untrained point (epoch -1) once
    `record_untrained` has been called.
    """

    def __init__(self, queries, references, preprocessing, transform, progress=True,
                 clock=None):
        def batches(split):
            if backend.is_tensorflow() or split.images is None:
                return data.evaluation_batches(split, preprocessing, transform=transform)
            return transform(split.images, np.asarray(split.labels, np.int32))  # NumPy

        super().__init__(batches(queries), ks=KS, verbose=0,
                         reference_data=None if references is None else batches(references))
        self.progress = progress
        self.collapse_causes = TRAIN_CAUSES
        self.clock = clock or Clock()
        self.embeddings = None
        self.full_results = {}

    def _embed(self, dataset, what):
        if not self.progress:
            return embed_finite(self._forward, dataset)
        print(f"embedding {what}", flush=True)
        started = time.time()
        embeddings, labels = embed_finite(self._forward, dataset, progress=True)
        print(f"embedded {len(labels):,} images in {time.time() - started:.1f} s", flush=True)
        return embeddings, labels

    def evaluate_now(self, model=None):
        """Embeds queries (and references) now; returns `retrieval_metrics`."""
        if model is not None:
            self.embed_with_model(model)
        with self.clock.phase("evaluation"):
            self.embeddings, labels = self._embed(self.validation_data, "the evaluation images")
            self.check_collapse(self.embeddings)
            references = reference_labels = None
            if self.reference_data is not None:
                references, reference_labels = self._embed(self.reference_data, "the gallery")
            self.full_results = evaluation.retrieval_metrics(
                self.embeddings, labels, references, reference_labels, ks=self.ks)
        return self.full_results

    def evaluate(self):
        results = self.evaluate_now()
        return {f"{self.prefix}{key}": value for key, value in results.items()
                if key not in ("num_queries", "num_excluded_queries")}

    def record_untrained(self, metrics):
        """Puts the untrained network's metrics first in `history` (as epoch -1)."""
        self.history["epoch"].insert(0, -1)
        for key, value in metrics.items():
            if key not in ("num_queries", "num_excluded_queries"):
                self.history.setdefault(f"{self.prefix}{key}", []).insert(0, value)


def _have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('figures skipped: matplotlib is not installed (pip install "keras_dml[plots]")')
        return False
    return True


def _have_tensorboard():
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print('TensorBoard logs skipped: pip install "keras_dml[tensorboard]" (the projector '
              "files are written)")
        return False
    if not backend.tensorflow_installed():  # Keras' callback writes with tf.summary
        print("TensorBoard logs skipped: Keras' TensorBoard callback needs TensorFlow (the "
              "projector files are written)")
        return False
    return True


#: The run's t-SNE map: points, iterations and OpenMP threads. One thread: on a busy
#: machine (TensorFlow's own thread pools, other jobs) t-SNE's OpenMP threads wait
#: for each other, and the map took 38-46 s with all of them.
TSNE_POINTS, TSNE_ITERATIONS, TSNE_THREADS = 1000, 500, 1


def write_plots(run_dir, recall_history, split, embeddings, steps_per_epoch):
    """Recall@K per step, a t-SNE map and a retrieval grid (of in-memory images or of
    the split's image files), each announced on a line as it is drawn."""
    from keras_dml import plots

    started = time.perf_counter()
    images = split.images if split.images is not None else split.paths
    figures = {
        "recall_curves": ("Recall@K curves", lambda path: plots.recall_curves(
            recall_history, path, steps_per_epoch=steps_per_epoch)),
        "tsne": (f"a t-SNE map of {min(len(embeddings), TSNE_POINTS):,} embeddings",
                 lambda path: plots.tsne_map(
                     embeddings, split.labels, path, max_points=TSNE_POINTS,
                     max_iter=TSNE_ITERATIONS, threads=TSNE_THREADS,
                     class_names=split.class_names)),
        "retrievals": ("a grid of top-5 retrievals", lambda path: plots.retrieval_grid(
            images, split.labels, embeddings, path, class_names=split.class_names)),
    }
    written = []
    for name, (what, draw) in figures.items():
        print(f"figures: drawing {what}", flush=True)
        draw(os.path.join(run_dir, f"{name}.png"))
        written.append(name)
    print(f"figures: {', '.join(f'{name}.png' for name in written)} drawn in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    return sorted(written)


def load_run_config(run):
    """The `TrainConfig` saved in a run directory (`keras-dml train --resume RUN`).

    `run` is the run directory, or its name under the default `runs/`.
    """
    run_dir = run if os.path.isdir(run) else os.path.join("runs", run)
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"--resume {run}: no {path}; pass the run directory of a keras-dml train run "
            "(runs/<name>).")
    with open(path) as f:
        values = json.load(f)  # JSON only: nothing the run folder holds is executed
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in values.items() if k in fields}
    values.update(runs_dir=os.path.dirname(os.path.abspath(run_dir)),
                  run_name=os.path.basename(os.path.abspath(run_dir)))
    return TrainConfig(**values)


def _backup_callback(run_dir, batches, resume):
    """Backs up every epoch to `<run>/backup` (atomic, see `keras_dml.backup`); None
    off TensorFlow (the backup records the tf.data stream's position)."""
    if not backend.is_tensorflow():
        if resume:
            raise ValueError(f"--resume needs the TensorFlow backend (KERAS_BACKEND="
                             f"tensorflow); this process runs Keras on {backend.name()}.")
        print(f"epoch backups skipped: --resume needs the TensorFlow backend (Keras runs on "
              f"{backend.name()} here)", flush=True)
        return None
    from keras_dml import distribute

    backup_dir = os.path.join(run_dir, "backup")
    if distribute.cluster_workers() > 1:
        return distribute.BackupAndRestore(backup_dir, stream=batches, double_checkpoint=True,
                                           delete_checkpoint=False)
    from keras_dml.backup import TrainingBackup, complete_backups

    if resume:
        backups = complete_backups(backup_dir)
        if not backups:
            raise FileNotFoundError(f"--resume: {backup_dir} holds no backup (the run was "
                                    "killed before its first epoch ended); start it again.")
        _drop_history_after(os.path.join(run_dir, "history.csv"), backups[-1][0])
    return TrainingBackup(backup_dir, stream=batches)


def _drop_history_after(path, epochs):
    """Keep the rows of the first `epochs` epochs in `history.csv`: a run killed after
    logging an epoch but before backing it up trains that epoch again on resume, and
    its row must not appear twice."""
    if not os.path.isfile(path):
        return
    with open(path, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    kept = lines[:1] + [line for line in lines[1:]
                        if line.split(",", 1)[0].strip().isdigit()
                        and int(line.split(",", 1)[0]) < epochs]
    if len(kept) != len(lines):
        with open(path, "w", newline="") as f:
            f.writelines(kept)


def _restore_recall_history(recall, backup):
    """After a resume, the recall curve also shows the epochs trained before the kill
    (their R@K are in the backup's history)."""
    restored = getattr(backup, "history", None) or {}
    epochs = len(restored.get("loss", []))
    if not epochs:
        return
    untrained = {k: v[:1] for k, v in recall.history.items()}  # epoch -1, if recorded
    recall.history = {"epoch": untrained.get("epoch", []) + list(range(epochs))}
    recall.history.update({k: untrained.get(k, []) + list(v) for k, v in restored.items()
                           if k.startswith("val_")})


def run_directory(config):
    """`(run_name, <runs_dir>/<run_name>)`; never an existing folder unless `overwrite`.

    A default name (`<dataset>-<loss>-<date>-<time>`) gets a `-2`, `-3`, ... suffix
    when taken; a given `run_name` that exists is an error unless `overwrite`.
    """
    if config.run_name is None:
        stem = f"{config.dataset}-{config.loss}-{time.strftime('%Y%m%d-%H%M%S')}"
        name, n = stem, 1
        while (os.path.exists(os.path.join(config.runs_dir, name))
               or os.path.exists(os.path.join(config.export_dir, name))):
            n += 1
            name = f"{stem}-{n}"
    else:
        name = config.run_name
    run_dir = os.path.join(config.runs_dir, name)
    if not _is_chief():  # one writer per run: the others keep their own logs
        from keras_dml import distribute

        return name, os.path.join(run_dir, distribute.task_name())
    if os.path.exists(run_dir) and not config.overwrite:
        raise FileExistsError(
            f"{run_dir} already exists; pass overwrite=True to replace it, or choose "
            "another run_name.")
    return name, run_dir


def _is_chief():
    """Whether this process writes the run (always, off TensorFlow: one process)."""
    if not backend.is_tensorflow():
        return True
    from keras_dml import distribute

    return distribute.is_chief()


def _strategy(name):
    """`distribute.make_strategy(name)` on TensorFlow; off it None (one device)."""
    if backend.is_tensorflow():
        from keras_dml import distribute

        return distribute.make_strategy(name)
    if name != "auto":
        raise ValueError(f"strategy={name!r} is tf.distribute's: it needs the TensorFlow "
                         f"backend (Keras runs on {backend.name()} here).")
    return None


def _training_batches(strategy, split, config, preprocessing, map_fn):
    """The C x k training stream: tf.data on TensorFlow (`distribute.training_batches`);
    off it NumPy batches of in-memory images (`data.ClassBalancedPyDataset`), or
    tf.data for image files (TensorFlow's decoders, where TensorFlow is installed)."""
    options = {"skip_bad_images": True} if config.skip_bad_images else {}
    if strategy is not None:
        from keras_dml import distribute

        return distribute.training_batches(
            strategy, split, config.classes_per_batch, config.samples_per_class,
            seed=config.seed, preprocessing=preprocessing, map_fn=map_fn, **options)
    if split.images is not None:
        return data.ClassBalancedPyDataset(split.images, split.labels, config.classes_per_batch,
                                           config.samples_per_class, seed=config.seed,
                                           map_fn=map_fn)
    backend.require_tensorflow("training on image files (TensorFlow's decoders)")
    return data.class_balanced_batches(
        split, config.classes_per_batch, config.samples_per_class, seed=config.seed,
        preprocessing=preprocessing, num_replicas=1, **options)


def _make_run_directory(run_dir, replace):
    """Creates `run_dir`; `replace` (an `overwrite` of a folder found at the start)
    removes the old one first."""
    if replace and os.path.isdir(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir, exist_ok=True)


class ConsoleReport:
    """What `keras-dml train` prints: the settings, progress bars, R@K, a closing summary."""

    progress = True

    def start(self, config, splits, run_dir):
        train, test = splits.train, evaluation_splits(splits)[0]
        print(f"{config.dataset}: {train.num_classes} training classes ({len(train)} images), "
              f"{test.num_classes} test classes ({len(test)} images)")
        width = "" if config.width is None else f" (width {config.width})"
        if config.weights != "none":
            width += f" from {config.weights}"
        print(f"{config.backbone}{width}, {config.embedding_dim}-d, {config.loss}; batches of "
              f"{config.classes_per_batch} classes x {config.samples_per_class}; "
              f"{config.epochs} epochs x {config.steps_per_epoch} steps; run: {run_dir}",
              flush=True)

    def metrics(self, title, metrics):
        print(metrics_row(title, metrics), flush=True)

    def finish(self, summary):
        print()
        print(metrics_table(summary["recall_before"], summary["recall_after"]))
        minutes, seconds = divmod(round(summary["seconds"]), 60)
        print(f"time: {minutes} min {seconds:02d} s (training {summary['train_seconds']:.0f} s)")
        run_dir = summary["run_dir"]
        files = ", ".join(sorted(os.listdir(run_dir)))
        print(f"run:        {run_dir}/ ({files})")
        if summary.get("export_dir"):
            print(f"SavedModel: {summary['export_dir']}")
        skipped = summary.get("skipped_images") or []
        if skipped:
            print(f"skipped {len(skipped)} unreadable image(s) (summary.json lists them): "
                  f"{'; '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''}")
        if summary.get("verdict"):
            print(f"WARNING: {summary['verdict']}.", flush=True)


def metrics_row(title, metrics, ks=KS):
    """One printed line: `title`, then Recall@K for each K and MAP@R, in %."""
    row = "  ".join(f"R@{k} {100 * metrics[f'recall@{k}']:5.1f}" for k in ks)
    return f"{title:<16}{row}  MAP@R {100 * metrics['map@r']:5.1f}"


def metrics_table(before, after, ks=KS):
    """Recall@K and MAP@R (%) before and after training, and the gain."""
    keys = [f"recall@{k}" for k in ks] + ["map@r"]
    heads = [f"R@{k}" for k in ks] + ["MAP@R"]
    lines = [f"{'':<17}" + "".join(f"{h:>7}" for h in heads)]
    for title, values in (("before training", before), ("after training", after)):
        lines.append(f"{title:<17}" + "".join(f"{100 * values[k]:7.1f}" for k in keys))
    lines.append(f"{'gain':<17}" + "".join(f"{100 * (after[k] - before[k]):+7.1f}" for k in keys))
    return "\n".join(lines)


def _fit_verbose(report):
    """Keras' progress bar on a terminal, one line per epoch otherwise; none when silent."""
    if not getattr(report, "progress", False):
        return 0
    return 1 if sys.stdout.isatty() else 2


def run(config, report=None, resume=False):
    """Train and evaluate as `config` says; return a summary dict (also saved as JSON).

    Every epoch is backed up to `<run>/backup`; `resume=True` continues the run in
    `config.runs_dir/config.run_name` from its last backup (model, optimizer,
    proxies, sampler position, epoch, history), then evaluates, plots and exports.

    Args:
        config: A `TrainConfig`.
        report: Optional `ConsoleReport`-like object (`start`, `metrics`, `finish`,
            `progress`). Defaults to None: silent.
        resume: Continue the run `config` names (see `load_run_config`).
    """
    started, clock = time.time(), Clock()
    if resume:
        run_name = config.run_name
        run_dir = os.path.join(config.runs_dir, run_name)
        replace = False
    else:
        run_name, run_dir = run_directory(config)  # refuse before any work
        replace = os.path.exists(run_dir)
    with clock.phase("load"):
        splits = datasets.load(config.dataset, data_dir=config.data_dir,
                               **own_files_options(config.dataset, config.test_classes))
        if config.rotated_classes:
            splits = dataclasses.replace(splits, train=splits.train.with_rotated_classes())
    check_meaningful(config, splits)
    input_shape, preprocessing = _input_spec(splits.train, config.image_size, config.backbone,
                                             config.augment_crop)
    strategy = _strategy(config.strategy)
    scope = contextlib.nullcontext() if strategy is None else strategy.scope()
    with scope, _dtype_policy(config.mixed_precision):
        # a resumed run's backup restores every weight: nothing to download or load
        model = build_model(config, input_shape, weights="none" if resume else None)
        compile_model(model, config, splits.train.num_classes)
    if not _is_chief():
        config = dataclasses.replace(config, export=False, plots=False)
    pixel_max = 255.0 if backbones.is_application(config.backbone) else 1.0
    transform = None if preprocessing else array_transform(splits.train, input_shape,
                                                           pixel_max)
    skips_before = _skipped_images()  # the run's skipped files: the ones added from here
    batches = _training_batches(  # before the run folder: a bad design fails fast
        strategy, splits.train, config, preprocessing,
        _augmented(transform, config, input_shape))
    _make_run_directory(run_dir, replace)
    with _failure_kept_or_removed(run_dir, resume):
        if not resume:
            with open(os.path.join(run_dir, "config.json"), "w") as f:
                json.dump(dataclasses.asdict(config), f, indent=2)
            with open(os.path.join(run_dir, CLASS_NAMES), "w") as f:  # label i is names[i]
                json.dump({"train": splits.train.class_names, "test": splits.test.class_names}, f)
        backup = _backup_callback(run_dir, batches, resume)
        if report:
            report.start(config, splits, run_dir)

        queries, references = evaluation_splits(splits)
        if config.skip_bad_images:  # one decode pass: the figures and projector then agree
            queries, references = (_readable(split) for split in (queries, references))
        recall = RunEvaluation(queries, references, preprocessing, transform,
                               progress=bool(report and report.progress), clock=clock)
        before = recall.evaluate_now(model)
        recall.record_untrained(before)
        if report:
            report.metrics("before training", before)
        callbacks = [recall, keras.callbacks.CSVLogger(os.path.join(run_dir, "history.csv"),
                                                       append=resume)]
        callbacks += [] if backup is None else [backup]
        log_dir = os.path.join(run_dir, "tensorboard")
        if _have_tensorboard():
            callbacks.append(keras.callbacks.TensorBoard(log_dir))
        callbacks.append(keras.callbacks.LambdaCallback(  # after `backup` has restored
            on_train_begin=lambda logs=None: _restore_recall_history(recall, backup)))
        if config.head_warmup_steps or config.backbone_lr_multiplier != 1.0:
            callbacks.append(fine_tuning.BackboneStepScale(
                backbone_variables(model), config.backbone_lr_multiplier,
                config.head_warmup_steps))
        with clock.phase("fit"):  # training steps + the evaluation after each epoch
            try:
                history = model.fit(batches, epochs=config.epochs,
                                    steps_per_epoch=config.steps_per_epoch, callbacks=callbacks,
                                    verbose=_fit_verbose(report), shuffle=False)
            except Exception as error:  # a bad image file: the message names it
                clear = clear_data_error(error)
                if clear is None:
                    raise
                raise clear from None
        full_history = getattr(backup, "history", None) or history.history
        per_evaluation = clock.phases["evaluation"]["seconds"] / clock.phases["evaluation"]["count"]
        train_seconds = clock.phases["fit"]["seconds"] - config.epochs * per_evaluation
        after, embeddings = recall.full_results, recall.embeddings
        if report:
            report.metrics("after training", after)

        model_path = os.path.join(run_dir, "model.keras")
        with clock.phase("save"):
            model.save(model_path)
        summary = {
            "config": dataclasses.asdict(config),
            "run_name": run_name,
            "run_dir": run_dir,
            "model": model_path,
            "recall_before": before,
            "recall_after": after,
            "loss_history": [float(v) for v in full_history.get("loss", [])],
            "seconds": None,
            "train_seconds": round(train_seconds, 1),
            "export": {"base_dir": os.path.join(config.export_dir, run_name),
                       "input_format": "images" if preprocessing is None else "image_bytes",
                       "preprocessing": None if preprocessing is None else preprocessing.to_dict()},
            "export_dir": None,
            "plots": [],
            "skipped_images": _skipped_images(skips_before) + [
                f"test image {path!r}" for split in (queries, references) if split is not None
                for path, reason in split.skipped if reason == "undecodable"],
            "verdict": run_verdict(before, after, chance_recall(queries, references)),
        }
        from keras_dml.projector import write_projector

        with clock.phase("projector"):  # the evaluation set, for TensorBoard's projector
            thumbnails = backend.tensorflow_installed()  # resized and encoded by TensorFlow
            if not thumbnails:
                print("projector: no thumbnail sprite (it needs TensorFlow); vectors and labels "
                      "are written", flush=True)
            summary["projector"] = write_projector(
                log_dir, embeddings, queries.labels,
                images=queries.images if thumbnails else None,
                paths=None if queries.images is not None or not thumbnails else queries.paths,
                class_names=queries.class_names)["config"]
        if config.plots and _have_matplotlib():
            with clock.phase("plots"):
                summary["plots"] = write_plots(run_dir, recall.history, queries, embeddings,
                                               config.steps_per_epoch)
                from keras_dml.plots.report import write_run_report

                summary["report"] = write_run_report(run_dir, queries, embeddings, before, after)
                print(f"report: {summary['report']}", flush=True)
        if config.export and summary["verdict"] and not config.export_anyway:
            print(f"export skipped: {summary['verdict']} (--export-anyway exports it)",
                  flush=True)
        elif config.export and _can_export(run_dir):
            from keras_dml.export import export_embedder

            with clock.phase("export"):
                summary["export_dir"] = export_embedder(
                    model.embedder(), summary["export"]["base_dir"],
                    input_format=summary["export"]["input_format"], preprocessing=preprocessing,
                    run_info=_run_info(config, after, input_shape, preprocessing),
                )
        summary["seconds"] = round(time.time() - started, 1)
        summary["timings"] = clock.rounded()
        with open(os.path.join(run_dir, SUMMARY), "w") as f:
            json.dump(summary, f, indent=2, default=str)
        if report:
            report.finish(summary)
    return summary


def check_meaningful(config, splits):
    """Refuses, before any work, a run whose results would mean nothing (issue 52).

    A Keras Applications backbone from random weights (its BatchNorm moving averages
    lag the weights for thousands of steps: MobileNetV3Small on 30 CUB classes, 2 x 100
    steps, fell from R@1 10.2 to 3.4, chance, and to 3.5 with --freeze-bn); a test
    split of one class (every neighbour is right: Recall@K is 1); fewer training
    classes than a batch holds (named in the flags that fix it).
    """
    if backbones.is_application(config.backbone) and config.weights == "none":
        raise ValueError(
            f"backbone={config.backbone} with weights=none: a Keras Applications network "
            "from random weights collapses to chance-level retrieval at CPU budgets (its "
            "BatchNorm statistics lag the weights for thousands of steps). Start it from "
            "weights=imagenet (Keras' download or ~/.keras/models), a .weights.h5 file or an "
            "earlier run folder, or train backbone=cnn3 or convnet from scratch.")
    test = evaluation_splits(splits)[0]
    own = config.dataset in OWN_DATASETS
    if test.num_classes < 2:
        fix = (" hold out at least 2 classes (test_classes=2 or a larger fraction)" if own
               else " use a dataset whose test split has several classes")
        raise ValueError(f"The test split has {test.num_classes} class: every retrieved image "
                         f"is of the query's class, so Recall@K would read 100 and mean "
                         f"nothing;{fix}.")
    if splits.train.num_classes < config.classes_per_batch:
        fix = ("hold out fewer classes (test_classes) or lower classes_per_batch" if own
               else "lower classes_per_batch")
        raise ValueError(
            f"{splits.train.num_classes} training class(es) (of "
            f"{splits.train.num_classes + test.num_classes}) are fewer than "
            f"classes_per_batch={config.classes_per_batch}: {fix}.")


def chance_recall(queries, references=None):
    """Recall@1 of a random ranking: the chance that a random reference (another query
    of the set, leave-one-out, or an item of `references`) shares the query's class."""
    labels = np.asarray(queries.labels)
    if references is None:
        _, counts = np.unique(labels, return_counts=True)
        return float(np.sum(counts * (counts - 1)) / max(len(labels) * (len(labels) - 1), 1))
    gallery = np.asarray(references.labels)
    return float(np.mean([np.mean(gallery == label) for label in labels]))


def run_verdict(before, after, chance):
    """Why the trained model's Recall means nothing (a sentence), or "" when it is fine:
    Recall@1 at chance (within 1.5 times the random ranking's) or below where it started."""
    start, end = before["recall@1"], after["recall@1"]
    if end <= 1.5 * chance:
        return (f"Recall@1 {100 * end:.1f} is at chance (a random ranking scores "
                f"{100 * chance:.1f}): the model learned nothing usable")
    if end < start:
        return (f"Recall@1 fell from {100 * start:.1f} to {100 * end:.1f} in training: the "
                "model is worse than untrained")
    return ""


def _failure_kept_or_removed(run_dir, resume):
    """Context: when the run fails, its folder is removed if it holds nothing to resume
    (no epoch backup; a resumed run's is kept), else kept and marked `failed.json`
    (the error and the resume command). A success removes an old mark."""
    from keras_dml.backup import complete_backups

    marker = os.path.join(run_dir, FAILED)

    @contextlib.contextmanager
    def guarded():
        try:
            yield
        except BaseException as error:
            if not resume and not complete_backups(os.path.join(run_dir, "backup")):
                shutil.rmtree(run_dir, ignore_errors=True)
            else:
                with open(marker, "w") as f:
                    json.dump({"error": f"{type(error).__name__}: {error}",
                               "resume": f"keras-dml train --resume {run_dir}"}, f, indent=2)
            raise
        if os.path.exists(marker):
            os.remove(marker)

    return guarded()


def _readable(split):
    """`split` without its image files that cannot be read or decoded, each named on
    stderr (`data.verify_images`: they are listed in its `skipped`)."""
    if split is None or split.paths is None:
        return split
    with warnings.catch_warnings():  # its one-line count: each file is named below
        warnings.simplefilter("ignore", UserWarning)
        readable = data.verify_images(split)
    for path, _ in readable.skipped[len(split.skipped):]:
        print(f"keras_dml.data: skipping unreadable test image {path!r}", file=sys.stderr,
              flush=True)
    return readable


def _skipped_images(mark=None):
    """Without `mark`: a mark (the `BadImageGuard`s made so far). With one: the image
    files left out by `skip_bad_images` streams made since (none without TensorFlow)."""
    if not backend.tensorflow_installed():
        return 0 if mark is None else []
    from keras_dml.data import bad_images

    return bad_images.guards_made() if mark is None else bad_images.skipped_files(mark)


def _can_export(run_dir):
    """Whether this process can write the SavedModel export; if not, prints why."""
    if not backend.tensorflow_installed():
        print('export skipped: the SavedModel export needs TensorFlow, which is not '
              'installed (pip install "keras_dml[tensorflow]"); the run saved model.keras',
              flush=True)
        return False
    if not backend.is_tensorflow():
        print(f"export skipped: the SavedModel export traces the model in TensorFlow and "
              f"Keras runs on {backend.name()} here; export the saved model.keras with "
              f"KERAS_BACKEND=tensorflow keras-dml export {run_dir}", flush=True)
        return False
    return True


def _run_info(config, after, input_shape, preprocessing):
    pixels = "[0, 255]" if backbones.is_application(config.backbone) else "[0, 1]"
    return {"dataset": config.dataset, "loss": config.loss, "recall_after": after,
            "input": f"float32 images in {pixels} of shape " + str(tuple(input_shape))
            if preprocessing is None else "encoded images"}


def apply_run_defaults(args):
    """`keras-dml export` arguments completed from a `keras-dml train` run.

    `args.model` may be a run folder or the `model.keras` inside one: the model
    path, the base directory (`<export-dir>/<run>`), the input format and the
    preprocessing then default to the run's (its `summary.json`); options given
    on the command line take precedence. Other `.keras` files keep the export
    command's own defaults.
    """
    model = os.fspath(args.model)
    run_dir = model if os.path.isdir(model) else os.path.dirname(model)
    summary_path = os.path.join(run_dir, SUMMARY)
    if os.path.isdir(model):
        if not os.path.isfile(summary_path):
            raise ValueError(f"{model} is a folder without {SUMMARY}: give a keras-dml train "
                             "run folder or a .keras model file.")
        args.model = os.path.join(model, "model.keras")
    run = None
    if os.path.isfile(summary_path):
        with open(summary_path) as f:
            run = json.load(f).get("export")
    if run is None:
        if args.base_dir is None:
            raise ValueError("base_dir is required for a .keras file outside a keras-dml "
                             "train run (e.g. savedmodels/<name>).")
        args.input_format = args.input_format or "image_bytes"
        return args
    explicit = any(getattr(args, name, None) is not None for name in
                   ("preprocessing", "image_size", "resize_size", "channels",
                    "normalization", "resize_mode"))
    if args.base_dir is None:
        args.base_dir = run["base_dir"]
    if args.input_format is None:
        args.input_format = run["input_format"]
    if not explicit and run.get("preprocessing"):
        args.preprocessing = run["preprocessing"]
    return args
