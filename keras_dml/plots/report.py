"""`report.html`: one self-contained page to look at a run's retrieval in a browser.

Everything is inside the file (images as `data:` URIs, no script, no external
link), so it opens offline and can be mailed. It shows the before/after table,
the figures given (Recall@K curves, embedding map), the worst queries by average
precision with their top-k framed green (same class) or red and each file path
below, the classes of lowest Recall@1 and the most confused class pairs.
"""

import base64
import html
import io
import os

import numpy as np

from keras_dml.plots.failures import _name, confused_pairs, image_source, per_class_bars
from keras_dml.plots.retrieval import _displayable

__all__ = ["write_report", "write_run_report"]

THUMBNAIL = 96  # pixels, longest side

_STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.85em}td,th{padding:2px 8px;border:1px solid #ddd;
text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}
.q{display:flex;gap:6px;margin:8px 0;align-items:flex-start}
.c{width:104px;font-size:.65em;word-break:break-all;text-align:center}
.c img{width:96px;height:96px;object-fit:contain;background:#eee;border:4px solid #999}
.ok img{border-color:#2a2}.bad img{border-color:#d22}.query img{border-color:#222}
.fig{max-width:100%}.note{color:#555;font-size:.85em}
"""


def _png(figure_path):
    with open(figure_path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


def thumbnail_uri(image):
    """A `data:` URI of an image (array, any range) as a JPEG of at most `THUMBNAIL`
    pixels a side."""
    from PIL import Image

    picture = _displayable(image)
    array = np.clip(np.rint(picture * 255), 0, 255).astype(np.uint8)
    pil = Image.fromarray(array if array.ndim == 3 else array, "RGB" if array.ndim == 3 else "L")
    pil.thumbnail((THUMBNAIL, THUMBNAIL))
    if max(pil.size) < THUMBNAIL:  # small images (Omniglot 28 px) scaled up, sharp
        scale = THUMBNAIL / max(pil.size)
        pil = pil.resize((round(pil.size[0] * scale), round(pil.size[1] * scale)),
                         Image.NEAREST)
    buffer = io.BytesIO()
    pil.save(buffer, "JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def _cell(image, kind, caption, path):
    caption = html.escape(caption) + ("<br>" + html.escape(str(path)) if path else "")
    return (f'<div class="c {kind}"><img src="{thumbnail_uri(image)}" alt="{kind}">'
            f"<br>{caption}</div>")


def _metrics_table(rows):
    keys = [k for k in rows[0][1] if not k.startswith("num_")]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join(
        f'<tr><td class="l">{html.escape(title)}</td>'
        + "".join(f"<td>{100 * values[k]:.1f}</td>" if k in values else "<td></td>"
                  for k in keys) + "</tr>" for title, values in rows)
    return f'<table><tr><th class="l"></th>{head}</tr>{body}</table>'


def write_report(path, report, query_images, gallery_images=None, query_paths=None,
                 gallery_paths=None, title="Retrieval report", metrics_rows=None,
                 figures=(), class_names=None, worst=12, k=5, notes=(), ranking=None):
    """Writes `report.html` for a `keras_dml.evaluation.RetrievalReport`.

    Args:
        path: the HTML file to write.
        report: a `RetrievalReport`.
        query_images: the queries' images: an array or file paths.
        gallery_images: the gallery's. Defaults to None: the queries'.
        query_paths, gallery_paths: file paths printed under the thumbnails.
            Defaults to the images when they are paths, else none.
        title: the page title.
        metrics_rows: `[(row title, metrics dict)]` for the table (e.g. before
            and after training). Defaults to `[("evaluation", report.metrics)]`.
        figures: `[(caption, PNG file)]` embedded in order (e.g. the Recall@K
            curves, the embedding map).
        class_names: optional names indexed by label.
        worst: worst queries shown. Defaults to 12.
        k: results shown per query. Defaults to 5.
        notes: lines printed under the title (data source, model).
        ranking: the name of the ranking `report` holds (e.g. `"k_reciprocal"`),
            named in the headings of the worst queries, weakest classes and confused
            pairs when several are in the table. Defaults to None: not named.

    Returns:
        `path`.
    """
    from keras_dml.data.labels import is_paths

    if query_paths is None and is_paths(query_images):
        query_paths = list(query_images)
    if gallery_images is None:
        gallery_images, gallery_paths = query_images, query_paths
    elif gallery_paths is None and is_paths(gallery_images):
        gallery_paths = list(gallery_images)
    queries, gallery = image_source(query_images), image_source(gallery_images)
    root = _common_folder([p for p in (query_paths or []) + (gallery_paths or [])])
    if root:  # paths under thumbnails relative to their common folder, named once
        notes = [*notes, f"Image paths below are relative to {root}"]
        query_paths = query_paths and [os.path.relpath(p, root) for p in query_paths]
        gallery_paths = gallery_paths and [os.path.relpath(p, root) for p in gallery_paths]
    k = min(k, report.top.shape[1])
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts += [f'<p class="note">{html.escape(line)}</p>' for line in notes]
    parts.append("<h2>Retrieval metrics (%)</h2>")
    parts.append(_metrics_table(metrics_rows or [("evaluation", report.metrics)]))
    parts.append(f'<p class="note">{report.metrics["num_queries"]} queries evaluated, '
                 f'{report.metrics["num_excluded_queries"]} without a gallery item of their '
                 "class left out.</p>")
    for caption, figure in figures:
        parts.append(f"<h2>{html.escape(caption)}</h2><img class='fig' src='{_png(figure)}' "
                     f"alt='{html.escape(caption)}'>")
    shown_as = "" if ranking is None else f" ({html.escape(ranking)})"
    if ranking is not None:
        parts.append(f'<p class="note">The worst queries, weakest classes and confused pairs '
                     f"below are those of the ranking {html.escape(ranking)}.</p>")
    parts.append(f"<h2>The {worst} worst queries by average precision{shown_as}</h2>"
                 "<p class='note'>Black: the query; green: same class; red: another class. "
                 "Under each: its class and file.</p>")
    correct = report.correct()
    for position in report.worst_queries(worst):
        row = report.evaluated[position]
        cells = [_cell(queries[row], "query",
                       f"AP {report.average_precision[position]:.2f} | "
                       f"{_name(report.query_labels[row], class_names)}",
                       None if query_paths is None else query_paths[row])]
        for rank in range(k):
            item = report.top[position, rank]
            cells.append(_cell(gallery[item], "ok" if correct[position, rank] else "bad",
                               f"#{rank + 1} {_name(report.gallery_labels[item], class_names)}",
                               None if gallery_paths is None else gallery_paths[item]))
        parts.append('<div class="q">' + "".join(cells) + "</div>")
    folder = os.path.dirname(os.path.abspath(path))
    bars = os.path.join(folder, ".per_class.png")
    pairs_png = os.path.join(folder, ".confused_pairs.png")
    try:
        shown = per_class_bars(report, bars, 20, class_names)
        pairs = confused_pairs(report, pairs_png, 10, class_names)
        parts.append(f"<h2>Classes with the lowest Recall@1{shown_as}</h2>"
                     f"<img class='fig' src='{_png(bars)}' alt='per-class Recall@1'>")
        parts.append(_class_table(shown, class_names))
        parts.append(f"<h2>Most confused class pairs{shown_as}</h2>"
                     f"<img class='fig' src='{_png(pairs_png)}' alt='confused pairs'>")
    finally:
        for temporary in (bars, pairs_png):
            if os.path.exists(temporary):
                os.remove(temporary)
    parts.append("<table><tr><th class='l'>class</th><th class='l'>class</th>"
                 "<th>rank-1 confusions</th></tr>" + "".join(
                     f"<tr><td class='l'>{html.escape(_name(a, class_names))}</td>"
                     f"<td class='l'>{html.escape(_name(b, class_names))}</td><td>{n}</td></tr>"
                     for a, b, n in pairs) + "</table></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path


def _common_folder(paths):
    """The deepest folder holding every path (None for no paths or no shared folder)."""
    if not paths:
        return None
    try:
        root = os.path.commonpath([os.path.abspath(str(p)) for p in paths])
    except ValueError:
        return None
    if os.path.isfile(root):
        root = os.path.dirname(root)
    return root if root not in ("", os.sep) else None


def _class_table(rows, class_names):
    keys = [key for key in rows[0] if key != "class"] if rows else []
    head = "".join(f"<th>{html.escape(key)}</th>" for key in keys)
    body = "".join(
        f"<tr><td class='l'>{html.escape(_name(row['class'], class_names))}</td>"
        + "".join(f"<td>{row[key]:.3f}</td>" if isinstance(row[key], float)
                  else f"<td>{row[key]}</td>" for key in keys) + "</tr>" for row in rows)
    return f"<table><tr><th class='l'>class</th>{head}</tr>{body}</table>"


def write_run_report(run_dir, split, embeddings, before, after, metric="cosine"):
    """`run_dir/report.html` of a trained run: leave-one-out on its evaluation `split`
    (a `LabeledImages` whose embeddings are given), the before/after table, and the
    run's `recall_curves.png` and `tsne.png` where drawn. Returns the path."""
    from keras_dml.evaluation.query_gallery import retrieval_report

    report = retrieval_report(embeddings, split.labels, metric=metric)
    figures = [(caption, os.path.join(run_dir, name)) for caption, name in (
        ("Recall@K during training", "recall_curves.png"),
        ("The embedding map (t-SNE)", "tsne.png")) if os.path.exists(os.path.join(run_dir,
                                                                                 name))]
    rows = [("before training", before), ("after training", after),
            ("after training (this report's ranking)", report.metrics)]
    images = split.images if split.images is not None else split.paths
    return write_report(os.path.join(run_dir, "report.html"), report, images,
                        title=f"keras-dml run {os.path.basename(os.path.abspath(run_dir))}",
                        metrics_rows=rows, figures=figures, class_names=split.class_names,
                        notes=[f"Evaluation split: {len(split.labels)} images, leave-one-out "
                               "(each image searched among the others)."])
