"""`keras-dml export`: a saved model (or a `keras-dml train` run) as a TF Serving SavedModel."""

HELP = "export a keras-dml train run or a saved .keras model for TF Serving"
DESCRIPTION = (
    "Export a saved .keras model as a TF Serving SavedModel under <base_dir>/<version>. "
    "Given a run of keras-dml train (runs/<run> or its model.keras), the base directory "
    "and the input preprocessing default to the run's own (<export-dir>/<run>, as "
    "recorded in its summary.json); options given here take precedence."
)


def add_arguments(parser):
    from keras_dml.export.keras_file import add_export_arguments  # loads TensorFlow

    add_export_arguments(parser)


def run(args):
    from keras_dml.export.keras_file import export_from_args
    from keras_dml.training import apply_run_defaults

    path = export_from_args(apply_run_defaults(args))
    print(f"SavedModel: {path}")
    return 0
