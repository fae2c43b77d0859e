"""Retrieval figures: Recall@K per epoch, a t-SNE map, a grid of top-k retrievals.

Each function writes a PNG and returns the data it drew.
"""

import re

import numpy as np

from keras_dml.evaluation import _inputs
from keras_dml.evaluation.knn import nearest_neighbors

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


def recall_curves(history, path="recall_curves.png", keys=None, dpi=100):
    """Recall@K (in %) against the epoch, one line per K.

    Args:
        history: what `model.fit` returned (a `keras.callbacks.History`), the
            `keras_dml.callbacks.RecallAtK` callback itself (needed when it ran
            every n > 1 epochs), or a dict `{"epoch": [...], key: [...]}`.
        path: PNG file to write. Defaults to "recall_curves.png".
        keys: log keys to draw. Defaults to None: every key ending in
            `recall@<K>`, sorted by K.
        dpi: resolution. Defaults to 100.

    Returns:
        dict `{key: (epochs, values_in_percent)}`, epochs 1-based as drawn.

    Examples:
        >>> history = model.fit(..., callbacks=[RecallAtK((x_val, y_val))])
        >>> recall_curves(history, "runs/recall.png")
    """
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
    drawn = {}
    for key in keys:
        values = np.asarray(logs[key], np.float64) * 100.0
        if epochs is None or len(epochs) != len(values):
            raise ValueError(
                f"{key} has {len(values)} values for {0 if epochs is None else len(epochs)} "
                "epochs: it was not logged every epoch, pass the RecallAtK callback instead."
            )
        drawn[key] = (np.asarray(epochs) + 1, values)
    figure = _figure(5.0, 3.5)
    axes = figure.subplots()
    for key, (x, y) in drawn.items():
        axes.plot(x, y, marker="o", markersize=3, label=key)
    axes.set_xlabel("epoch")
    axes.set_ylabel("Recall@K (%)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return drawn


def _class_colours(labels):
    from matplotlib import colormaps

    classes, ids = np.unique(labels, return_inverse=True)
    cmap = colormaps["tab20" if len(classes) <= 20 else "turbo"]
    positions = ids if len(classes) <= 20 else ids / max(1, len(classes) - 1)
    return classes, cmap(positions)


def tsne_map(embeddings, labels, path="tsne.png", max_points=3000, perplexity=30.0,
             distance="cosine", seed=0, threads=None, dpi=100):
    """A t-SNE map of embeddings coloured by class (ICE supplementary, Figs. 2-4).

    Args:
        embeddings: float (N, d) array or tensor.
        labels: (N,) class ids.
        path: PNG file to write. Defaults to "tsne.png".
        max_points: at most this many points, a seeded random subset. Defaults
            to 3000.
        perplexity: t-SNE perplexity (clipped below the number of points).
            Defaults to 30.0.
        distance: "cosine" or "euclidean" geometry for t-SNE. Defaults to
            "cosine".
        seed: subset and t-SNE random state. Defaults to 0.
        threads: OpenMP threads for t-SNE's gradient. Defaults to None (all);
            1 is much faster on a machine already busy with other work.
        dpi: resolution. Defaults to 100.

    Returns:
        dict with "points" (n, 2) drawn, "labels" (n,), "indices" (n,) rows of
        `embeddings` drawn.

    Reference:
        van der Maaten and Hinton, "Visualizing Data using t-SNE", JMLR 2008.
    """
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    x = _inputs.as_embeddings(embeddings)
    y = _inputs.as_labels(labels, x.shape[0])
    if distance not in ("cosine", "euclidean"):
        raise ValueError(f"distance must be 'cosine' or 'euclidean', got {distance!r}.")
    if x.shape[0] < 3:
        raise ValueError(f"t-SNE needs at least 3 points, got {x.shape[0]}.")
    max_points = _inputs.check_positive_int(max_points, "max_points")
    indices = np.arange(x.shape[0])
    if x.shape[0] > max_points:
        indices = np.sort(np.random.default_rng(seed).choice(x.shape[0], max_points, False))
    x, y = x[indices], y[indices]
    tsne = TSNE(n_components=2, perplexity=min(perplexity, (len(x) - 1) / 3.0),
                metric=distance, init="pca", random_state=seed)
    with threadpool_limits(limits=threads, user_api="openmp"):
        points = tsne.fit_transform(x.astype(np.float64))
    classes, colours = _class_colours(y)
    figure = _figure(6.0, 6.0)
    axes = figure.subplots()
    axes.scatter(points[:, 0], points[:, 1], c=colours, s=6, linewidths=0)
    axes.set_title(f"t-SNE of {len(points)} embeddings, {len(classes)} classes")
    axes.set_xticks([])
    axes.set_yticks([])
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return {"points": points, "labels": y, "indices": indices}


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


def retrieval_grid(images, labels, embeddings, path="retrievals.png", queries=8, k=5,
                   distance="cosine", seed=0, dpi=100):
    """Query images with their top-k retrievals, framed green (same class) or red.

    Retrieval is leave-one-out among `embeddings` (the query itself excluded),
    exact, ties to the lower index.

    Args:
        images: (N, H, W), (N, H, W, 1) or (N, H, W, 3) array; any value range
            (shown rescaled to [0, 1] when outside it).
        labels: (N,) class ids.
        embeddings: float (N, d) embeddings of the images.
        path: PNG file to write. Defaults to "retrievals.png".
        queries: number of random queries, or a list of row indices. Defaults
            to 8.
        k: retrievals per query. Defaults to 5.
        distance: "cosine", "dot" or "euclidean". Defaults to "cosine".
        seed: random choice of queries. Defaults to 0.
        dpi: resolution. Defaults to 100.

    Returns:
        dict with "queries" (q,) row indices, "neighbors" (q, k) row indices
        nearest first, "correct" (q, k) bool (green frames).
    """
    x = _inputs.as_embeddings(embeddings)
    y = _inputs.as_labels(labels, x.shape[0])
    images = np.asarray(images)
    if images.shape[0] != x.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {x.shape[0]} embeddings.")
    k = _inputs.check_positive_int(k, "k")
    if isinstance(queries, (int, np.integer)):
        count = min(_inputs.check_positive_int(queries, "queries"), x.shape[0])
        queries = np.sort(np.random.default_rng(seed).choice(x.shape[0], count, replace=False))
    queries = np.asarray(queries, np.int64).reshape(-1)
    if queries.size == 0 or queries.min() < 0 or queries.max() >= x.shape[0]:
        raise ValueError(f"queries must be row indices in [0, {x.shape[0]}), got {queries}.")
    if k >= x.shape[0]:
        raise ValueError(f"k={k} needs more than {x.shape[0]} embeddings.")
    # Queries against everything, one extra neighbour, then the query's own row removed.
    found, _ = nearest_neighbors(x[queries], x, k=k + 1, distance=distance)
    neighbors = np.stack([
        [n for n in row if n != query][:k] for row, query in zip(found.astype(np.int64), queries)
    ])
    correct = y[neighbors] == y[queries][:, None]

    figure = _figure(1.3 * (k + 1), 1.4 * len(queries))
    grid = figure.subplots(len(queries), k + 1, squeeze=False)
    for row, query in enumerate(queries):
        cells = [(query, "black", "query")] + [
            (n, "tab:green" if ok else "tab:red", f"#{i + 1}")
            for i, (n, ok) in enumerate(zip(neighbors[row], correct[row]))
        ]
        for axes, (index, colour, title) in zip(grid[row], cells):
            picture = _displayable(images[index])
            axes.imshow(picture, cmap="gray" if picture.ndim == 2 else None, vmin=0, vmax=1)
            axes.set_xticks([])
            axes.set_yticks([])
            for spine in axes.spines.values():
                spine.set_edgecolor(colour)
                spine.set_linewidth(3 if colour != "black" else 1)
            if row == 0:
                axes.set_title(title, fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    return {"queries": queries, "neighbors": neighbors, "correct": correct}
