"""Re-ranking the top candidates of a search: alpha-QE, DBA and k-reciprocal.

Each method needs only a gallery that can be searched and can return stored
embeddings (an `Index`, through `keras_dml.index.rerank.IndexGallery`, on every
`Index` backend; the query/gallery evaluation's
`keras_dml.evaluation.query_gallery.ArrayGallery`), and holds only one
chunk of queries' candidates at a time. Users import these from
`keras_dml.index.rerank`; they sit here, below both the index and the evaluation
that use them.

* `AlphaQE` (average query expansion, Radenovic et al. 2018): the query becomes
  `q' = unit(q + sum_{i<=n} max(s_i, 0)**alpha * x_i)` over its n best items x_i
  (similarity s_i), and the gallery is searched again with q'. With `mutual=m`,
  only the x_i that have the query among their own m nearest items are added.
* `DBA` (database-side augmentation, Arandjelovic & Zisserman 2012, with
  Radenovic's alpha weights): each of the query's `depth` best items is replaced
  by `unit(x + sum_{j<=n} max(s_j, 0)**alpha * x_j)` over its own n nearest
  gallery items (itself excluded), and the candidates are sorted by similarity
  to the query again. With `relative=r`, s_j is the cosine similarity relative to
  the item's r-th nearest, `1 - (1 - s_j) / (1 - s_r)`.
* `KReciprocal` (Zhong et al. 2017): on the query and its `depth` best items,
  k-reciprocal neighbour sets R*(., k1) (eqs. 4-6), Gaussian weights
  `V = exp(-d)` (eq. 7), local query expansion over k2 neighbours (eq. 11) and
  the Jaccard distance (eq. 10); the candidates are sorted by
  `d* = (1 - lambda) d_J + lambda d` (eq. 12), d the squared Euclidean
  distance of the (unit, under cosine) embeddings over its row's largest (as
  the authors' code does). Neighbour sets are those of this local set (the
  query with its candidates), not of the whole gallery.

With `keep=m` (DBA, k-reciprocal) the exact search's first m results stay in
place and only the candidates after them are re-ordered. The defaults (the
papers' settings with `keep=1`, k-reciprocal with k2=3) were chosen on held-out
classes (docs/guide/insight.md): re-ordering the first result lowered Recall@1 on
some sets with every setting that gained, while behind a kept first result the
papers' settings gained the most MAP@R everywhere.

QE and DBA compare unit vectors (cosine similarity), as the papers do.
Scores returned are similarities, higher is closer: the cosine similarity to
q' (QE), to the augmented item (DBA), or `-d*` (k-reciprocal).
"""

import dataclasses

import numpy as np

from keras_dml import hyperparameters, ops

__all__ = ["AlphaQE", "DBA", "KReciprocal", "METHODS", "check", "expand", "get",
           "k_reciprocal_distances", "without_self"]

METHODS = ("qe", "dba", "k_reciprocal")
_BLOCK = 4096  # DBA candidates whose neighbours are held at once (10 x 128 floats: 21 MB)


@dataclasses.dataclass(frozen=True)
class AlphaQE:
    """Average query expansion with alpha weights over the query's n best items.

    Attributes:
        n: Items added to the query. Defaults to 1 (the paper: 2).
        alpha: Exponent of the similarity weights (0: plain average QE). Defaults to 3.0.
        mutual: Add only the items that have the query among their own `mutual`
            nearest items (0: every one of the n, as the paper). Defaults to 1.
    """

    n: int = 1
    alpha: float = 3.0
    mutual: int = 1
    name = "qe"

    def __post_init__(self):
        check(self)

    def rerank(self, gallery, queries, k, rows):
        ids, similarities = gallery.search(queries, min(self.n, gallery.size), rows)
        keep = None
        if self.mutual:
            keep = mutual_neighbours(gallery, ids, similarities, self.mutual)
        expanded = expand(ops.unit_rows(queries), gallery.embeddings(ids), similarities,
                          self.alpha, keep)
        return gallery.search(expanded, k, rows)


