"""Retrieval figures: Recall@K per epoch, a t-SNE map, a grid of top-k retrievals.

Each function writes a PNG and returns the data it drew.
"""

import re

import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.evaluation.knn import nearest_neighbors

__all__ = ["framed_image", "recall_curves", "retrieval_grid", "tsne_map"]

_RECALL_KEY = re.compile(r"recall@(\d+)$")


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def _epochs_and_logs(history):
    """(0-based epochs, {key: values}) from a History, a RecallAtK, or a dict."""
    if hasattr(history, "history") and isinstance(history.history, dict):
        logs = dict(history.history)
        epochs = logs.pop("epoch", None)
        if epochs is None:
            epochs = list(getattr(history, "epoch", []))
    elif isinstance(history, dict):
        logs = dict(history)
        epochs = logs.pop("epoch", None)
    else:
        raise ValueError(
            "history must be a keras History, a RecallAtK callback or a dict of lists, "
            f"got {type(history).__name__}."
        )
    return epochs, logs


def _recall_order(key):
    """Sort "val_recall@10" after "val_recall@2": by prefix, then by K."""
    match = _RECALL_KEY.search(key)
    return key[: match.start()], int(match.group(1))


def _curve_label(key):
    """"val_recall@4" -> "Recall@4"; "val_seen_recall@1" -> "seen Recall@1"."""
    name = key[4:] if key.startswith("val_") else key
    return name.replace("recall@", "Recall@").replace("_", " ")


def recall_curves(history, path="recall_curves.png", keys=None, dpi=100, steps_per_epoch=None):
    """Recall@K (in %) against training, one line per K, integer ticks.

    An entry at epoch -1 is the untrained network: drawn at x = 0.

    Args:
        history: what `model.fit` returned (a `keras.callbacks.History`), the
            `keras_dml.callbacks.RecallAtK` callback itself (needed when it ran
            every n > 1 epochs), or a dict `{"epoch": [...], key: [...]}`
            (0-based epochs; -1 for the untrained network).
        path: PNG file to write. Defaults to "recall_curves.png".
        keys: log keys to draw. Defaults to None: every key ending in
            `recall@<K>`, sorted by K.
        dpi: resolution. Defaults to 100.
        steps_per_epoch: when given, x is the number of training steps
            (epochs x steps_per_epoch) instead of the number of epochs.

    Returns:
        dict `{key: (x, values_in_percent)}`, x as drawn (epochs 1-based, or steps).

    Examples:
        >>> history = model.fit(..., callbacks=[RecallAtK((x_val, y_val))])  # doctest: +SKIP
        >>> recall_curves(history, "runs/recall.png")  # doctest: +SKIP
    """
    from matplotlib.ticker import MaxNLocator

    epochs, logs = _epochs_and_logs(history)
    if keys is None:
        keys = sorted((key for key in logs if _RECALL_KEY.search(key)), key=_recall_order)
        if not keys:
            raise ValueError(
                f"history has no recall@K entries (keys: {sorted(logs)}); train with "
                "keras_dml.callbacks.RecallAtK."
            )
    missing = [key for key in keys if key not in logs]
    if missing:
        raise ValueError(f"history has no {missing}; it has {sorted(logs)}.")
    scale = 1 if steps_per_epoch is None else hyperparameters.integer_at_least(
        "steps_per_epoch", steps_per_epoch, 1)
    drawn = {}
    for key in keys:
        values = np.asarray(logs[key], np.float64) * 100.0
        if epochs is None or len(epochs) != len(values):
            raise ValueError(
                f"{key} has {len(values)} values for {0 if epochs is None else len(epochs)} "
                "epochs: it was not logged every epoch, pass the RecallAtK callback instead."
            )
        drawn[key] = ((np.asarray(epochs, np.int64) + 1) * scale, values)
    figure = _figure(5.5, 3.8)
    axes = figure.subplots()
    for key, (x, y) in drawn.items():
        axes.plot(x, y, marker="o", markersize=4, label=_curve_label(key))
    axes.set_xlabel("training steps" if steps_per_epoch else "epoch")
    axes.set_ylabel("Recall@K on held-out classes (%)")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylim(bottom=0, top=100)
    if any(x[0] == 0 for x, _ in drawn.values()):
        axes.set_title("Recall@K (at 0: before training)", fontsize="medium")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return drawn


