"""A run's folder: its name, the files it starts with, its epoch backups, the mark a
failed run leaves for `--resume`, and what `keras-dml export` reads back."""

import contextlib
import dataclasses
import json
import os
import shutil
import time

from keras_dml import backend
from keras_dml.callbacks.backup import TrainingBackup, complete_backups
from keras_dml.training import distribute
from keras_dml.training.config import TrainConfig

__all__ = ["CLASS_NAMES", "FAILED", "SUMMARY", "apply_run_defaults", "backup_callback",
           "failure_kept_or_removed", "is_chief", "load_run_config", "make_run_directory",
           "restore_recall_history", "run_directory", "write_settings", "write_summary"]

SUMMARY = "summary.json"
CLASS_NAMES = "class_names.json"
#: Written into a failed run's folder kept for `--resume` (one without a backup is removed).
FAILED = "failed.json"


def write_settings(run_dir, config, splits):
    """Writes the run's `config.json` and its class names (label i is names[i])."""
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(dataclasses.asdict(config), f, indent=2)
    with open(os.path.join(run_dir, CLASS_NAMES), "w") as f:
        json.dump({"train": splits.train.class_names, "test": splits.test.class_names}, f)


def write_summary(run_dir, summary):
    """Writes the run's `summary.json`."""
    with open(os.path.join(run_dir, SUMMARY), "w") as f:
        json.dump(summary, f, indent=2, default=str)


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
    if not is_chief():  # one writer per run: the others keep their own logs
        return name, os.path.join(run_dir, distribute.task_name())
    if os.path.exists(run_dir) and not config.overwrite:
        raise FileExistsError(
            f"{run_dir} already exists; pass overwrite=True to replace it, or choose "
            "another run_name.")
    return name, run_dir


def is_chief():
    """Whether this process writes the run (always, off TensorFlow: one process)."""
    if not backend.is_tensorflow():
        return True
    return distribute.is_chief()


def make_run_directory(run_dir, replace):
    """Creates `run_dir`; `replace` (an `overwrite` of a folder found at the start)
    removes the old one first."""
    if replace and os.path.isdir(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir, exist_ok=True)


def failure_kept_or_removed(run_dir, resume):
    """Context: when the run fails, its folder is removed if it holds nothing to resume
    (no epoch backup; a resumed run's is kept), else kept and marked `failed.json`
    (the error and the resume command). A success removes an old mark."""
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


def backup_callback(run_dir, batches, resume):
    """Backs up every epoch to `<run>/backup` (atomic, exact on every backend, see
    `keras_dml.callbacks.backup`)."""
    backup_dir = os.path.join(run_dir, "backup")
    if backend.is_tensorflow() and distribute.cluster_workers() > 1:
        return distribute.BackupAndRestore(backup_dir, stream=batches, double_checkpoint=True,
                                           delete_checkpoint=False)
    if resume:
        backups = complete_backups(backup_dir)
        if not backups:
            raise FileNotFoundError(f"--resume: {backup_dir} holds no backup (the run was "
                                    "killed before its first epoch ended); start it again.")
        drop_history_after(os.path.join(run_dir, "history.csv"), backups[-1][0])
    return TrainingBackup(backup_dir, stream=batches)


def drop_history_after(path, epochs):
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


def restore_recall_history(recall, backup):
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
