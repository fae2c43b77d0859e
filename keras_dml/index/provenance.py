"""What made an index: the model's fingerprint, its preprocessing, the dimension and metric.

Every saved index (`index.json`) and every Milvus collection records an
`Index.provenance` dict: `model_fingerprint` (`model_fingerprint(model)`, or
None), `preprocessing` (a `keras_dml.data.Preprocessing` as a dict, or None),
`dim`, `metric` and, where known, `run` (the run directory). Searching with
another model's embeddings is refused (`ModelMismatchError`) unless asked for;
`compare_export` does the same for a SavedModel export, whose sidecar records
the `model_fingerprint` of the embedder it serves.
"""

import warnings

from keras_dml.models.fingerprint import model_fingerprint

__all__ = ["ModelMismatchError", "check", "compare_export", "compare_models",
           "model_fingerprint"]

FIELDS = ("model_fingerprint", "preprocessing", "dim", "metric", "run")


class ModelMismatchError(ValueError):
    """The model at hand is not the one whose embeddings the index holds.

    Attributes:
        mismatch: The sentence naming both models (the message without its advice).
        recorded: The index's provenance dict.
        given: The provenance of the model at hand.
    """

    def __init__(self, message, mismatch=None, recorded=None, given=None):
        super().__init__(message)
        self.mismatch = mismatch or message
        self.recorded = dict(recorded or {})
        self.given = dict(given or {})


def check(provenance):
    """`provenance` as a dict with every field of `FIELDS` (missing ones None)."""
    if provenance is None:
        return dict.fromkeys(FIELDS)
    if not isinstance(provenance, dict):
        raise ValueError(f"provenance must be a dict, got {type(provenance).__name__}.")
    unknown = set(provenance) - set(FIELDS)
    if unknown:
        raise ValueError(f"Unknown provenance fields {sorted(unknown)}; known: {list(FIELDS)}.")
    return {**dict.fromkeys(FIELDS), **provenance}


def describe(provenance):
    """`fingerprint (run path)` for messages."""
    text = str(provenance.get("model_fingerprint"))
    return f"{text} (run {provenance['run']})" if provenance.get("run") else text


def compare_models(recorded, given, allow_mismatch=False, where="The index"):
    """Refuses (or with `allow_mismatch`, warns about) a model other than the recorded one.

    Args:
        recorded: The index's provenance dict.
        given: The provenance of the model at hand (its `model_fingerprint`
            and, where known, `run`).
        allow_mismatch: Warn instead of raising. Defaults to False.
        where: What holds the embeddings, for the message.

    Raises:
        ModelMismatchError: Both fingerprints are known and differ, naming both.
    """
    ours, theirs = recorded.get("model_fingerprint"), given.get("model_fingerprint")
    if ours is None or theirs is None:
        if ours is None and theirs is not None:
            warnings.warn(f"{where} records no model fingerprint (made before keras_dml "
                          "recorded one): it cannot check that its embeddings come from "
                          f"model {describe(given)}.", stacklevel=3)
        return
    if ours == theirs:
        return
    mismatch = (f"{where} holds embeddings of model {describe(recorded)}, but the model at "
                f"hand is {describe(given)}: its scores would be meaningless.")
    message = (mismatch + " Build a new index with this model (on Milvus: a new collection, "
               "then move your alias to it and drop the old one; see `keras-dml collections "
               "--help`), or pass allow_mismatch=True if you know they agree.")
    if not allow_mismatch:
        raise ModelMismatchError(message, mismatch, recorded, given)
    warnings.warn("allow_mismatch=True: " + message, stacklevel=3)


def compare_export(info, recorded, allow_mismatch=False, where="The index"):
    """Refuses (or with `allow_mismatch`, warns about) an export of another model.

    A service that embeds with a SavedModel export and searches an index checks
    them with this: the export's sidecar (`keras_dml.export.read_export_info`)
    records `model_fingerprint`, the fingerprint of the embedder it serves, and
    the index's provenance (`Index.provenance`, or a collection record's
    `provenance`) the fingerprint of the model that made its embeddings.

    Args:
        info: The export's sidecar dict; its `training_run` `run`, if any, is
            named in the message.
        recorded: The index's provenance dict.
        allow_mismatch: Warn instead of raising. Defaults to False.
        where: What holds the embeddings, for the message.

    Raises:
        ModelMismatchError: The two fingerprints differ, naming both. An export
            or index that records none warns that it cannot be checked.

    Examples:

    >>> compare_export({"model_fingerprint": "sha256:5b1f72f3efacdf8e"},
    ...                {"model_fingerprint": "sha256:5b1f72f3efacdf8e"})
    """
    run = info.get("training_run")
    given = {"model_fingerprint": info.get("model_fingerprint"),
             "run": run.get("run") if isinstance(run, dict) else None}
    if given["model_fingerprint"] is None and recorded.get("model_fingerprint") is not None:
        warnings.warn("The export records no model fingerprint (exported before keras_dml "
                      "recorded one): it cannot be checked against the embeddings of model "
                      f"{describe(recorded)}; export the run again to record it.", stacklevel=2)
        return
    compare_models(recorded, given, allow_mismatch, where)
