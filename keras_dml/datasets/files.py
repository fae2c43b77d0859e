"""Datasets from a user's own image files: a folder of class folders, or a CSV list.

`from_directory(root)` reads the Keras layout `root/<class>/<image>` (as
`keras.utils.image_dataset_from_directory`); `from_csv(path)` reads a
`path,label[,split]` list. Both return the `DMLSplits` of
`keras_dml.datasets.load`: file based, with the class names kept. Listing and
splitting read no image bytes (images are told by their extension); a file
that cannot be decoded is named later by the pipeline that reads it.
"""

import csv
import os
import warnings

import numpy as np

from keras_dml.datasets.base import DMLSplits, labeled_from_raw

__all__ = ["ImageListing", "SPLITS", "csv_columns", "csv_paths", "from_csv", "from_directory",
           "load_csv", "load_folder"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
SPLITS = ("train", "test", "query", "gallery")
_SHOWN = 5  # files named in an error or warning


def from_directory(root, test_classes=0.5, seed=0):
    """A class-disjoint train / test pair from a folder of class folders.

    The layout is `root/<class>/<image>`: each sub-folder of `root` is a class
    (its name is the class name) and holds that class's images, also in
    sub-folders. Images are the files ending in `.jpg`, `.jpeg`, `.png`,
    `.gif` or `.bmp` (any case); hidden entries (names starting with `.`),
    other files and files outside a class folder are skipped with one counted
    warning. No image is opened.

    When `root` holds `train/` and `test/` (or `train/`, `query/` and
    `gallery/`, as In-Shop), each holds class folders and they are the split
    as given (the classes of `train/` must not appear in the others). Otherwise
    the classes are split at random: `test_classes` of them, shuffled with
    `numpy.random.default_rng(seed)`, are the test classes.

    Args:
        root: The folder.
        test_classes: Fraction of the classes in `(0, 1)`, or a number of
            classes, held out for testing (0: none, `test` is empty). Ignored
            for a given split. Defaults to 0.5.
        seed: Seed of the class shuffle: the same seed gives the same split.
            Defaults to 0.

    Returns:
        A `DMLSplits` named `"folder"` with `root` set to the absolute folder:
        `paths` are absolute, `class_names` the folder names. With `query/`
        and `gallery/`, `test` is query followed by gallery and the two share
        its label space. A class with one image is warned about (no positive
        pair).

    Raises:
        FileNotFoundError: `root` does not exist.
        ValueError: `root` is not a folder, is empty, holds images but no class
            folders, has too few classes, or a given split shares classes.

    Examples:

    >>> splits = keras_dml.datasets.from_directory("photos", test_classes=0.3)  # doctest: +SKIP
    >>> splits.train.class_names[:2], splits.train.paths[0]  # doctest: +SKIP
    (['cat', 'dog'], '/home/me/photos/cat/001.jpg')
    """
    root = os.path.abspath(os.path.expanduser(os.fspath(root)))
    if not os.path.exists(root):
        raise FileNotFoundError(f"{root} does not exist: give a folder of class folders "
                                "(root/<class>/<image>).")
    if not os.path.isdir(root):
        raise ValueError(f"{root} is not a folder: give a folder of class folders "
                         "(root/<class>/<image>), or a CSV file to from_csv.")
    listing = ImageListing()
    folders, files = listing.entries(root)
    given = [part for part in SPLITS if part in folders]
    if given:
        _check_parts(given, f"{root}: folders {', '.join(p + '/' for p in given)}",
                     "(a class folder cannot be named train, test, query or gallery)")
        for name in files:
            listing.skip("not in a class folder", os.path.join(root, name))
        for name in sorted(set(folders) - set(given)):
            listing.skip("not a split folder", os.path.join(root, name))
        for part in given:
            listing.add_classes(os.path.join(root, part), part)
    else:
        listing.add_classes(root, None, (folders, files))
    listing.warn(f"from_directory({root})")
    return _splits("folder", root, listing.paths, listing.classes,
                   listing.parts if given else None, test_classes, seed, sorted)


def from_csv(path, test_classes=0.5, seed=0):
    """A class-disjoint train / test pair from a CSV list of images.

    The file has a header row naming the columns `path` and `label`, and
    optionally `split` (`train`, `test`, `query` or `gallery` on every row),
    in any order; other columns are ignored here (`csv_columns` reads them).
    Paths are relative to the CSV file's folder (absolute ones are kept).
    Labels are any strings or integers: the class names. Without a `split`
    column the classes are split at random as in `from_directory`. No image is
    opened.

    Args:
        path: The CSV file.
        test_classes: Fraction of the classes in `(0, 1)`, or a number of
            classes, held out for testing without a `split` column (0: none,
            `test` is empty). Defaults to 0.5.
        seed: Seed of the class shuffle. Defaults to 0.

    Returns:
        A `DMLSplits` named `"csv"` with `root` the CSV file's folder and
        absolute `paths`. Listed files that do not exist are skipped with one
        counted warning naming their lines.

    Raises:
        FileNotFoundError: The CSV file does not exist.
        ValueError: Naming the file and line: an empty file, a missing column
            (the columns found are listed), a row of the wrong length, an empty
            path or label, a bad split value, a file listed twice (both lines),
            no listed file existing, too few classes or a given split sharing
            classes.
    """
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: give a CSV file with the columns "
                                "path,label[,split].")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder: give a CSV file, or the folder to "
                         "from_directory.")
    base = os.path.dirname(path)
    rows, has_split = _read_csv(path)
    paths, labels, parts, missing, seen = [], [], [], [], {}
    for line, name, label, part, _ in rows:
        full = os.path.normpath(os.path.join(base, name))
        if full in seen:
            raise ValueError(f"{path}, line {line}: {name!r} is listed again (first at line "
                             f"{seen[full]}); each image must appear once.")
        seen[full] = line
        if not os.path.isfile(full):
            missing.append(f"line {line}: {name}")
            continue
        paths.append(full)
        labels.append(label)
        parts.append(part)
    if missing:
        shown = "; ".join(missing[:_SHOWN])
        if not paths:
            raise ValueError(f"{path}: none of the {len(missing)} listed files exists (paths "
                             f"are relative to {base}); first: {shown}.")
        warnings.warn(f"from_csv({path}): skipped {len(missing)} of {len(rows)} rows whose "
                      f"file does not exist; first: {shown}", stacklevel=2)
    return _splits("csv", base, paths, labels, parts if has_split else None,
                   test_classes, seed, _label_order, what=path)


