"""The main job behind `keras-dml train`: data, model, fit, evaluate, save, export."""

import dataclasses
import inspect
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_dml import backbones, data, datasets, distribute, evaluation, losses
from keras_dml.callbacks import RecallAtK
from keras_dml.data.bad_images import clear_error
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel

KS = (1, 2, 4, 8)
LR_SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass
class TrainConfig:
    dataset: str = "digits"
    data_dir: str = None
    image_size: int = None
    classes_per_batch: int = 5
    samples_per_class: int = 16
    backbone: str = "convnet"
    embedding_dim: int = 64
    loss: str = "MultiSimilarity"
    loss_args: dict = dataclasses.field(default_factory=dict)
    epochs: int = 4
    steps_per_epoch: int = 25
    learning_rate: float = 1e-3
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    augment_shift: float = 0.0
    augment_rotation: float = 0.0
    augment_scale: float = 0.0
    seed: int = 0
    jit_compile: bool = False
    strategy: str = "auto"
    run_name: str = None
    runs_dir: str = "runs"
    export_dir: str = "savedmodels"
    export: bool = True
    plots: bool = True
    skip_bad_images: bool = False

    def __post_init__(self):
        for field in ("epochs", "steps_per_epoch"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, got {value!r}.")
        if not (self.learning_rate > 0 and np.isfinite(self.learning_rate)):
            raise ValueError(f"learning_rate must be positive and finite, got "
                             f"{self.learning_rate!r}.")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"--lr-schedule must be one of {LR_SCHEDULES}, got "
                             f"{self.lr_schedule!r}.")
        for field in ("warmup_steps", "augment_shift", "augment_rotation", "augment_scale"):
            value = getattr(self, field)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"--{field.replace('_', '-')} must be >= 0, got {value!r}.")

    @classmethod
    def from_args(cls, args):
        try:
            loss_args = json.loads(args.loss_args)
        except json.JSONDecodeError as error:
            raise ValueError(f"--loss-args must be a JSON object: {error}") from None
        if not isinstance(loss_args, dict):
            raise ValueError(f"--loss-args must be a JSON object, got {args.loss_args!r}.")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in vars(args).items() if k in fields}
        values.update(loss_args=loss_args, export=not args.no_export, plots=not args.no_plots)
        return cls(**values)


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


def _input_spec(split, image_size):
    """(input shape, Preprocessing or None) for a split held in memory or in files."""
    if split.images is not None:
        shape = np.asarray(split.images).shape[1:]
        if len(shape) == 2:
            shape += (1,)
        if image_size:
            shape = (image_size, image_size, shape[-1])
        return shape, None
    preprocessing = data.Preprocessing(image_size=image_size or 224)
    return (preprocessing.image_size, preprocessing.image_size, preprocessing.channels), \
        preprocessing


def array_transform(split, input_shape):
    """Batch transform for in-memory images: float32 in [0, 1], resized to `input_shape`.

    uint8 images (Omniglot) are scaled by 1/255; float images are kept as they are.
    The same function serves training batches and evaluation, so both see one scale.
    """
    scale = 1.0 / 255.0 if np.asarray(split.images).dtype == np.uint8 else 1.0
    size = tuple(input_shape[:2])

    def transform(x, y):
        x = tf.cast(x, tf.float32) * scale
        if x.shape.rank == 3:
            x = x[..., tf.newaxis]
        if tuple(x.shape[1:3]) != size:
            x = tf.image.resize(x, size, antialias=True)
        return x, y

    return transform


def _augmented(transform, config, input_shape):
    """The training batches' map: `transform`, then the configured augmentation."""
    augment = augmentation(config.augment_shift, config.augment_rotation, config.augment_scale,
                           input_shape[0], config.seed)
    if augment is None:
        return transform

    def map_fn(x, y):
        if transform is not None:
            x, y = transform(x, y)
        return augment(x, training=True), y

    return map_fn