@dataclasses.dataclass(frozen=True)
class DBA:
    """Database-side augmentation of the query's `depth` best items.

    Attributes:
        n: Gallery neighbours averaged into each candidate. Defaults to 1 (the paper's).
        alpha: Exponent of the similarity weights. Defaults to 3.0 (the paper's).
        relative: Weigh each neighbour by its similarity relative to the item's
            `relative`-th nearest neighbour, `1 - (1 - s) / (1 - s_relative)` (a
            duplicate 1, that neighbour and farther ones 0), so the weights do not
            depend on how tight the embedding's cone is; 0 weighs by the cosine
            similarity itself. Defaults to 0 (the paper's).
        depth: Candidates re-scored per query. Defaults to 100.
        keep: The exact search's first `keep` results stay in place; only those after
            them are re-ordered, so with 1 Recall@1 cannot change (0: the paper's, all
            re-ordered). Defaults to 1.
    """

    n: int = 1
    alpha: float = 3.0
    relative: int = 0
    depth: int = 100
    keep: int = 1
    name = "dba"

    def __post_init__(self):
        check(self)

    def rerank(self, gallery, queries, k, rows):
        ids, _ = gallery.search(queries, min(max(k, self.depth), gallery.size), rows)
        unique, inverse = np.unique(ids, return_inverse=True)
        augmented = np.concatenate([self._augment(gallery, unique[start:start + _BLOCK])
                                    for start in range(0, len(unique), _BLOCK)])
        candidates = augmented[inverse.reshape(ids.shape)]  # (q, depth, d)
        scores = np.einsum("qd,qcd->qc", ops.unit_rows(queries), candidates)
        return _sorted(ids, scores, k, self.keep)

    def _augment(self, gallery, ids):
        """The augmented unit embeddings (m, d) of gallery items `ids` (m,)."""
        vectors = ops.unit_rows(gallery.embeddings(ids))
        neighbour_ids, _ = gallery.neighbours(ids, max(self.n, self.relative))
        if not neighbour_ids.shape[1]:  # a gallery of one item has no neighbours
            return vectors
        neighbours = _unit(gallery.embeddings(neighbour_ids))
        similarities = np.einsum("md,mnd->mn", vectors, neighbours)
        order = np.argsort(-similarities, axis=1, kind="stable")  # (any metric's order)
        similarities = np.take_along_axis(similarities, order, 1)
        if self.relative:
            similarities = relative_similarities(similarities, self.relative)
        nearest = np.take_along_axis(neighbours, order[:, :self.n, None], 1)
        return expand(vectors, nearest, similarities[:, :self.n], self.alpha)


@dataclasses.dataclass(frozen=True)
class KReciprocal:
    """k-reciprocal re-ranking of the query's `depth` best items (Zhong et al. 2017).

    Attributes:
        k1: Neighbours of the k-reciprocal sets. Defaults to 20.
        k2: Neighbours of the local query expansion. Defaults to 3 (the paper: 6).
        lam: Weight of the original distance, lambda. Defaults to 0.3 (the paper's).
        depth: Candidates re-scored per query. Defaults to 100.
        keep: The exact search's first `keep` results stay in place; only those after
            them are re-ordered, so with 1 Recall@1 cannot change (0: the paper's, all
            re-ordered). Defaults to 1.
    """

    k1: int = 20
    k2: int = 3
    lam: float = 0.3
    depth: int = 100
    keep: int = 1
    name = "k_reciprocal"

    def __post_init__(self):
        check(self)

    def rerank(self, gallery, queries, k, rows):
        ids, _ = gallery.search(queries, min(max(k, self.depth), gallery.size), rows)
        vectors = gallery.embeddings(ids.reshape(-1)).reshape(*ids.shape, -1)
        if gallery.metric == "cosine":
            queries, vectors = ops.unit_rows(queries), _unit(vectors)
        from threadpoolctl import threadpool_limits  # scikit-learn's dependency

        with threadpool_limits(1):  # (depth + 1)^2 matrices: threads only wait (50x slower)
            scores = np.stack([-k_reciprocal_distances(q, v, self.k1, self.k2, self.lam)
                               for q, v in zip(queries, vectors)])
        return _sorted(ids, scores, k, self.keep)


def _unit(x):
    return x / np.sqrt(np.maximum(np.sum(x * x, axis=-1, keepdims=True), ops.NORM_EPSILON))


