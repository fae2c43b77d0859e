"""Containers for a labelled image split and a class-disjoint train/test pair."""

import dataclasses
import warnings

import numpy as np

__all__ = ["DMLSplits", "LabeledImages", "check_image_files", "labeled_from_raw", "rotated_classes",
           "split_by_class_halves"]


def rotated_classes(images, labels, num_classes):
    """Images (N, H, W[, C]) and labels plus their three quarter turns as new classes:
    (4 N images, labels + t `num_classes` for t quarter turns)."""
    images, labels = np.asarray(images), np.asarray(labels)
    turned = [np.rot90(images, turns, axes=(1, 2)) for turns in range(4)]
    return (np.ascontiguousarray(np.concatenate(turned)),
            np.concatenate([labels + turns * num_classes for turns in range(4)]).astype(np.int32))


@dataclasses.dataclass
class LabeledImages:
    """One split of an image retrieval dataset.

    Exactly one of `images` (in memory) or `paths` (decoded lazily) is set.
    Labels are remapped to `0..num_classes - 1` within the split; the mapping
    back to the dataset's own ids is kept in `original_class_ids` and
    `class_names` (both indexed by label).

    Attributes:
        images: Array `(N, H, W, C)` or `None` when the split is file based.
        paths: List of `N` image file paths or `None` when in memory.
        labels: int32 array `(N,)` with values in `0..num_classes - 1`.
        class_names: Class name per label.
        original_class_ids: The dataset's class id per label.
        skipped: `(path, reason)` of every image dropped while loading.
    """

    images: np.ndarray | None
    paths: list | None
    labels: np.ndarray
    class_names: list
    original_class_ids: np.ndarray
    skipped: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if (self.images is None) == (self.paths is None):
            raise ValueError(
                "LabeledImages needs exactly one of `images` or `paths`; got "
                f"images={'None' if self.images is None else 'array'}, "
                f"paths={'None' if self.paths is None else 'list'}."
            )
        self.labels = np.asarray(self.labels)
        if self.labels.ndim != 1 or not np.issubdtype(self.labels.dtype, np.integer):
            raise ValueError(
                f"`labels` must be a 1-D integer array; got shape "
                f"{self.labels.shape} and dtype {self.labels.dtype}."
            )
        self.labels = self.labels.astype(np.int32)
        self.original_class_ids = np.asarray(self.original_class_ids)
        self.class_names = list(self.class_names)
        n = len(self.images) if self.images is not None else len(self.paths)
        if n != len(self.labels):
            raise ValueError(
                f"{n} images but {len(self.labels)} labels; they must match."
            )
        if len(self.class_names) != len(self.original_class_ids):
            raise ValueError(
                f"{len(self.class_names)} class names but "
                f"{len(self.original_class_ids)} original class ids."
            )
        if len(self.labels) and (
            self.labels.min() < 0 or self.labels.max() >= self.num_classes
        ):
            raise ValueError(
                f"labels must lie in [0, {self.num_classes}); got range "
                f"[{self.labels.min()}, {self.labels.max()}]."
            )

    @property
    def num_classes(self):
        """Number of classes in this split."""
        return len(self.class_names)

    def __repr__(self):
        if self.images is not None:
            held = f"in memory {tuple(np.shape(self.images))} {self.images.dtype}"
        else:
            held = "files" + (f", first {str(self.paths[0])!r}" if len(self.paths) else "")
        return f"LabeledImages({len(self)} images, {self.num_classes} classes, {held})"

    def __len__(self):
        return len(self.labels)

    def class_counts(self):
        """Number of images per label, shape `(num_classes,)`."""
        return np.bincount(self.labels, minlength=self.num_classes)

    def with_rotated_classes(self):
        """This split plus each class rotated by 90, 180 and 270 degrees as three new
        classes (4 x the classes; Vinyals et al. 2016's Omniglot augmentation).

        For data whose rotations are other classes, as characters are; labels
        `c + t C` hold class c turned t quarter turns. In-memory splits only.
        """
        if self.images is None:
            raise ValueError("rotated classes need a split held in memory (images), such as "
                             "omniglot's; this split reads its images from files.")
        images, labels = rotated_classes(self.images, self.labels, self.num_classes)
        turned = [f" (rotated {90 * turns})" if turns else "" for turns in range(4)]
        return LabeledImages(
            images=images, paths=None, labels=labels,
            class_names=[name + suffix for suffix in turned for name in self.class_names],
            original_class_ids=np.tile(self.original_class_ids, 4),
        )

    def subset(self, indices, remap=True):
        """The images at `indices`.

        Args:
            indices: Positions to keep.
            remap: Remap labels to 0..C'-1 over the kept classes (True), or
                keep this split's label space (False; e.g. In-Shop query and
                gallery share one). Defaults to True.
        """
        indices = np.asarray(indices, dtype=np.int64)
        if not remap:
            return dataclasses.replace(
                self,
                images=None if self.images is None else self.images[indices],
                paths=None if self.paths is None else [self.paths[i] for i in indices],
                labels=self.labels[indices],
                skipped=[],
            )
        kept, labels = np.unique(self.labels[indices], return_inverse=True)
        return LabeledImages(
            images=None if self.images is None else self.images[indices],
            paths=None if self.paths is None else [self.paths[i] for i in indices],
            labels=labels.astype(np.int32),
            class_names=[self.class_names[c] for c in kept],
            original_class_ids=self.original_class_ids[kept],
        )