def build_model(config, input_shape):
    keras.utils.set_random_seed(config.seed)
    backbone = backbones.get(config.backbone, input_shape)
    embeddings = EmbeddingHead(config.embedding_dim, name="embedding")(backbone.output)
    return DMLModel(backbone.input, embeddings, name=f"{config.backbone}_embedder")


def evaluation_splits(splits):
    """(queries, references or None): In-Shop's query vs gallery, else leave-one-out on test."""
    if splits.query is not None and splits.gallery is not None:
        return splits.query, splits.gallery
    return splits.test, None


def evaluate(model, splits, preprocessing, transform=None):
    """(retrieval metrics, query embeddings) with the dataset's evaluation protocol."""
    queries, references = evaluation_splits(splits)

    def embed(split):
        return evaluation.embed_dataset(
            model, data.evaluation_batches(split, preprocessing, transform=transform))

    embeddings, labels = embed(queries)
    if references is None:
        return evaluation.retrieval_metrics(embeddings, labels, ks=KS), embeddings
    gallery, gallery_labels = embed(references)
    metrics = evaluation.retrieval_metrics(embeddings, labels, gallery, gallery_labels, ks=KS)
    return metrics, embeddings


def _have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("figures skipped: matplotlib is not installed (pip install 'keras_dml[plots]')")
        return False
    return True


def _have_tensorboard():
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print("TensorBoard logs skipped: pip install tensorboard (projector files are written)")
        return False
    return True


def write_plots(run_dir, recall_callback, split, embeddings):
    """Recall@K per epoch, a t-SNE map and (for in-memory images) a retrieval grid."""
    from keras_dml import plots

    written = {
        "recall_curves": plots.recall_curves(
            recall_callback, os.path.join(run_dir, "recall_curves.png")),
        "tsne": plots.tsne_map(embeddings, split.labels, os.path.join(run_dir, "tsne.png")),
    }
    if split.images is not None:
        written["retrievals"] = plots.retrieval_grid(
            split.images, split.labels, embeddings, os.path.join(run_dir, "retrievals.png"))
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
    """Backs up every epoch to `<run>/backup` (atomic, see `keras_dml.backup`)."""
    backup_dir = os.path.join(run_dir, "backup")
    if distribute.cluster_workers() > 1:
        return distribute.BackupAndRestore(backup_dir, stream=batches, double_checkpoint=True,
                                           delete_checkpoint=False)
    from keras_dml.backup import TrainingBackup, complete_backups

    if resume and not complete_backups(backup_dir):
        raise FileNotFoundError(f"--resume: {backup_dir} holds no backup (the run was killed "
                                "before its first epoch ended); start it again.")
    return TrainingBackup(backup_dir, stream=batches)


def _restore_recall_history(recall, backup):
    """After a resume, the recall curve also shows the epochs trained before the kill
    (their R@K are in the backup's history)."""
    restored = getattr(backup, "history", None) or {}
    epochs = len(restored.get("loss", []))
    if not epochs:
        return
    recall.history = {"epoch": list(range(epochs))}
    recall.history.update({k: list(v) for k, v in restored.items() if k.startswith("val_")})


