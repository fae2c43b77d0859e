"""Finding a dataset's official folder layout, and the error when it is absent."""

import os

ENV_VAR = "KERAS_DML_DATA_DIR"


class DatasetNotFoundError(FileNotFoundError):
    """The dataset is neither in `data_dir` nor obtainable through tfds."""


def find_root(data_dir, marker, subdirs, dataset, how_to_get):
    """The folder under `data_dir` that holds `marker`.

    Looks in `data_dir` itself, then in each of `subdirs` below it (the
    official archive folder names). Without `data_dir`, uses
    `$KERAS_DML_DATA_DIR` when set.

    Raises:
        DatasetNotFoundError: Saying where the files were expected and how to
            get them.
    """
    data_dir = data_dir or os.environ.get(ENV_VAR)
    if data_dir is None:
        raise DatasetNotFoundError(
            f"{dataset}: no data_dir given and ${ENV_VAR} is not set. {how_to_get}")
    data_dir = os.path.expanduser(str(data_dir))
    candidates = [data_dir] + [os.path.join(data_dir, sub) for sub in subdirs]
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, marker)):
            return folder
    raise DatasetNotFoundError(
        f"{dataset}: {marker!r} not found in {' or '.join(map(repr, candidates))}. "
        f"{how_to_get}"
    )


def read_rows(path, skip=0):
    """Whitespace-split rows of a text list file, after `skip` header lines."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()[skip:]
    return [line.split() for line in lines if line.strip()]
