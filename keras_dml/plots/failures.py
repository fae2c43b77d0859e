"""Where retrieval fails: the worst queries, per-class Recall@1 bars, confused class pairs.

Each function draws from a `keras_dml.evaluation.RetrievalReport`, writes a PNG
and returns the data it drew.
"""

import numpy as np

from keras_dml import hyperparameters
from keras_dml.plots.retrieval import _figure, _ImageFiles, framed_image

__all__ = ["confused_pairs", "image_source", "per_class_bars", "worst_queries"]


def image_source(images):
    """`images[i]` as drawable: an image array as is, or file paths read on demand."""
    from keras_dml.data.labels import is_paths

    return _ImageFiles(images) if is_paths(images) else np.asarray(images)


def _name(label, class_names):
    if class_names is not None and isinstance(label, (int, np.integer)) and \
            0 <= label < len(class_names):
        return str(class_names[label])
    return str(label)


def worst_queries(report, query_images, gallery_images=None, path="worst_queries.png",
                  count=8, k=5, class_names=None, dpi=100):
    """The `count` queries of lowest average precision with their top-k, framed green
    (same class) or red.

    Args:
        report: A `RetrievalReport`.
        query_images: the queries' images (array or file paths, as `retrieval_grid`).
        gallery_images: the gallery's. Defaults to None: the queries' (leave-one-out).
        path: PNG file to write. Defaults to "worst_queries.png".
        count: queries shown. Defaults to 8.
        k: results per query (at most the report's 10). Defaults to 5.
        class_names: optional names indexed by label.
        dpi: resolution. Defaults to 100.

    Returns:
        dict with "queries" (query rows), "neighbors" (gallery rows, (count, k)),
        "correct" (bool (count, k)) and "average_precision".
    """
    count = hyperparameters.integer_at_least("count", count, 1)
    k = min(hyperparameters.integer_at_least("k", k, 1), report.top.shape[1])
    queries_images = image_source(query_images)
    gallery = queries_images if gallery_images is None else image_source(gallery_images)
    worst = report.worst_queries(count)
    rows, neighbours = report.evaluated[worst], report.top[worst, :k]
    correct = report.correct()[worst, :k]
    figure = _figure(1.3 * (k + 1) + 0.8, 1.45 * len(rows) + 0.4)
    grid = figure.subplots(len(rows), k + 1, squeeze=False)
    for line, (row, ap) in enumerate(zip(rows, report.average_precision[worst])):
        cells = [(queries_images[row], "black", f"AP {ap:.2f}")] + [
            (gallery[n], "tab:green" if ok else "tab:red", f"#{i + 1}")
            for i, (n, ok) in enumerate(zip(neighbours[line], correct[line]))]
        for column, (axes, (image, colour, title)) in enumerate(zip(grid[line], cells)):
            framed_image(axes, image, colour)
            axes.set_title(title, fontsize="x-small")
            label = (report.query_labels[row] if column == 0
                     else report.gallery_labels[neighbours[line, column - 1]])
            axes.set_xlabel(_name(label, class_names), fontsize="xx-small",
                            color=colour if colour != "black" else "black", labelpad=1)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return {"queries": rows, "neighbors": neighbours, "correct": correct,
            "average_precision": report.average_precision[worst]}


def per_class_bars(report, path="per_class.png", count=20, class_names=None, dpi=100):
    """Recall@1 (%) of the `count` classes with the lowest, as horizontal bars with the
    mean over all classes as a line.

    Returns:
        The drawn rows of `report.per_class()` (lowest Recall@1 first).
    """
    count = hyperparameters.integer_at_least("count", count, 1)
    table = report.per_class((1,))
    shown = table[:count]
    figure = _figure(6.5, 0.28 * len(shown) + 1.2)
    axes = figure.subplots()
    names = [_name(row["class"], class_names) for row in shown]
    values = [100 * row["recall@1"] for row in shown]
    axes.barh(range(len(shown)), values, color="tab:orange")
    mean = 100 * np.mean([row["recall@1"] for row in table])
    axes.axvline(mean, color="tab:blue", linestyle="--", label=f"mean of all {len(table)} "
                 f"classes: {mean:.1f}")
    axes.set_yticks(range(len(shown)), names, fontsize="x-small")
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    axes.set_xlabel("Recall@1 (%)")
    axes.legend(fontsize="small", loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return shown


def confused_pairs(report, path="confused_pairs.png", count=10, class_names=None, dpi=100):
    """The class pairs most often confused at rank 1, as horizontal bars of counts.

    Returns:
        `[(class_a, class_b, count)]` as `report.confused_pairs(count)`.
    """
    pairs = report.confused_pairs(hyperparameters.integer_at_least("count", count, 1))
    figure = _figure(6.5, 0.3 * max(len(pairs), 1) + 1.2)
    axes = figure.subplots()
    names = [f"{_name(a, class_names)}  /  {_name(b, class_names)}" for a, b, _ in pairs]
    axes.barh(range(len(pairs)), [n for _, _, n in pairs], color="tab:red")
    axes.set_yticks(range(len(pairs)), names, fontsize="x-small")
    axes.invert_yaxis()
    axes.set_xlabel("queries whose best result is of the other class")
    if not pairs:
        axes.text(0.5, 0.5, "no query's best result is of another class", ha="center",
                  transform=axes.transAxes)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return pairs