def _tsne_rows(labels, max_points, highlight, seed):
    """(rows drawn, classes coloured): every image of up to `highlight` random
    classes, the rest of the `max_points` a random sample of the other images."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    coloured = classes if len(classes) <= highlight else np.sort(
        rng.choice(classes, highlight, replace=False))
    in_coloured = np.isin(labels, coloured)
    chosen = np.flatnonzero(in_coloured)
    if len(chosen) > max_points:
        chosen = rng.choice(chosen, max_points, replace=False)
    others = np.flatnonzero(~in_coloured)
    room = min(max_points - len(chosen), len(others))
    rows = np.concatenate([chosen, rng.choice(others, room, replace=False)])
    return np.sort(rows).astype(np.int64), coloured


@hyperparameters.renamed_keywords(distance="metric")
def tsne_map(embeddings, labels, path="tsne.png", max_points=3000, perplexity=30.0,
             metric="cosine", seed=0, threads=None, dpi=100, highlight=20,
             class_names=None, max_iter=1000):
    """A t-SNE map of embeddings, up to `highlight` classes in colour (ICE supp. Figs. 2-4).

    With more than `highlight` classes, `highlight` random classes are drawn in
    colour with a legend (all their points), and a random sample of the other
    classes' points in grey, so hundreds of classes stay readable.

    Args:
        embeddings: float (N, d) array or tensor.
        labels: (N,) class ids.
        path: PNG file to write. Defaults to "tsne.png".
        max_points: at most this many points, a seeded random subset. Defaults
            to 3000.
        perplexity: t-SNE perplexity (clipped below the number of points).
            Defaults to 30.0.
        metric: "cosine" or "euclidean" geometry for t-SNE. Defaults to
            "cosine". (`distance=` is its deprecated name.)
        seed: subset and t-SNE random state. Defaults to 0.
        threads: OpenMP threads for t-SNE's gradient. Defaults to None (all);
            1 is much faster on a machine already busy with other work.
        dpi: resolution. Defaults to 100.
        highlight: classes drawn in colour, at most 20. Defaults to 20.
        class_names: optional names indexed by label, for the legend.
        max_iter: t-SNE iterations (at least 250, the first 250 of them early
            exaggeration); the time grows with it. Defaults to 1000 (scikit-learn's).

    Returns:
        dict with "points" (n, 2) drawn, "labels" (n,), "indices" (n,) rows of
        `embeddings` drawn, "coloured" the class ids drawn in colour.

    Reference:
        van der Maaten and Hinton, "Visualizing Data using t-SNE", JMLR 2008.
    """
    from matplotlib import colormaps
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    x = validation.embedding_array(embeddings)
    y = validation.label_array(labels, x.shape[0])
    if metric not in ("cosine", "euclidean"):
        raise ValueError(f"metric must be 'cosine' or 'euclidean', got {metric!r}.")
    if x.shape[0] < 3:
        raise ValueError(f"t-SNE needs at least 3 points, got {x.shape[0]}.")
    max_points = hyperparameters.integer_at_least("max_points", max_points, 1)
    highlight = hyperparameters.integer_at_least("highlight", highlight, 1)
    if highlight > 20:
        raise ValueError(f"highlight must be at most 20 (distinct colours), got {highlight}.")
    max_iter = hyperparameters.integer_at_least("max_iter", max_iter, 250)
    indices, coloured = _tsne_rows(y, max_points, highlight, seed)
    x, y = x[indices], y[indices]
    tsne = TSNE(n_components=2, perplexity=min(perplexity, (len(x) - 1) / 3.0),
                metric=metric, init="pca", random_state=seed, max_iter=max_iter)
    with threadpool_limits(limits=threads, user_api="openmp"):
        points = tsne.fit_transform(x.astype(np.float64))
    figure = _figure(7.5, 6.0)
    axes = figure.subplots()
    grey = ~np.isin(y, coloured)
    if grey.any():
        axes.scatter(points[grey, 0], points[grey, 1], c="0.8", s=5, linewidths=0,
                     label=f"{len(np.unique(y[grey]))} other classes")
    palette = colormaps["tab20"]
    for i, c in enumerate(coloured):
        mine = y == c
        name = class_names[c] if class_names is not None else str(c)
        axes.scatter(points[mine, 0], points[mine, 1], color=palette(i % 20), s=12,
                     linewidths=0, label=name)
    axes.set_title(f"t-SNE of {len(points)} embeddings: {len(coloured)} classes in colour"
                   + (", the rest grey" if grey.any() else ""), fontsize="medium")
    axes.set_xticks([])
    axes.set_yticks([])
    axes.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5),
                markerscale=1.5, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return {"points": points, "labels": y, "indices": indices, "coloured": coloured}


def framed_image(axes, image, colour):
    """Draws `image` on `axes` without ticks, framed in `colour` (thick unless black:
    green a correct result, red a wrong one)."""
    picture = _displayable(image)
    axes.imshow(picture, cmap="gray" if picture.ndim == 2 else None, vmin=0, vmax=1)
    axes.set_xticks([])
    axes.set_yticks([])
    for spine in axes.spines.values():
        spine.set_edgecolor(colour)
        spine.set_linewidth(3 if colour != "black" else 1)


def _displayable(image):
    """An image as float in [0, 1], (H, W) or (H, W, 3)."""
    image = np.asarray(image, np.float64)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[-1] not in (3, 4)):
        raise ValueError(
            f"images must be (N, H, W), (N, H, W, 1) or (N, H, W, 3), got an image of shape "
            f"{image.shape}."
        )
    low, high = image.min(), image.max()
    if low < 0.0 or high > 1.0:
        image = (image - low) / (high - low) if high > low else np.zeros_like(image)
    return image


class _ImageFiles:
    """Image files indexed like an image array: `files[i]` reads file i as a uint8
    `(H, W, 3)` thumbnail (longest side `THUMBNAIL` pixels)."""

    THUMBNAIL = 128

    def __init__(self, paths):
        self.paths = [p.decode() if isinstance(p, bytes) else str(p) for p in paths]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        from PIL import Image  # matplotlib's own dependency

        path = self.paths[int(index)]
        try:
            with Image.open(path) as image:
                image = image.convert("RGB")
                image.thumbnail((self.THUMBNAIL, self.THUMBNAIL))
                return np.asarray(image)
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read or decode image {path!r} to draw it: "
                             f"{error}") from None


@hyperparameters.renamed_keywords(distance="metric")
def retrieval_grid(images, labels, embeddings, path="retrievals.png", queries=8, k=5,
                   metric="cosine", seed=0, dpi=100, class_names=None):
    """Query images with their top-k retrievals, framed green (same class) or red, with a legend.

    Retrieval is leave-one-out among `embeddings` (the query itself excluded),
    exact, ties to the lower index.

    Args:
        images: (N, H, W), (N, H, W, 1) or (N, H, W, 3) array; any value range
            (shown rescaled to [0, 1] when outside it). Or N image file paths
            (a file-based split's `paths`): only the images shown are read.
        labels: (N,) class ids.
        embeddings: float (N, d) embeddings of the images.
        path: PNG file to write. Defaults to "retrievals.png".
        queries: number of random queries, or a list of row indices. Defaults
            to 8.
        k: retrievals per query. Defaults to 5.
        metric: "cosine", "dot" or "euclidean". Defaults to "cosine".
            (`distance=` is its deprecated name.)
        seed: random choice of queries. Defaults to 0.
        dpi: resolution. Defaults to 100.
        class_names: optional names indexed by label: each row is labelled with
            its query's class, and a wrong retrieval with its own class.

    Returns:
        dict with "queries" (q,) row indices, "neighbors" (q, k) row indices
        nearest first, "correct" (q, k) bool (green frames).
    """
    x = validation.embedding_array(embeddings)
    y = validation.label_array(labels, x.shape[0])
    from keras_dml.data.labels import is_paths

    images = _ImageFiles(images) if is_paths(images) else np.asarray(images)
    if len(images) != x.shape[0]:
        raise ValueError(f"{len(images)} images but {x.shape[0]} embeddings.")
    k = hyperparameters.integer_at_least("k", k, 1)
    if isinstance(queries, (int, np.integer)):
        count = min(hyperparameters.integer_at_least("queries", queries, 1), x.shape[0])
        queries = np.sort(np.random.default_rng(seed).choice(x.shape[0], count, replace=False))
    queries = np.asarray(queries, np.int64).reshape(-1)
    if queries.size == 0 or queries.min() < 0 or queries.max() >= x.shape[0]:
        raise ValueError(f"queries must be row indices in [0, {x.shape[0]}), got {queries}.")
    if k >= x.shape[0]:
        raise ValueError(f"k={k} needs more than {x.shape[0]} embeddings.")
    # Queries against everything, one extra neighbour, then the query's own row removed.
    found, _ = nearest_neighbors(x[queries], x, k=k + 1, metric=metric)
    neighbors = np.stack([
        [n for n in row if n != query][:k] for row, query in zip(found.astype(np.int64), queries)
    ])
    correct = y[neighbors] == y[queries][:, None]

    from matplotlib.patches import Patch

    def name(index):
        return str(class_names[y[index]] if class_names is not None else y[index])

    figure = _figure(1.3 * (k + 1) + 0.8, 1.45 * len(queries) + 0.6)
    grid = figure.subplots(len(queries), k + 1, squeeze=False)
    for row, query in enumerate(queries):
        cells = [(query, "black", "query")] + [
            (n, "tab:green" if ok else "tab:red", f"#{i + 1}")
            for i, (n, ok) in enumerate(zip(neighbors[row], correct[row]))
        ]
        for column, (axes, (index, colour, title)) in enumerate(zip(grid[row], cells)):
            framed_image(axes, images[index], colour)
            if row == 0:
                axes.set_title(title, fontsize="small")
            if column == 0:
                axes.set_ylabel(name(index), fontsize="x-small", rotation=0, ha="right",
                                va="center")
            elif colour == "tab:red":
                axes.set_xlabel(name(index), fontsize="xx-small", color="tab:red", labelpad=1)
    figure.legend(handles=[Patch(facecolor="white", edgecolor="tab:green", linewidth=3,
                                 label="same class as the query"),
                           Patch(facecolor="white", edgecolor="tab:red", linewidth=3,
                                 label="another class (its name below)")],
                  loc="lower center", ncol=2, fontsize="small", frameon=False)
    figure.tight_layout(rect=(0, 0.45 / (1.45 * len(queries) + 0.6), 1, 1))
    figure.savefig(path, dpi=dpi)
    return {"queries": queries, "neighbors": neighbors, "correct": correct}