def csv_paths(path):
    """Every image path a `from_csv` file lists, absolute, in its order; listed files
    that do not exist included (`from_csv` skips them)."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    base = os.path.dirname(path)
    rows, _ = _read_csv(path)
    return [os.path.normpath(os.path.join(base, name)) for _, name, _, _, _ in rows]


def csv_columns(path):
    """The columns of a `from_csv` file beyond path, label and split, as written.

    Returns:
        `(names, cells)`: the other columns' header names (stripped, in the
        file's order; columns with an empty header are left out), and per
        listed image (absolute path, as `from_csv` makes it) its CSV line
        number and `{name: cell text, stripped}`.

    Raises:
        ValueError: As `from_csv`, for the file's format.
    """
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    base = os.path.dirname(path)
    rows, _ = _read_csv(path)
    names = list(rows[0][4])
    return names, {os.path.normpath(os.path.join(base, name)): (line, extras)
                   for line, name, _, _, extras in rows}


def load_folder(data_dir=None, source="auto", test_classes=0.5, seed=0):
    """`datasets.load("folder", data_dir=ROOT)`: `from_directory(ROOT)`."""
    _check_source("folder", data_dir, source, "root/<class>/<image>")
    return from_directory(data_dir, test_classes, seed)


def load_csv(data_dir=None, source="auto", test_classes=0.5, seed=0):
    """`datasets.load("csv", data_dir=FILE)`: `from_csv(FILE)`."""
    _check_source("csv", data_dir, source, "a CSV file with columns path,label[,split]")
    return from_csv(data_dir, test_classes, seed)


def _check_source(name, data_dir, source, layout):
    if source == "tfds":
        raise ValueError(f"{name} reads your own files; there is no tfds build.")
    if data_dir is None:
        raise ValueError(f"dataset {name!r} needs data_dir ({layout}).")


class ImageListing:
    """Image paths with their class folder and split part, and what was skipped."""

    def __init__(self):
        self.paths, self.classes, self.parts = [], [], []
        self.skipped = {}  # reason -> paths

    def skip(self, reason, path):
        self.skipped.setdefault(reason, []).append(path)

    def entries(self, folder):
        """`(sub-folder names, file names)` of `folder`; hidden ones are skipped."""
        folders, files = [], []
        try:
            with os.scandir(folder) as scan:
                for entry in scan:
                    if entry.name.startswith("."):
                        self.skip("hidden", entry.path)
                    elif entry.is_dir():
                        folders.append(entry.name)
                    else:
                        files.append(entry.name)
        except OSError as error:  # e.g. no permission
            raise ValueError(f"{folder}: cannot list it ({error.strerror}).") from None
        return folders, files

    def add_classes(self, folder, part, entries=None):
        """Adds the images of each class folder in `folder`."""
        folders, files = entries or self.entries(folder)
        if not folders:
            images = [name for name in files if is_image_file(name)]
            if images:
                raise ValueError(
                    f"{folder} holds {len(images)} images but no class folders: put each "
                    f"class's images in {os.path.join(folder, '<class>')}/ (e.g. "
                    f"{os.path.join(folder, 'cat', images[0])}).")
            found = f" (only {len(files)} other files)" if files else ""
            raise ValueError(f"{folder} is empty{found}: it needs one folder of images per "
                             f"class, {os.path.join(folder, '<class>', '<image>')}.")
        for name in files:
            self.skip("not in a class folder", os.path.join(folder, name))
        before = len(self.paths)
        for name in sorted(folders):
            images = self.images(os.path.join(folder, name))
            if not images:
                self.skip("empty class folder", os.path.join(folder, name))
            self.paths += images
            self.classes += [name] * len(images)
            self.parts += [part] * len(images)
        if len(self.paths) == before:
            raise ValueError(f"{folder}: no images in its {len(folders)} class folders "
                             f"(image files end in {', '.join(IMAGE_EXTENSIONS)}, any case).")

    def images_among(self, folder, files):
        """The paths of the image files among `files` (names in `folder`), in order;
        the other files are recorded as skipped."""
        images = []
        for name in files:
            if is_image_file(name):
                images.append(os.path.join(folder, name))
            else:
                self.skip("not an image", os.path.join(folder, name))
        return images

    def images(self, folder):
        """The sorted image paths under `folder` (sub-folders included, each once)."""
        found, pending, visited = [], [folder], set()
        while pending:
            current = pending.pop()
            real = os.path.realpath(current)
            if real in visited:  # a symbolic link back up the tree
                continue
            visited.add(real)
            folders, files = self.entries(current)
            found += self.images_among(current, files)
            pending += [os.path.join(current, name) for name in folders]
        found.sort()
        return found

    def warn(self, what):
        if not self.skipped:
            return
        count = sum(len(paths) for paths in self.skipped.values())
        detail = ", ".join(f"{reason}: {len(paths)}" for reason, paths in
                           sorted(self.skipped.items()))
        first = "; ".join(f"{path} ({reason})" for reason, paths in sorted(self.skipped.items())
                          for path in paths[:_SHOWN])
        warnings.warn(f"{what}: skipped {count} entries ({detail}); first: {first}",
                      stacklevel=3)


def is_image_file(name):
    """Whether a file name has an image extension TensorFlow decodes (any case); the
    file itself is not opened."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _read_csv(path):
    """`([(line, path, label, split or None, {other column: cell})], has_split)`,
    checked line by line."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)
        if header is None:
            raise ValueError(f"{path} is empty: it needs a header row path,label[,split] "
                             "and one row per image.")
        columns = [cell.strip().lower() for cell in header]
        missing = [name for name in ("path", "label") if name not in columns]
        if missing:
            raise ValueError(
                f"{path}, line {reader.line_num}: no {' or '.join(map(repr, missing))} column; "
                f"found {', '.join(map(repr, header))}. The header row must name the columns "
                "path,label and optionally split.")
        repeated = sorted({name for name in columns if name and columns.count(name) > 1})
        if repeated:
            raise ValueError(f"{path}, line {reader.line_num}: column "
                             f"{', '.join(map(repr, repeated))} appears more than once.")
        at = {name: columns.index(name) for name in ("path", "label", "split")
              if name in columns}
        others = {header[i].strip(): i for i, name in enumerate(columns)
                  if name and name not in at}
        rows = []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            where = f"{path}, line {reader.line_num}"
            if len(row) != len(columns):
                raise ValueError(f"{where}: expected {len(columns)} fields "
                                 f"({','.join(header)}), got {len(row)}: {','.join(row)!r}.")
            name, label = row[at["path"]].strip(), row[at["label"]].strip()
            if not name or not label:
                raise ValueError(f"{where}: empty {'path' if not name else 'label'}.")
            part = row[at["split"]].strip().lower() if "split" in at else None
            if part is not None and part not in SPLITS:
                raise ValueError(f"{where}: split must be train, test, query or gallery; got "
                                 f"{row[at['split']]!r}.")
            rows.append((reader.line_num, name, label, part,
                         {column: row[i].strip() for column, i in others.items()}))
    if not rows:
        raise ValueError(f"{path} has a header row but no image rows.")
    return rows, "split" in at


def _label_order(labels):
    """Class names sorted as numbers when they all are integers, else as strings."""
    try:
        return sorted(labels, key=lambda label: (int(label), label))
    except ValueError:
        return sorted(labels)


def _check_parts(given, where, hint=""):
    """The parts of a given split must be train + test or train + query + gallery."""
    given = set(given)
    if given not in ({"train", "test"}, {"train", "query", "gallery"}):
        raise ValueError(f"{where}: a given split needs train and test, or train, query and "
                         f"gallery; got {', '.join(p for p in SPLITS if p in given)} {hint}"
                         .rstrip() + ".")


def _splits(name, root, paths, classes, parts, test_classes, seed, order, what=None):
    """The `DMLSplits` of listed images: `classes[i]` is image i's class name,
    `parts[i]` its given split part (or `parts=None`: split the classes at
    random). `order` sorts the class names."""
    what = what or root
    class_names = order(set(classes))
    ids = {class_name: number for number, class_name in enumerate(class_names)}
    raw = np.fromiter((ids[c] for c in classes), np.int64, len(classes))
    if parts is None:
        is_test = np.zeros(len(class_names), bool)
        shuffled = np.random.default_rng(seed).permutation(len(class_names))
        is_test[shuffled[:_test_class_count(test_classes, class_names, what)]] = True
        rows = {"train": np.flatnonzero(~is_test[raw]), "test": np.flatnonzero(is_test[raw])}
    else:
        parts = np.asarray(parts)
        _check_parts(set(parts.tolist()), f"{what}: split values")
        rows = {part: np.flatnonzero(parts == part) for part in SPLITS}
        if len(rows["query"]):
            rows["test"] = np.concatenate([rows["query"], rows["gallery"]])
        shared = np.intersect1d(raw[rows["train"]], raw[rows["test"]])
        if len(shared):
            raise ValueError(
                f"{what}: {len(shared)} classes are in both train and test (e.g. "
                f"{', '.join(class_names[c] for c in shared[:_SHOWN])}); deep metric "
                "learning is evaluated on classes not seen in training: move or rename them.")
    names = dict(enumerate(class_names))
    train, test = (labeled_from_raw(raw[rows[part]], paths=[paths[i] for i in rows[part]],
                                    names=names, what=f"{what} {part}")
                   for part in ("train", "test"))
    query = gallery = None
    if parts is not None and len(rows["query"]):
        num_query = len(rows["query"])
        query = test.subset(np.arange(num_query), remap=False)
        gallery = test.subset(np.arange(num_query, len(test)), remap=False)
    return DMLSplits(name=name, train=train, test=test, query=query, gallery=gallery,
                     root=root)


def _test_class_count(test_classes, class_names, what):
    """How many classes to hold out: `test_classes` as a fraction or a count (0: none,
    every class trains)."""
    total = len(class_names)
    if isinstance(test_classes, (int, np.integer)) and not isinstance(test_classes, bool) \
            and test_classes == 0:
        return 0
    if total < 2:
        raise ValueError(
            f"{what}: {total} class ({', '.join(class_names)}); a class-disjoint train / test "
            "split needs at least 2 classes (or give the split: train/ and test/ folders, a "
            "split column).")
    count = None
    if isinstance(test_classes, (int, np.integer)) and not isinstance(test_classes, bool):
        count = int(test_classes)
    elif isinstance(test_classes, (float, np.floating)) and 0 < test_classes < 1:
        count = min(max(round(test_classes * total), 1), total - 1)
    if count is None or not 1 <= count < total:
        raise ValueError(f"test_classes must be a fraction in (0, 1) or a number of classes "
                         f"from 0 to {total - 1} ({what} has {total} classes); got "
                         f"{test_classes!r}.")
    return count
