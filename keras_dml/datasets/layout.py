"""Finding a dataset's official folder layout, and the error when it is absent."""

import os

__all__ = ["DatasetNotFoundError", "ENV_VAR", "MARKERS", "detect_dataset", "find_root",
           "integer_fields", "read_rows"]

ENV_VAR = "KERAS_DML_DATA_DIR"

# Each dataset's official layout: a marker file, in `data_dir` or one of these folders.
MARKERS = {
    "omniglot": ("images_background.npz", ("omniglot",)),
    "cub200": ("images.txt", ("CUB_200_2011",)),
    "cars196": ("cars_annos.mat", ("stanford_cars", "cars196")),
    "sop": ("Ebay_train.txt", ("Stanford_Online_Products",)),
    "inshop": ("list_eval_partition.txt", ("Eval",)),
}


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
    candidates = _candidates(data_dir, subdirs)
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, marker)):
            return folder
    raise DatasetNotFoundError(
        f"{dataset}: {marker!r} not found in {' or '.join(map(repr, candidates))}. "
        f"{how_to_get}"
    )


def detect_dataset(data_dir):
    """The dataset whose layout `data_dir` holds: `"csv"` for a file, a known
    dataset's name when its marker file is found (see `MARKERS`; e.g. CUB's
    `images.txt` in `data_dir` or `data_dir/CUB_200_2011`), else `"folder"`
    (`root/<class>/<image>`, read by `keras_dml.datasets.from_directory`)."""
    data_dir = os.path.expanduser(str(data_dir))
    if os.path.isfile(data_dir):
        return "csv"
    for dataset, (marker, subdirs) in MARKERS.items():
        if any(os.path.isfile(os.path.join(folder, marker))
               for folder in _candidates(data_dir, subdirs)):
            return dataset
    return "folder"


def _candidates(data_dir, subdirs):
    return [data_dir] + [os.path.join(data_dir, sub) for sub in subdirs]


def read_rows(path, fields, skip=0, check=None):
    """The rows of a whitespace-separated list file, checked line by line.

    Args:
        path: The list file.
        fields: Names of the expected fields, e.g. `("image_id", "path")`.
        skip: Header lines to skip. Defaults to 0.
        check: Optional `check(row) -> str or None`: a problem with a row of
            the right length (e.g. "class_id is not an integer").

    Returns:
        `[(line_number, row)]` (1-based line numbers), blank lines left out.

    Raises:
        ValueError: Naming the file, the line number and the line, for a
            line with another number of fields or one `check` rejects.
    """
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    rows, layout = [], " ".join(f"<{name}>" for name in fields)
    for number, line in enumerate(lines[skip:], start=skip + 1):
        row = line.split()
        if not row:
            continue
        problem = (f"expected {len(fields)} fields '{layout}', got {len(row)}"
                   if len(row) != len(fields) else check and check(row))
        if problem:
            raise ValueError(f"{path}, line {number}: {problem}: {line.strip()[:200]!r}.")
        rows.append((number, row))
    return rows


def integer_fields(*positions, names):
    """A `read_rows` check that the fields at `positions` are integers."""
    def check(row):
        for position in positions:
            try:
                int(row[position])
            except ValueError:
                return f"{names[position]} is not an integer"
        return None

    return check