@dataclasses.dataclass
class DMLSplits:
    """A class-disjoint train / test pair, as in the metric learning papers.

    Attributes:
        name: Dataset name, e.g. `"cub200"`.
        train: The training classes.
        test: The test classes (for In-Shop: query and gallery together).
        query: In-Shop only: the query images (labels shared with `gallery`).
        gallery: In-Shop only: the gallery images.
        root: For a user's own files (`from_directory`, `from_csv`): the folder
            the images are listed from (`os.path.relpath(path, root)` is an
            image's id); else `None`.
    """

    name: str
    train: LabeledImages
    test: LabeledImages
    query: LabeledImages | None = None
    gallery: LabeledImages | None = None
    root: str | None = None

    def __repr__(self):
        parts = [f"{split}={getattr(self, split)!r}" for split in
                 ("train", "test", "query", "gallery") if getattr(self, split) is not None]
        root = "" if self.root is None else f", root={self.root!r}"
        return f"DMLSplits({self.name!r}, {', '.join(parts)}{root})"

    def __getitem__(self, split):
        if split not in ("train", "test", "query", "gallery"):
            raise ValueError(
                f"split must be 'train', 'test', 'query' or 'gallery'; got {split!r}."
            )
        value = getattr(self, split)
        if value is None:
            raise ValueError(f"dataset {self.name!r} has no {split!r} split.")
        return value


def labeled_from_raw(raw_labels, *, images=None, paths=None, names=None, what="split"):
    """Builds a `LabeledImages`, remapping `raw_labels` to 0..C-1.

    Args:
        raw_labels: Class id per image (any sortable ids).
        images: In-memory images, or `None`.
        paths: Image paths, or `None`.
        names: Optional dict `raw id -> class name`. Defaults to `str(id)`.
        what: Split description used in warnings.

    Returns:
        A `LabeledImages`. Classes with fewer than 2 images are reported
        with a warning (they give no positive pair).
    """
    raw_labels = np.asarray(raw_labels)
    original, labels = np.unique(raw_labels, return_inverse=True)
    names = names or {}
    class_names = [str(names.get(_py(c), c)) for c in original]
    result = LabeledImages(
        images=images,
        paths=paths,
        labels=labels.astype(np.int32).reshape(-1),
        class_names=class_names,
        original_class_ids=original,
    )
    report_small_classes(result, what)
    return result


def split_by_class_halves(raw_labels, *, paths=None, images=None, names=None,
                          dataset="dataset"):
    """The CUB / Cars protocol: first half of the sorted class ids train, rest test.

    Returns:
        `(train, test)` `LabeledImages`.
    """
    raw_labels = np.asarray(raw_labels)
    classes = np.unique(raw_labels)
    is_train = np.isin(raw_labels, classes[: len(classes) // 2])
    parts = []
    for mask, what in ((is_train, "train"), (~is_train, "test")):
        rows = np.flatnonzero(mask)
        parts.append(labeled_from_raw(
            raw_labels[rows],
            paths=None if paths is None else [paths[i] for i in rows],
            images=None if images is None else images[rows],
            names=names,
            what=f"{dataset} {what}",
        ))
    return tuple(parts)


def report_small_classes(split, what="split", min_count=2):
    """Warns about classes with fewer than `min_count` images; returns their labels."""
    counts = split.class_counts()
    small = np.flatnonzero(counts < min_count)
    if len(small):
        shown = ", ".join(split.class_names[c] for c in small[:5])
        warnings.warn(
            f"{what}: {len(small)} of {split.num_classes} classes have fewer than "
            f"{min_count} images (no positive pair), e.g. {shown}.",
            stacklevel=3,
        )
    return small


_SIGNATURES = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG\r\n\x1a\n",
    b"GIF87a",
    b"GIF89a",
    b"BM",  # BMP
)


def check_image_files(paths, labels, what="split", sources=None):
    """Drops missing, empty and non-image files, with one counted warning.

    The warning names the first few dropped files with their reason and,
    when `sources` (one description per path, e.g. "images.txt line 12") is
    given, where each is listed.

    Only the first bytes of each file are read (a signature check), so this is
    cheap even for SOP's 120k files; bodies that are corrupt past the header
    are caught by the pipeline (see `keras_dml.data.class_balanced_batches`).

    Returns:
        `(kept_paths, kept_labels, skipped)` with `skipped` a list of
        `(path, reason)`.
    """
    kept, kept_labels, skipped, where = [], [], [], []
    for number, (path, label) in enumerate(zip(paths, labels)):
        reason = _file_problem(path)
        if reason:
            skipped.append((path, reason))
            where.append(f" ({sources[number]})" if sources else "")
        else:
            kept.append(path)
            kept_labels.append(label)
    if skipped:
        reasons = {}
        for _, reason in skipped:
            reasons[reason] = reasons.get(reason, 0) + 1
        detail = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items()))
        first = "; ".join(f"{path} {reason}{at}"
                          for (path, reason), at in zip(skipped[:5], where))
        warnings.warn(
            f"{what}: skipped {len(skipped)} of {len(paths)} images ({detail}); "
            f"first: {first}",
            stacklevel=3,
        )
    return kept, np.asarray(kept_labels), skipped


def _file_problem(path):
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if not head:
        return "empty"
    if not any(head.startswith(sig) for sig in _SIGNATURES):
        return "not an image"
    return None


def _py(value):
    return value.item() if hasattr(value, "item") else value