def _sorted(ids, scores, k, keep=0):
    """The k best of each row's candidates `ids` (q, c) (in the exact search's order) by
    their `scores`, the first `keep` left in place (with their own scores)."""
    ranked = np.concatenate([np.full((len(scores), min(keep, scores.shape[1])), np.inf),
                             scores[:, keep:]], axis=1)
    order = np.argsort(-ranked, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(ids, order, 1), np.take_along_axis(scores, order, 1).astype(
        np.float32)


def mutual_neighbours(gallery, ids, similarities, m):
    """bool, as `ids` (q, n): whether each query would be among the m nearest items of
    its found item (similarity to it at least that of the item's m-th nearest)."""
    _, theirs = gallery.neighbours(ids.reshape(-1), m)
    if theirs.shape[1] == 0:  # a gallery of one item: nothing is nearer than the query
        return np.ones(ids.shape, bool)
    return similarities >= theirs[:, -1].reshape(ids.shape) - 1e-6


def relative_similarities(similarities, relative):
    """`1 - (1 - s) / (1 - s_r)` of each row's similarities (m, n), sorted from the
    nearest, s_r the row's `relative`-th (its last when the row is shorter)."""
    reference = similarities[:, min(relative, similarities.shape[1]) - 1][:, None]
    distance = np.maximum(1.0 - reference, ops.NORM_EPSILON)
    return 1.0 - (1.0 - similarities) / distance


def expand(vectors, neighbours, similarities, alpha, keep=None):
    """`unit(v + sum_j max(s_j, 0)**alpha * x_j)` per row: `vectors` (m, d) unit,
    `neighbours` (m, n, d) and `similarities` (m, n) of each row's n items (those
    where `keep` is False left out)."""
    weights = np.maximum(similarities, 0.0) ** alpha
    if keep is not None:
        weights = np.where(keep, weights, 0.0)
    return ops.unit_rows(vectors + np.einsum("mn,mnd->md", weights, _unit(neighbours)))


def k_reciprocal_distances(query, candidates, k1=20, k2=3, lam=0.3):
    """Zhong et al.'s `d*` from `query` (d,) to each of `candidates` (m, d).

    The local set is the query (node 0) and the candidates. N(i, k) is node i and
    its k nearest other nodes (as in the authors' code); R(i, k) the members j of
    N(i, k) with i in N(j, k); R*(i) adds R(q, round(k1 / 2)) for each q in R(i, k1)
    where |R(i, k1) & R(q, k1/2)| >= 2/3 |R(q, k1/2)|.
    """
    nodes = np.concatenate([query[np.newaxis], candidates]).astype(np.float64)
    squared = np.sum(nodes * nodes, axis=1)
    dist = np.maximum(squared[:, None] + squared[None, :] - 2.0 * nodes @ nodes.T, 0.0)
    np.fill_diagonal(dist, 0.0)
    # each row over its largest distance, as the authors' code: d and the Gaussian weights
    # then have one scale whatever the embedding's (a narrow cone has distances ~1e-3)
    dist /= np.maximum(dist.max(axis=1, keepdims=True), 1e-12)
    size = len(nodes)
    rank = np.argsort(dist, axis=1, kind="stable")
    rank = np.concatenate([np.arange(size)[:, None], rank[rank != np.arange(size)[:, None]]
                           .reshape(size, size - 1)], axis=1)  # each node first in its list

    def reciprocal(k):
        near = np.zeros((size, size), bool)
        np.put_along_axis(near, rank[:, : min(k, size - 1) + 1], True, axis=1)
        return near & near.T

    r_full, r_half = reciprocal(k1), reciprocal(int(np.around(k1 / 2)))
    # set sizes as float matrix products (BLAS; exact: counts below 2**53)
    overlap = r_full.astype(np.float64) @ r_half.T.astype(np.float64)  # |R(i) & R_half(q)|
    added = r_full & (3 * overlap >= 2 * r_half.sum(axis=1)[None, :])
    r_star = r_full | ((added.astype(np.float64) @ r_half.astype(np.float64)) > 0)
    weights = np.where(r_star, np.exp(-dist), 0.0)
    weights = weights[rank[:, :k2]].mean(axis=1)  # node i and its k2 - 1 nearest
    query_weights = weights[0][None, :]
    minimum = np.minimum(query_weights, weights[1:]).sum(axis=1)
    maximum = np.maximum(query_weights, weights[1:]).sum(axis=1)
    jaccard = 1.0 - minimum / np.maximum(maximum, 1e-12)
    return (1.0 - lam) * jaccard + lam * dist[0, 1:]


def get(rerank):
    """A re-ranker from a name in `METHODS`, `"name:key=value,..."` (e.g.
    `"k_reciprocal:k1=10,lam=0.5"`) or a re-ranker object (returned as is)."""
    if not isinstance(rerank, str):
        if not hasattr(rerank, "rerank"):
            raise ValueError(f"rerank must be one of {METHODS} or a re-ranker object, got "
                             f"{rerank!r}.")
        return rerank
    name, _, options = rerank.partition(":")
    classes = {"qe": AlphaQE, "dba": DBA, "k_reciprocal": KReciprocal}
    if name not in classes:
        raise ValueError(f"rerank must be one of {METHODS} (optionally with options, e.g. "
                         f"'qe:n=2,alpha=3'), got {rerank!r}.")
    cls = classes[name]
    fields = {field.name: field.type for field in dataclasses.fields(cls)}
    values = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        if key not in fields or not value:
            raise ValueError(f"rerank {name!r} takes {', '.join(fields)} (as key=value), "
                             f"got {item!r}.")
        try:
            values[key] = (int if fields[key] in (int, "int") else float)(value)
        except ValueError:
            raise ValueError(f"rerank {name!r}: {key} must be a number, got {value!r}.") \
                from None
    return cls(**values)


def check(reranker):
    """`reranker` with its numbers checked (a ValueError names a bad one)."""
    for field in dataclasses.fields(reranker):
        value = getattr(reranker, field.name)
        if field.name in ("mutual", "relative", "keep"):
            hyperparameters.integer_at_least(field.name, value, 0)
        elif field.name in ("n", "k1", "k2", "depth"):
            hyperparameters.integer_at_least(field.name, value, 1)
        elif field.name == "lam" and not 0.0 <= value <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {value!r}.")
        elif field.name == "alpha" and not (np.isfinite(value) and value >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {value!r}.")
    return reranker


def without_self(ids, found, scores, n):
    """Each row's first n found items other than its own id (the last dropped when
    the item itself is not among them)."""
    own = found == np.asarray(ids)[:, None]
    own[~own.any(axis=1), -1] = True
    keep = ~own
    width = min(n, found.shape[1] - 1)
    return (found[keep].reshape(len(found), -1)[:, :width],
            scores[keep].reshape(len(found), -1)[:, :width])
