"""The data `keras-dml evaluate` measures: embedded queries (and gallery), their images for
the report, and who may not find whom."""

import csv
import dataclasses
import os

import numpy as np

__all__ = ["EvaluationData", "load"]

_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


@dataclasses.dataclass
class EvaluationData:
    """Queries (and a gallery; None: leave-one-out on the queries) with their images
    (arrays or file paths) and optional item / group ids."""

    description: str
    query_embeddings: np.ndarray
    query_labels: np.ndarray
    query_images: object
    gallery_embeddings: np.ndarray = None
    gallery_labels: np.ndarray = None
    gallery_images: object = None
    query_ids: np.ndarray = None
    gallery_ids: np.ndarray = None
    query_groups: np.ndarray = None
    gallery_groups: np.ndarray = None
    class_names: list = None

    def arrays(self):
        return (self.query_embeddings, self.query_labels, self.gallery_embeddings,
                self.gallery_labels)

    def exclusions(self):
        return {"query_ids": self.query_ids, "gallery_ids": self.gallery_ids,
                "query_groups": self.query_groups, "gallery_groups": self.gallery_groups}

    def write_report(self, path, report, metrics_rows, ranking=None):
        """`report.html` with a t-SNE map of (up to 1,000) query embeddings; its failure
        sections show `report`, the ranking named `ranking`."""
        from keras_dml import plots
        from keras_dml.plots.report import write_report
        from keras_dml.training.outputs import TSNE_ITERATIONS, TSNE_POINTS, TSNE_THREADS

        tsne = os.path.join(os.path.dirname(path), "tsne.png")
        plots.tsne_map(self.query_embeddings, self.query_labels, tsne, max_points=TSNE_POINTS,
                       max_iter=TSNE_ITERATIONS, threads=TSNE_THREADS,
                       class_names=self.class_names)
        write_report(path, report, self.query_images, self.gallery_images,
                     title="keras-dml evaluate", metrics_rows=metrics_rows,
                     figures=[("The embedding map (t-SNE of the queries)", tsne)],
                     class_names=self.class_names, notes=[self.description],
                     ranking=ranking)


def load(args, run):
    """The `EvaluationData` that `keras-dml evaluate`'s arguments name."""
    if args.query is not None:
        queries = _listed(run, args.query, args.skip_bad_images)
        gallery = _listed(run, args.gallery, args.skip_bad_images)
        return EvaluationData(
            f"{len(queries[1])} queries from {args.query} searched among {len(gallery[1])} "
            f"gallery images from {args.gallery}", *queries, *gallery)
    if args.images is not None:
        if args.images.lower().endswith(".csv") and _is_query_gallery_csv(args.images):
            return _query_gallery_csv(run, args.images, args.skip_bad_images)
        embeddings, labels, paths = _listed(run, args.images, args.skip_bad_images)
        return EvaluationData(f"{len(labels)} images from {args.images}, leave-one-out",
                              embeddings, labels, paths)
    from keras_dml.cli.arguments import kept, report_skipped
    from keras_dml.index.runs import embed_split, load_split

    split = load_split(run, args.dataset, args.split, args.data_dir)
    names = [str(name) for name in split.class_names]
    result = embed_split(run, split, skip_bad_images=args.skip_bad_images)
    report_skipped(result.skipped)
    embeddings, labels = result.embeddings, result.labels
    images = kept(split.images if split.images is not None else split.paths, result)
    return EvaluationData(
        f"{args.dataset or run.dataset} {args.split} split: {len(labels)} images of "
        f"{len(names)} classes, leave-one-out", embeddings, labels, images, class_names=names)


def _listed(run, source, skip_bad_images=False):
    """`(embeddings, labels, paths)` of the labelled images of a folder or CSV."""
    from keras_dml.cli.arguments import embed_catalogue
    from keras_dml.index.catalogue import list_images

    catalogue = list_images(source)
    if not catalogue.labelled:
        raise ValueError(f"{source} has no class labels: evaluation needs root/<class>/<image> "
                         "folders or a label column.")
    result = embed_catalogue(run, catalogue, skip_bad_images=skip_bad_images)
    labels = np.asarray(result.labels)
    labelled = labels != ""
    if not labelled.all():
        print(f"{int((~labelled).sum())} images of {source} outside a class folder left out")
    return (result.embeddings[labelled], labels[labelled],
            list(np.asarray(result.paths)[labelled]))


def _is_query_gallery_csv(path):
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return {"is_query", "is_gallery"} <= {name.strip() for name in header}


def _flag(value, column, line, path):
    text = str(value).strip().lower()
    if text in _TRUE or text in ("1.0",):
        return True
    if text in _FALSE or text in ("0.0", "nan", "none"):
        return False
    raise ValueError(f"{path} line {line}: {column} must be true/false or 1/0, got {value!r}.")


def _query_gallery_csv(run, path, skip_bad_images=False):
    """Open Metric Learning's format: path,label,is_query,is_gallery[,sequence] rows (paths
    relative to the CSV's folder); rows neither query nor gallery (training rows) are
    skipped; an image both query and gallery is not its own result."""
    from keras_dml.cli.arguments import embed_catalogue
    from keras_dml.index.catalogue import Catalogue

    root = os.path.dirname(os.path.abspath(path))
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"path", "label"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path} lacks the column(s) {', '.join(sorted(missing))} "
                             "(Open Metric Learning: path,label,is_query,is_gallery).")
        rows = []
        for line, row in enumerate(reader, start=2):
            is_query = _flag(row["is_query"], "is_query", line, path)
            is_gallery = _flag(row["is_gallery"], "is_gallery", line, path)
            if is_query or is_gallery:
                file = row["path"].strip()
                file = file if os.path.isabs(file) else os.path.join(root, file)
                if not os.path.isfile(file):
                    raise FileNotFoundError(f"{path} line {line}: no image file at {file}.")
                rows.append((file, row["label"].strip(), is_query, is_gallery,
                             (row.get("sequence") or "").strip()))
    if not rows:
        raise ValueError(f"{path} has no row with is_query or is_gallery true.")
    result = embed_catalogue(run, Catalogue(root, [r[0] for r in rows], [r[0] for r in rows],
                                            [r[1] for r in rows]), skip_bad_images=skip_bad_images)
    rows = [rows[i] for i in result.positions]
    paths, labels, embeddings = result.paths, np.array([r[1] for r in rows]), result.embeddings
    is_query = np.array([r[2] for r in rows])
    is_gallery = np.array([r[3] for r in rows])
    sequences = np.array([r[4] for r in rows])
    grouped = bool((sequences != "").any())
    # a row without a sequence is its own group
    groups = np.where(sequences != "", sequences, np.char.add("row:", np.arange(len(rows))
                                                                .astype(str)))
    ids = np.arange(len(rows))
    q, g = np.flatnonzero(is_query), np.flatnonzero(is_gallery)
    return EvaluationData(
        f"{len(q)} queries searched among {len(g)} gallery images from {path}"
        + (" (a sequence's items not searched for each other)" if grouped else ""),
        embeddings[q], labels[q], [paths[i] for i in q], embeddings[g], labels[g],
        [paths[i] for i in g], ids[q], ids[g], groups[q] if grouped else None,
        groups[g] if grouped else None)
