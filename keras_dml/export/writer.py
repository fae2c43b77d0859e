"""Step 5 of an export: write one serving function as a TF Serving version.

SavedModel, warm-up requests and sidecar go into a staging directory, which
step 6 (`verify`) checks before it is published as `base_dir/<version>`.
Shared by the embedder and the retriever exports. The SavedModel holds only
the variables its signature reads (`keras.export.ExportArchive` tracks the
variables used by the endpoint), so loss weights such as proxies and the
optimizer state are left out.
"""

import keras
import numpy as np

from keras_dml import backend
from keras_dml.export import layout, sidecar, warmup as warmup_lib
from keras_dml.export.inputs import shape_list
from keras_dml.export.verify import SIGNATURE, outputs_numpy, verify_export

__all__ = ["write_export"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")


def write_export(base_dir, serve, serving_input, *, kind, describe, embedding_dim, run_info=None,
                 version=None, overwrite=False, warmup=True, warmup_batch_sizes=(1,),
                 warmup_inputs=None, verify=True, sections=None, model_fingerprint=None):
    """Exports `serve` as `base_dir/<version>` and returns that directory.

    Args:
        base_dir: Model base path.
        serve: Python function: signature input tensor -> dict of outputs.
        serving_input: The `ServingInput` (its spec is the signature input).
        kind: `"embedder"` or `"retriever"` (recorded in the sidecar).
        describe: Dict output name -> description text for the sidecar.
        embedding_dim: Embedding size d (recorded in the sidecar).
        run_info: JSON-serialisable dict about the training run. Defaults to None.
        version, overwrite: See `layout.resolve_version`.
        warmup: Write `assets.extra/tf_serving_warmup_requests`. Defaults to True.
        warmup_batch_sizes: One synthetic warm-up request per size. Defaults to (1,).
        warmup_inputs: One batch to warm up with instead of synthetic ones.
        verify: Reload the SavedModel and compare it with the in-process
            function on the warm-up batches before publishing. Defaults to True.
        sections: Extra sidecar sections.
        model_fingerprint: The embedder's fingerprint, recorded in the sidecar.
    """
    # Argument errors first, before the slow tracing and writing.
    version = layout.resolve_version(base_dir, version, overwrite)
    run_info = sidecar.plain_run_info(run_info)
    if warmup:
        warmup_lib.require_serving_api()
    batches = _warmup_batches(serving_input, warmup_batch_sizes, warmup_inputs)
    archive = keras.export.ExportArchive()
    endpoint = archive.add_endpoint(SIGNATURE, serve, input_signature=[serving_input.spec])
    expected = [outputs_numpy(endpoint(tf.constant(batch))) for batch in batches]
    concrete = endpoint.get_concrete_function()
    outputs = {
        name: {"dtype": spec.dtype.name, "shape": shape_list(spec.shape),
               "description": describe[name]}
        for name, spec in concrete.structured_outputs.items()
    }
    variables = concrete.variables
    sections = dict(sections or {})
    sections["saved_variables"] = {
        "count": len(variables),
        "values": int(sum(np.prod(v.shape) for v in variables)),
    }
    model_name = _basename(base_dir)
    with layout.staged_version(base_dir, version, overwrite) as staging:
        archive.write_out(staging, verbose=False)
        if warmup:
            requests = [warmup_lib.predict_request({serving_input.name: b}, model_name)
                        for b in batches]
            warmup_lib.write_warmup_requests(staging, requests)
            sections["warmup"] = {
                "file": "/".join(layout.WARMUP_PATH),
                "batch_sizes": [len(b) for b in batches],
            }
        info = sidecar.export_info(
            kind, version, serving_input, outputs, embedding_dim,
            run_info=run_info, model_fingerprint=model_fingerprint, **sections,
        )
        sidecar.write_export_info(staging, info)
        if verify:
            if warmup:  # replay what TF Serving will replay: the written protos
                batches = [tf.make_ndarray(request.inputs[serving_input.name])
                           for request in warmup_lib.read_warmup_requests(staging)]
            verify_export(staging, serving_input.name, batches, expected)
    return layout.version_dir(base_dir, version)


def _warmup_batches(serving_input, batch_sizes, warmup_inputs):
    if warmup_inputs is None:
        return warmup_lib.synthetic_inputs(serving_input, batch_sizes)
    batch = np.asarray(warmup_inputs, dtype=object if serving_input.spec.dtype == tf.string
                       else serving_input.spec.dtype.as_numpy_dtype)
    if batch.ndim != len(serving_input.spec.shape) or len(batch) == 0:
        raise ValueError(
            f"warmup_inputs must be one non-empty batch for input {serving_input.name!r} of "
            f"shape {tuple(serving_input.spec.shape)}, got shape {batch.shape}."
        )
    return [batch]


def _basename(base_dir):
    return str(base_dir).rstrip("/").rsplit("/", 1)[-1] or "model"