def run(config, report=None, resume=False):
    """Train and evaluate as `config` says; return a summary dict (also saved as JSON).

    Every epoch is backed up to `<run>/backup`; `resume=True` continues the run in
    `config.runs_dir/config.run_name` from its last backup (model, optimizer,
    proxies, sampler position, epoch, history), then evaluates, plots and exports.
    """
    started = time.time()
    splits = datasets.load(config.dataset, data_dir=config.data_dir)
    input_shape, preprocessing = _input_spec(splits.train, config.image_size)
    strategy = distribute.make_strategy(config.strategy)
    with strategy.scope():
        model = build_model(config, input_shape)
        loss = make_loss(config.loss, config.loss_args, num_classes=splits.train.num_classes)
        rate = learning_rate_schedule(config.learning_rate,
                                      config.epochs * config.steps_per_epoch,
                                      config.warmup_steps, config.lr_schedule)
        model.compile(optimizer=keras.optimizers.Adam(rate), loss=loss,
                      jit_compile=config.jit_compile)

    run_name = config.run_name or f"{config.dataset}-{config.loss}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = os.path.join(config.runs_dir, run_name)
    if not distribute.is_chief():  # one writer per run: the others keep their own logs
        run_dir = os.path.join(run_dir, distribute.task_name())
        config = dataclasses.replace(config, export=False, plots=False)
    os.makedirs(run_dir, exist_ok=True)
    if not resume:
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump(dataclasses.asdict(config), f, indent=2)

    transform = None if preprocessing else array_transform(splits.train, input_shape)
    batches = distribute.training_batches(  # before evaluating: a bad batch design fails fast
        strategy, splits.train, config.classes_per_batch, config.samples_per_class,
        seed=config.seed, preprocessing=preprocessing,
        map_fn=_augmented(transform, config, input_shape),
        **({"skip_bad_images": True} if config.skip_bad_images else {}),
    )
    backup = _backup_callback(run_dir, batches, resume)
    before, _ = evaluate(model, splits, preprocessing, transform)
    if report:
        report("before training", before, KS)
    queries, references = evaluation_splits(splits)
    recall = RecallAtK(
        data.evaluation_batches(queries, preprocessing, transform=transform), ks=KS, verbose=0,
        reference_data=None if references is None
        else data.evaluation_batches(references, preprocessing, transform=transform))
    callbacks = [recall, keras.callbacks.CSVLogger(os.path.join(run_dir, "history.csv"),
                                                   append=resume), backup]
    log_dir = os.path.join(run_dir, "tensorboard")
    if _have_tensorboard():
        callbacks.append(keras.callbacks.TensorBoard(log_dir))
    callbacks.append(keras.callbacks.LambdaCallback(  # after `backup` has restored
        on_train_begin=lambda logs=None: _restore_recall_history(recall, backup)))
    try:
        history = model.fit(batches, epochs=config.epochs,
                            steps_per_epoch=config.steps_per_epoch, callbacks=callbacks,
                            verbose=2)
    except tf.errors.OpError as error:  # a bad image file: the message names it
        raise clear_error(error) or error from None
    full_history = getattr(backup, "history", None) or history.history
    after, embeddings = evaluate(model, splits, preprocessing, transform)
    if report:
        report("after training", after, KS)

    model_path = os.path.join(run_dir, "model.keras")
    model.save(model_path)
    summary = {
        "config": dataclasses.asdict(config),
        "run_dir": run_dir,
        "model": model_path,
        "recall_before": before,
        "recall_after": after,
        "loss_history": [float(v) for v in full_history.get("loss", [])],
        "seconds": None,
        "export_dir": None,
        "plots": [],
    }
    from keras_dml.projector import write_projector

    summary["projector"] = write_projector(  # the evaluation set, for TensorBoard's projector
        log_dir, embeddings, queries.labels, images=queries.images,
        paths=None if queries.images is not None else queries.paths,
        class_names=queries.class_names)["config"]
    if config.plots and _have_matplotlib():
        summary["plots"] = write_plots(run_dir, recall, queries, embeddings)
    if config.export:
        from keras_dml.export import export_embedder

        summary["export_dir"] = export_embedder(
            model.embedder(), os.path.join(config.export_dir, run_name),
            input_format="images" if preprocessing is None else "image_bytes",
            preprocessing=preprocessing,
            run_info={"dataset": config.dataset, "loss": config.loss,
                      "recall_after": after,
                      "input": "float32 images in [0, 1] of shape " + str(tuple(input_shape))
                      if preprocessing is None else "encoded images"},
        )
    summary["seconds"] = round(time.time() - started, 1)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return summary
