"""The main job behind `keras-dml train`, one module per step.

`job` (`run`: the steps in order), `config` (`TrainConfig`: every setting, with its
default), `model` (the backbone, head, loss and optimizer), `inputs` (the splits, the
image transform, the augmentation, the training stream), `evaluation` (`RunEvaluation`),
`report` (`ConsoleReport`: what the command prints), `verdict` (whether a run means
something), `run_folder` (the run's folder, backups, `--resume`, what `keras-dml export`
reads back), `outputs` (projector, figures, export), `projector` (TensorBoard's
projector files), `distribute` (`tf.distribute` strategies and multi-worker backups),
`recipes` (the shipped recipes) and `clock` (seconds per phase).

The names below load on first use, so `keras_dml.training.config` imports without
TensorFlow (`keras-dml train --help`). The other names `keras_dml.training` held
(`KS`, `SUMMARY`, `Clock`, ...) still resolve here; they live in the modules above.
"""

import importlib

# Public name -> the module defining it.
_API = {
    "run": "job",
    "TrainConfig": "config",
    "ConsoleReport": "report",
    "load_run_config": "run_folder",
    "apply_run_defaults": "run_folder",
    "build_model": "model",
    "compile_model": "model",
    "make_loss": "model",
    "learning_rate_schedule": "model",
    "array_transform": "inputs",
    "augmentation": "inputs",
    "check_meaningful": "verdict",
    "run_verdict": "verdict",
}

# The other names of the former `keras_dml/training.py` -> (module, name there).
_FORMER = {
    "KS": ("evaluation", "KS"),
    "RunEvaluation": ("evaluation", "RunEvaluation"),
    "Clock": ("clock", "Clock"),
    "SUMMARY": ("run_folder", "SUMMARY"),
    "CLASS_NAMES": ("run_folder", "CLASS_NAMES"),
    "FAILED": ("run_folder", "FAILED"),
    "run_directory": ("run_folder", "run_directory"),
    "_backup_callback": ("run_folder", "backup_callback"),
    "_drop_history_after": ("run_folder", "drop_history_after"),
    "_failure_kept_or_removed": ("run_folder", "failure_kept_or_removed"),
    "_is_chief": ("run_folder", "is_chief"),
    "_make_run_directory": ("run_folder", "make_run_directory"),
    "_restore_recall_history": ("run_folder", "restore_recall_history"),
    "adam": ("model", "adam"),
    "backbone_variables": ("model", "backbone_variables"),
    "step_jit_compile": ("model", "step_jit_compile"),
    "_dtype_policy": ("model", "dtype_policy"),
    "_warm_start_head": ("model", "_warm_start_head"),
    "evaluation_splits": ("inputs", "evaluation_splits"),
    "_augmented": ("inputs", "augmented"),
    "_input_spec": ("inputs", "input_spec"),
    "_readable": ("inputs", "readable"),
    "_skipped_images": ("inputs", "skipped_images"),
    "_strategy": ("inputs", "strategy_for"),
    "_training_batches": ("inputs", "training_batches"),
    "metrics_row": ("report", "metrics_row"),
    "metrics_table": ("report", "metrics_table"),
    "_fit_verbose": ("report", "fit_verbose"),
    "chance_recall": ("verdict", "chance_recall"),
    "TSNE_POINTS": ("outputs", "TSNE_POINTS"),
    "TSNE_ITERATIONS": ("outputs", "TSNE_ITERATIONS"),
    "TSNE_THREADS": ("outputs", "TSNE_THREADS"),
    "write_plots": ("outputs", "write_plots"),
    "_have_matplotlib": ("outputs", "have_matplotlib"),
    "_have_tensorboard": ("outputs", "have_tensorboard"),
    "_can_export": ("outputs", "can_export"),
    "_run_info": ("outputs", "run_info"),
    "FILE_IMAGE_SIZE": ("config", "FILE_IMAGE_SIZE"),
    "LR_SCHEDULES": ("config", "LR_SCHEDULES"),
    "OWN_DATASETS": ("config", "OWN_DATASETS"),
    "own_files_options": ("config", "own_files_options"),
}

__all__ = [
    "ConsoleReport",
    "TrainConfig",
    "apply_run_defaults",
    "array_transform",
    "augmentation",
    "build_model",
    "check_meaningful",
    "compile_model",
    "learning_rate_schedule",
    "load_run_config",
    "make_loss",
    "run",
    "run_verdict",
]


def __getattr__(name):
    """A name of `_API` or `_FORMER`, from its module (imported on first use)."""
    module, attribute = (_API[name], name) if name in _API else _FORMER.get(name, (None, None))
    if module is None:
        raise AttributeError(f"module 'keras_dml.training' has no attribute {name!r}")
    return getattr(importlib.import_module(f"keras_dml.training.{module}"), attribute)


def __dir__():
    return sorted(set(globals()) | set(_API) | set(_FORMER))
