"""`run`: the main job behind `keras-dml train`, as a few named steps.

Prepare (the run folder's name, the data, the model, the training stream), evaluate the
untrained model (a pretrained KerasHub backbone: its zero-shot features), fit, save and
summarise, then write the projector files, the figures and the export.
"""

import contextlib
import dataclasses
import os
import time

import keras

from keras_dml import backbones, datasets, hub_backbones
from keras_dml.callbacks import BackboneStepScale
from keras_dml.data.image_errors import clear_data_error
from keras_dml.training import inputs, outputs, run_folder
from keras_dml.training.clock import Clock
from keras_dml.training.config import own_files_options
from keras_dml.training.evaluation import RunEvaluation
from keras_dml.training.model import backbone_variables, build_model, compile_model, dtype_policy
from keras_dml.training.report import fit_verbose
from keras_dml.training.verdict import (chance_recall, check_meaningful, fit_batch_design,
                                        run_verdict)

__all__ = ["run"]


@dataclasses.dataclass
class _Job:
    """What the steps of one run share."""

    config: object
    name: str
    folder: str
    resume: bool
    clock: Clock
    started: float
    splits: object = None
    input_shape: tuple = None
    preprocessing: object = None
    transform: object = None
    model: object = None
    batches: object = None
    skips_before: object = None


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
    job = _prepare(config, resume)
    with run_folder.failure_kept_or_removed(job.folder, resume):
        if not resume:
            run_folder.write_settings(job.folder, job.config, job.splits)
        backup = run_folder.backup_callback(job.folder, job.batches, resume)
        if report:
            report.start(job.config, job.splits, job.folder)
        recall, queries, references = _evaluator(job, report)
        before = None  # without an evaluation (config.evaluates): no Recall@K at all
        if recall is not None:
            before = recall.evaluate_now(_untrained(job))
            recall.record_untrained(before)
            if report:
                report.metrics("before training", before)
        history = _fit(job, _callbacks(job, recall, backup), report)
        if report and recall is not None:
            report.metrics("after training", recall.full_results)
        summary = _summary(job, recall, before, getattr(backup, "history", None)
                           or history.history, queries, references)
        _write_outputs(job, summary, recall, queries)
        summary["seconds"] = round(time.time() - job.started, 1)
        summary["timings"] = job.clock.rounded()
        run_folder.write_summary(job.folder, summary)
        if report:
            report.finish(summary)
    return summary


def _prepare(config, resume):
    """The run's folder name (refused before any work when taken), data, model and
    training stream (a bad batch design fails here); then the folder itself."""
    if resume:
        name, replace = config.run_name, False
        folder = os.path.join(config.runs_dir, name)
    else:
        name, folder = run_folder.run_directory(config)
        replace = os.path.exists(folder)
    job = _Job(config, name, folder, resume, Clock(), time.time())
    with job.clock.phase("load"):
        job.splits = datasets.load(config.dataset, data_dir=config.data_dir,
                                   **own_files_options(config.dataset, config.test_classes))
        if config.test_dir is not None:
            job.splits = inputs.with_test_dir(job.splits, config.test_dir)
        if config.rotated_classes:
            job.splits = dataclasses.replace(
                job.splits, train=job.splits.train.with_rotated_classes())
    fit_batch_design(config, job.splits)
    check_meaningful(config, job.splits)
    job.input_shape, job.preprocessing = inputs.input_spec(
        job.splits.train, config.image_size, config.backbone, config.augment_crop)
    strategy = inputs.strategy_for(config.strategy)
    scope = contextlib.nullcontext() if strategy is None else strategy.scope()
    with scope, dtype_policy(config.mixed_precision):
        # a resumed run's backup restores every weight: nothing to download or load
        job.model = build_model(config, job.input_shape, weights="none" if resume else None)
        compile_model(job.model, config, job.splits.train.num_classes)
    if not run_folder.is_chief():
        job.config = dataclasses.replace(config, export=False, plots=False)
    pixel_max = 255.0 if backbones.takes_raw_pixels(config.backbone) else 1.0
    job.transform = None if job.preprocessing else inputs.array_transform(
        job.splits.train, job.input_shape, pixel_max)
    job.skips_before = inputs.skipped_images()  # the run's skipped files: the ones from here
    job.batches = inputs.training_batches(
        strategy, job.splits.train, config, job.preprocessing,
        inputs.augmented(job.transform, config, job.input_shape))
    run_folder.make_run_directory(folder, replace)
    return job


def _untrained(job):
    """What the "before training" row measures: the model, or for a KerasHub backbone
    from its preset's weights its pooled features L2-normalised (the zero-shot
    baseline, as `keras-dml evaluate --backbone` measures it), not those features
    through the new, random embedding head."""
    config = job.config
    if job.resume or not backbones.is_hub(config.backbone) or config.weights != "preset":
        return job.model
    features = job.model.get_layer("embedding").input
    return keras.Model(job.model.input, keras.layers.UnitNormalization()(features),
                       name="zero_shot")


def _evaluator(job, report):
    """(the run's `RunEvaluation`, its queries, its references or None); all None when
    the run measures no retrieval (`config.evaluates`)."""
    if not job.config.evaluates:
        return None, None, None
    queries, references = inputs.evaluation_splits(job.splits)
    if job.config.skip_bad_images:  # one decode pass: the figures and projector then agree
        queries, references = (inputs.readable(split) for split in (queries, references))
    recall = RunEvaluation(queries, references, job.preprocessing, job.transform,
                           progress=bool(report and report.progress), clock=job.clock)
    return recall, queries, references


