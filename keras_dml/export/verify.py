"""Step 6 of an export: reload the written SavedModel and replay the warm-up batches.

A version is published only if the loaded signature answers the warm-up
batches (the protos TF Serving will replay) exactly as the in-process
function did, so a broken export is never served.
"""

import numpy as np

from keras_dml import backend

__all__ = ["SIGNATURE", "outputs_numpy", "verify_export"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")

SIGNATURE = "serving_default"
# Loaded vs in-process outputs: the same graph, so any difference is a bug.
_TOLERANCE = 1e-5


def verify_export(export_dir, input_name, batches, expected):
    """Loads `export_dir` and checks its answers to `batches` against `expected`.

    Raises:
        RuntimeError: An output differs in shape or value.
    """
    signature = tf.saved_model.load(export_dir).signatures[SIGNATURE]
    for index, (batch, wanted) in enumerate(zip(batches, expected)):
        got = outputs_numpy(signature(**{input_name: tf.constant(batch)}))
        for name, value in wanted.items():
            same = (np.allclose(got[name], value, rtol=_TOLERANCE, atol=_TOLERANCE)
                    if value.dtype.kind == "f" else np.array_equal(got[name], value))
            if got[name].shape != value.shape or not same:
                raise RuntimeError(
                    f"The SavedModel written to {export_dir} disagrees with the in-process "
                    f"model on warm-up batch {index}, output {name!r}; nothing was published."
                )


def outputs_numpy(outputs):
    """A signature's output dict as NumPy arrays."""
    return {name: value.numpy() for name, value in outputs.items()}
