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
TensorFlow (`keras-dml train --help`). The other public names `keras_dml.training` held
(`KS`, `SUMMARY`, `Clock`, ...) still resolve here with a DeprecationWarning naming their
module, until 0.3 (`keras_dml.hyperparameters.REMOVED_IN`).
"""

import importlib
import warnings

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

# The other public names of the former `keras_dml/training.py` -> (module, name there).
_FORMER = {
    "KS": ("evaluation", "KS"),
    "RunEvaluation": ("evaluation", "RunEvaluation"),
    "Clock": ("clock", "Clock"),
    "SUMMARY": ("run_folder", "SUMMARY"),
    "CLASS_NAMES": ("run_folder", "CLASS_NAMES"),
    "FAILED": ("run_folder", "FAILED"),
    "run_directory": ("run_folder", "run_directory"),
    "adam": ("model", "adam"),
    "backbone_variables": ("model", "backbone_variables"),
    "step_jit_compile": ("model", "step_jit_compile"),
    "evaluation_splits": ("inputs", "evaluation_splits"),
    "metrics_row": ("report", "metrics_row"),
    "metrics_table": ("report", "metrics_table"),
    "chance_recall": ("verdict", "chance_recall"),
    "TSNE_POINTS": ("outputs", "TSNE_POINTS"),
    "TSNE_ITERATIONS": ("outputs", "TSNE_ITERATIONS"),
    "TSNE_THREADS": ("outputs", "TSNE_THREADS"),
    "write_plots": ("outputs", "write_plots"),
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
    """A name of `_API`, or of `_FORMER` with a DeprecationWarning, from its module
    (imported on first use)."""
    module, attribute = (_API[name], name) if name in _API else _FORMER.get(name, (None, None))
    if module is None:
        raise AttributeError(f"module 'keras_dml.training' has no attribute {name!r}")
    if name in _FORMER:
        from keras_dml.hyperparameters import deprecation

        warnings.warn(deprecation(f"keras_dml.training.{name}",
                                  f"import it from keras_dml.training.{module}"),
                      DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(f"keras_dml.training.{module}"), attribute)


def __dir__():
    return sorted(set(globals()) | set(_API) | set(_FORMER))
