"""TF Serving's directory layout: `base_dir/<version>/`, written atomically.

TF Serving polls `--model_base_path` and serves the highest integer-named
sub-directory. A version is therefore written into a hidden staging directory
(a name TF Serving ignores) and renamed into place only once it is complete,
so the server never loads a half-written export.
"""

import contextlib
import re
import uuid


from keras_dml import backend
from keras_dml.hyperparameters import integer_at_least

__all__ = ["SIDECAR_NAME", "WARMUP_PATH", "list_versions", "next_version", "resolve_version",
           "staged_version", "version_dir"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")

SIDECAR_NAME = "keras_dml_export.json"
WARMUP_PATH = ("assets.extra", "tf_serving_warmup_requests")

_VERSION = re.compile(r"^[0-9]+$")


def list_versions(base_dir):
    """The integer versions present in `base_dir`, ascending (empty if none).

    Args:
        base_dir: A model base path (local, or any `tf.io.gfile` file system).

    Returns:
        A sorted list of ints.
    """
    base_dir = str(base_dir)
    if not tf.io.gfile.isdir(base_dir):
        return []
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(base_dir))
    return sorted(
        int(name) for name in names
        if _VERSION.match(name) and tf.io.gfile.isdir(_join(base_dir, name))
    )


def next_version(base_dir):
    """The next free version: one more than the highest present, or 1.

    Examples:

    >>> next_version("/tmp/no_such_model")
    1
    """
    versions = list_versions(base_dir)
    return versions[-1] + 1 if versions else 1


def version_dir(base_dir, version):
    """`base_dir/<version>`."""
    return _join(str(base_dir), str(version))


def resolve_version(base_dir, version=None, overwrite=False):
    """Validates `version` (or picks the next one) and refuses to overwrite.

    Args:
        base_dir: Model base path.
        version: Positive int, or `None` for `next_version(base_dir)`.
        overwrite: Allow replacing an existing version. Defaults to False.

    Returns:
        The version number.

    Raises:
        ValueError: `version` is not a positive integer.
        FileExistsError: `base_dir/<version>` exists and `overwrite` is False.
    """
    if version is None:
        return next_version(base_dir)
    version = integer_at_least("version", version, 1, strict=True,
                               why=" (TF Serving's version directories are integers)")
    target = version_dir(base_dir, version)
    if tf.io.gfile.exists(target) and not overwrite:
        raise FileExistsError(
            f"{target} already exists; pass overwrite=True to replace it, or "
            f"version=None for the next free version ({next_version(base_dir)})."
        )
    return version


@contextlib.contextmanager
def staged_version(base_dir, version, overwrite=False):
    """Yields a staging directory that becomes `base_dir/<version>` on success.

    On an exception the staging directory is removed and nothing is published.
    An existing version is replaced only with `overwrite=True`; the old one is
    moved aside first and deleted after the new one is in place.
    """
    base_dir = str(base_dir)
    tf.io.gfile.makedirs(base_dir)
    token = uuid.uuid4().hex[:8]
    staging = _join(base_dir, f".{version}.staging-{token}")
    target = version_dir(base_dir, version)
    try:
        yield staging
    except BaseException:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.rmtree(staging)
        raise
    retired = None
    if tf.io.gfile.exists(target):
        if not overwrite:
            tf.io.gfile.rmtree(staging)
            raise FileExistsError(
                f"{target} appeared while exporting; pass overwrite=True to replace it."
            )
        retired = _join(base_dir, f".{version}.retired-{token}")
        tf.io.gfile.rename(target, retired)
    tf.io.gfile.rename(staging, target)
    if retired is not None:
        tf.io.gfile.rmtree(retired)


def _join(*parts):
    return tf.io.gfile.join(*parts)
