"""Pair weight against cosine similarity: the unified view's Figure 1 for any loss."""

import numpy as np

from keras_dml.weighting import pair_weights

__all__ = ["probing_batch", "weight_curves"]

# Rows of a probing batch: the anchor, the fixed context positive and negative, the probe.
_ANCHOR, _CONTEXT_POSITIVE, _CONTEXT_NEGATIVE, _PROBE = 0, 1, 2, 3


def _unit(similarity, axis, dim=4):
    """A unit vector with cosine `similarity` to e_0, its remainder along e_axis."""
    vector = np.zeros(dim)
    vector[0] = similarity
    vector[axis] = np.sqrt(max(0.0, 1.0 - similarity**2))
    return vector


def probing_batch(similarity, probe, context_positive=0.7, context_negative=0.4):
    """The 4-sample batch whose pair (anchor, probe) has cosine `similarity`.

    Samples, all unit vectors in R^4: the anchor e_0 (class 0); a context
    positive (class 0) at cosine `context_positive` to the anchor; a context
    negative (class 1) at `context_negative`; and the probe, a positive (class 0)
    or a negative (class 2), at `similarity`. Each non-anchor sample has its own
    orthogonal direction, so only the anchor's similarities are set by hand.

    Returns:
        (labels int32 (4,), embeddings float32 (4, 4)).
    """
    probe_label = 0 if probe == "positive" else 2
    labels = np.array([0, 0, 1, probe_label], "int32")
    embeddings = np.stack([_unit(1.0, 1), _unit(context_positive, 1),
                           _unit(context_negative, 2), _unit(similarity, 3)])
    return labels, embeddings.astype("float32")


def _curves(loss, similarities, context_positive, context_negative):
    curves = {"similarity": similarities}
    for probe in ("positive", "negative"):
        curves[probe] = np.array([
            pair_weights(loss, *probing_batch(s, probe, context_positive,
                                              context_negative))[_ANCHOR, _PROBE]
            for s in similarities
        ], np.float32)
    return curves


def _check(similarities, context_positive, context_negative, losses):
    similarities = np.asarray(similarities, np.float64)
    if similarities.ndim != 1 or similarities.size < 2:
        raise ValueError(
            f"similarities must be a 1-D array of at least 2 values, got shape "
            f"{similarities.shape}.")
    if not np.all(np.isfinite(similarities)) or np.abs(similarities).max() > 1.0:
        raise ValueError("similarities are cosine similarities: they must lie in [-1, 1].")
    for name, value in (("context_positive", context_positive),
                        ("context_negative", context_negative)):
        if not -1.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [-1, 1], got {value}.")
    for name, loss in losses.items():
        if not hasattr(loss, "terms"):
            raise ValueError(f"{name!r} is not a keras_dml pair loss: {loss!r}.")
    return similarities


def weight_curves(loss, path="weight_curves.png", similarities=None, context_positive=0.7,
                  context_negative=0.4, columns=None, dpi=100):
    """Draws pair weight against cosine similarity for positive and negative pairs.

    The unified view's Figure 1: for each similarity s in `similarities`, the
    weight w_ij that `keras_dml.weighting.pair_weights` gives an anchor's pair
    with cosine similarity s, once for a positive pair (solid green) and once
    for a negative pair (dotted blue). Each point is one probing batch (see
    `probing_batch`): an anchor, a context positive at `context_positive`, a
    context negative at `context_negative`, and the probe pair at s; the probe
    is a positive in one batch and a negative in another, so the two curves do
    not interact. Losses weighting pairs relatively (triplet, lifted, MS) read
    the probe against the context pairs. The weights are those of the batch loss
    (mean over the 4 anchors); for losses on distances they are taken w.r.t. the
    distance, as `pair_weights` defines them. A curve dips below 0 where the loss's
    exact derivative pushes a positive away or pulls a negative closer (Ranked
    List's can): `pair_weights`' signs are drawn as they are.

    Args:
        loss: a keras_dml pair loss, or a dict {title: loss} (one panel each).
        path: PNG file to write. Defaults to "weight_curves.png".
        similarities: swept cosine similarities in [-1, 1]. Defaults to 101
            values from -1 to 1.
        context_positive: cosine of the context positive. Defaults to 0.7.
        context_negative: cosine of the context negative. Defaults to 0.4.
        columns: panels per row. Defaults to min(4, number of losses).
        dpi: resolution of the PNG. Defaults to 100.

    Returns:
        For one loss, {"similarity", "positive", "negative"}: float arrays of the
        plotted points; for a dict of losses, {title: that dict}.

    Examples:

    >>> curves = keras_dml.plots.weight_curves(
    ...     {"contrastive": keras_dml.losses.Contrastive(),
    ...      "binomial": keras_dml.losses.BinomialDeviance()}, path="figure1.png")
    """
    single = not isinstance(loss, dict)
    losses = {getattr(loss, "name", "loss"): loss} if single else dict(loss)
    if not losses:
        raise ValueError("weight_curves needs at least one loss.")
    if similarities is None:
        similarities = np.linspace(-1.0, 1.0, 101)
    similarities = _check(similarities, context_positive, context_negative, losses)
    curves = {name: _curves(item, similarities, context_positive, context_negative)
              for name, item in losses.items()}
    _draw(curves, path, columns, dpi)
    return next(iter(curves.values())) if single else curves


def _draw(curves, path, columns, dpi):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = columns or min(4, len(curves))
    rows = -(-len(curves) // columns)
    figure = Figure(figsize=(3.2 * columns, 2.6 * rows))
    FigureCanvasAgg(figure)
    for index, (name, curve) in enumerate(curves.items()):
        axes = figure.add_subplot(rows, columns, index + 1)
        axes.plot(curve["similarity"], curve["positive"], "-", color="green", label="positive")
        axes.plot(curve["similarity"], curve["negative"], ":", color="blue", label="negative")
        axes.set_title(name)
        axes.set_xlabel("cosine similarity")
        axes.set_ylabel("weight")
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