def _callbacks(job, recall, backup):
    """The evaluation, the CSV history, the epoch backup, TensorBoard where installed,
    and the backbone's step scale (warm-up, multiplier, layer decay) when the config
    asks for one."""
    config = job.config
    callbacks = [] if recall is None else [recall]
    callbacks.append(keras.callbacks.CSVLogger(os.path.join(job.folder, "history.csv"),
                                               append=job.resume))
    callbacks += [] if backup is None else [backup]
    if outputs.have_tensorboard():
        callbacks.append(keras.callbacks.TensorBoard(_log_dir(job)))
    if recall is not None:
        callbacks.append(keras.callbacks.LambdaCallback(  # after `backup` has restored
            on_train_begin=lambda logs=None: run_folder.restore_recall_history(recall,
                                                                               backup)))
    if config.head_warmup_steps or config.backbone_lr_multiplier != 1.0 or \
            config.layer_decay != 1.0:
        variables = backbone_variables(job.model)
        scales = None if config.layer_decay == 1.0 else hub_backbones.layer_decay_scales(
            variables, config.layer_decay)
        callbacks.append(BackboneStepScale(variables, config.backbone_lr_multiplier,
                                           config.head_warmup_steps, scales=scales))
    return callbacks


def _log_dir(job):
    return os.path.join(job.folder, "tensorboard")


def _fit(job, callbacks, report):
    """`model.fit` on the training stream; a bad image file's error names the file."""
    config = job.config
    with job.clock.phase("fit"):  # training steps + the evaluation after each epoch
        try:
            return job.model.fit(job.batches, epochs=config.epochs,
                                 steps_per_epoch=config.steps_per_epoch, callbacks=callbacks,
                                 verbose=fit_verbose(report), shuffle=False)
        except Exception as error:
            clear = clear_data_error(error)
            if clear is None:
                raise
            raise clear from None


def _summary(job, recall, before, history, queries, references):
    """Saves the model; returns the run's summary (without its total time)."""
    config, clock, preprocessing = job.config, job.clock, job.preprocessing
    evaluations = clock.phases.get("evaluation")
    train_seconds = clock.phases["fit"]["seconds"] - (
        config.epochs * evaluations["seconds"] / evaluations["count"] if evaluations else 0)
    after = None if recall is None else recall.full_results
    model_path = os.path.join(job.folder, "model.keras")
    with clock.phase("save"):
        job.model.save(model_path)
    return {
        "config": dataclasses.asdict(config),
        "run_name": job.name,
        "run_dir": job.folder,
        "model": model_path,
        "evaluation": _evaluation_words(config),
        "recall_before": before,
        "recall_after": after,
        "loss_history": [float(v) for v in history.get("loss", [])],
        "seconds": None,
        "train_seconds": round(train_seconds, 1),
        "export": {"base_dir": os.path.join(config.export_dir, job.name),
                   "input_format": "images" if preprocessing is None else "image_bytes",
                   "preprocessing": None if preprocessing is None else preprocessing.to_dict()},
        "export_dir": None,
        "plots": [],
        **_skipped(job, queries, references),
        "verdict": "" if recall is None else run_verdict(before, after,
                                                         chance_recall(queries, references)),
    }


def _evaluation_words(config):
    """What the run's Recall@K is measured on, in words (summary.json's `evaluation`)."""
    if not config.evaluates:
        return "none (--test-classes 0 without --test-dir; every class trains)"
    if config.test_dir is not None:
        return f"the images of --test-dir {config.test_dir}, leave-one-out"
    return "the held-out test split"


def _skipped(job, queries, references):
    """The summary's `skipped_images` (the paths `skip_bad_images` left out, training
    and test images, in the order met) and `skipped_reasons` (`{path: reason}`, each
    file looked at once more: "missing" or "cannot be decoded")."""
    paths = inputs.skipped_images(job.skips_before) + [
        path for split in (queries, references) if split is not None
        for path, reason in split.skipped if reason == "undecodable"]
    reasons = dict.fromkeys(paths, "cannot be decoded")
    if reasons:
        from keras_dml.data.verify import unreadable_files

        reasons.update(unreadable_files(list(reasons)))
    return {"skipped_images": list(reasons), "skipped_reasons": reasons}


def _write_outputs(job, summary, recall, queries):
    """The projector files, the figures and report (`config.plots`) of the evaluated
    images (none without an evaluation), the export (`config.export`), each timed;
    their paths go into `summary`."""
    config, clock = job.config, job.clock
    if recall is not None:
        with clock.phase("projector"):  # the evaluation set, for TensorBoard's projector
            summary["projector"] = outputs.write_run_projector(_log_dir(job), recall.embeddings,
                                                               queries)
        if config.plots and outputs.have_matplotlib():
            with clock.phase("plots"):
                summary["plots"], summary["report"] = outputs.write_figures(
                    job.folder, recall.history, queries, recall.embeddings,
                    config.steps_per_epoch, summary["recall_before"], summary["recall_after"])
    if config.export and outputs.should_export(summary, config):
        with clock.phase("export"):
            summary["export_dir"] = outputs.export_run(job.model, summary, config,
                                                       job.input_shape, job.preprocessing)
