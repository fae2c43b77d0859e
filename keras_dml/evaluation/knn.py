"""Exact k-nearest-neighbour search: the one scan behind the retrieval metrics and the index.

`ExactSearch` holds a gallery prepared once and ranks it for chunks of queries,
in memory bounded by chunk x N. Three kernels score and rank:

* `"numpy"`: a NumPy matmul and an exact `argpartition` per chunk; always available.
* `"tensorflow"` (`keras_dml.evaluation.knn_tensorflow`): a matmul and an exact
  two-stage top-k per chunk on TensorFlow's default device (the GPU when there is one).
* `"faiss"` (`keras_dml.evaluation.knn_faiss`): faiss' flat index on the CPU.

`kernel="auto"` is faiss where it is installed (TensorFlow's kernel instead when
Keras runs on TensorFlow with a GPU), else TensorFlow's kernel on the TensorFlow
backend and NumPy on the others: it never needs a package that is absent. A
kernel named explicitly is the kernel that runs, or an ImportError says what to
install.

Tie rule, with every kernel: among equal scores the gallery item with the lower
index comes first. Bitwise-identical gallery rows are scored once (the gallery
is searched as its distinct rows, each standing for its copies), so a matrix
product that rounds two copies' scores differently cannot break the rule.
Items a query may not find (its own row in leave-one-out, items of its id or
group: `Exclusions`) are left out by index after the scan.
"""

import itertools

import numpy as np

from keras_dml import hyperparameters, ops, validation
from keras_dml.evaluation.knn_faiss import FlatIndex, resolve_kernel

__all__ = ["ExactSearch", "Exclusions", "iter_nearest_neighbors", "nearest_neighbors", "order_keys"]

_SCORE_BUDGET = 2**25  # float32 scores in one TensorFlow chunk: 128 MB
_MIN_CHUNK_ROWS = 1024  # fewer rows a chunk waste the matmul (a thin operand reread per chunk)
_MAX_SCORE_BUDGET = 2**27  # how far the buffer grows (512 MB) to keep _MIN_CHUNK_ROWS
_NUMPY_SCORE_BUDGET = 2**23  # scores per NumPy chunk: 32 MB, plus 64 MB of sort keys
_FAISS_CHUNK_ROWS = 2**16  # queries per faiss call: results of (k + 8) x 12 bytes each
_EXPANSION_BUDGET = 2**22  # candidate copies ranked at once when the gallery has duplicates
MISSING = -1  # index of a result a query does not have (every other item excluded)


def top_k(scores, k):
    """Column indices of the k largest of each row of float32 `scores`, largest first,
    equal scores in index order: one int64 key per score that orders by (score,
    -index) without ties, so `argpartition` is exact."""
    keys = order_keys(scores)
    n = scores.shape[1]
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k] if k < n else np.tile(
        np.arange(n), (len(scores), 1))
    order = np.argsort(-np.take_along_axis(keys, top, 1), axis=1)
    return np.take_along_axis(top, order, 1)


def order_keys(scores):
    """int64 keys of float32 `scores` (Q, N), distinct within a row: a larger key comes
    earlier in the ranking (a higher score, then the lower column)."""
    n = scores.shape[1]
    bits = (np.asarray(scores, np.float32) + np.float32(0.0)).view(np.int32).astype(np.int64)
    ordered = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # int order = float order
    return ordered * n + (n - 1 - np.arange(n))


def distinct_rows(x):
    """`(first, inverse)` of the distinct rows of float32 `x` (N, d), numbered by first
    occurrence (`first[u]` is the lowest row equal to distinct row u, `inverse[i]` the
    distinct row of row i; -0.0 equals 0.0), or None when every row is distinct."""
    bits = (x + np.float32(0.0)).view(np.uint32)
    weights = np.random.default_rng(0).integers(1, 2**63, x.shape[1], dtype=np.uint64) | 1
    hashes = np.concatenate([bits[start:start + 2**16].astype(np.uint64) @ weights
                             for start in range(0, len(x), 2**16)])
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    if len(first) == len(x):
        return None
    inverse = inverse.reshape(-1)
    if not all((bits[s:s + 2**16] == bits[first[inverse[s:s + 2**16]]]).all()
               for s in range(0, len(x), 2**16)):  # a hash collision: compare whole rows
        _, first, inverse = np.unique(bits, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    by_first = np.argsort(first)
    number = np.empty_like(by_first)
    number[by_first] = np.arange(len(by_first))
    return first[by_first], number[inverse]


class Exclusions:
    """Gallery items each query may not find: those sharing one of its keys.

    Args:
        pairs: `(query_keys (Q,), gallery_keys (N,))` pairs; a query excludes the
            gallery items whose key equals its own in any pair (ids: the same
            item; groups: the same product or sequence).
    """

    def __init__(self, pairs):
        self.pairs = [(np.asarray(q), np.asarray(g)) for q, g in pairs]
        self._counts = self._largest = None

    @classmethod
    def leave_one_out(cls, n):
        """Query i excludes gallery row i (the queries are the gallery)."""
        return cls([(np.arange(n), np.arange(n))])

    def take(self, rows):
        """The exclusions of queries `rows` only, as queries 0, 1, ..."""
        taken = Exclusions([(query_keys[rows], gallery_keys)
                            for query_keys, gallery_keys in self.pairs])
        taken._counts, taken._largest = self.counts()[rows], self.largest()
        return taken

    def largest(self):
        """The most items one query excludes (of these queries, or of those this set was
        taken from: searches over its parts then have one depth)."""
        if self._largest is None:
            self._largest = int(self.counts().max(initial=0))
        return self._largest

    def mask(self, rows, columns):
        """bool, as `columns` (int (q, m), `MISSING` allowed): excluded for query `rows`."""
        excluded = np.zeros((len(rows), np.shape(columns)[1]), bool)
        valid = columns >= 0
        safe = np.where(valid, columns, 0)
        for query_keys, gallery_keys in self.pairs:
            excluded |= gallery_keys[safe] == query_keys[rows][:, np.newaxis]
        return excluded & valid

    def counts(self):
        """int64 (Q,): how many gallery items each query excludes."""
        if self._counts is None:
            codes = [_shared_codes(q, g) for q, g in self.pairs]
            self._counts = np.zeros(len(codes[0][0]), np.int64)
            for size in range(1, len(codes) + 1):  # inclusion-exclusion over the pairs
                for subset in itertools.combinations(codes, size):
                    self._counts += (-1) ** (size + 1) * _equal_counts(subset)
        return self._counts


def _shared_codes(query_keys, gallery_keys):
    """`(query codes, vocabulary size, gallery codes)`: both key arrays as dense ints of
    one vocabulary."""
    _, inverse = np.unique(np.concatenate([gallery_keys, query_keys]), return_inverse=True)
    inverse = inverse.reshape(-1)
    return inverse[len(gallery_keys):], int(inverse.max()) + 1, inverse[:len(gallery_keys)]


def _equal_counts(codes):
    """Per query: gallery items equal to it in every pair of `codes`."""
    query, gallery = np.zeros(len(codes[0][0]), np.int64), np.zeros(len(codes[0][2]), np.int64)
    for query_codes, size, gallery_codes in codes:
        query, gallery = query * size + query_codes, gallery * size + gallery_codes
    values, counts = np.unique(gallery, return_counts=True)
    position = np.minimum(np.searchsorted(values, query), len(values) - 1)
    return np.where(values[position] == query, counts[position], 0)


class ExactSearch:
    """A gallery prepared once for exact search by one kernel (see the module).

    Args:
        gallery: float `(N, d)`, NumPy or tensor.
        metric: `"cosine"`, `"dot"` or `"euclidean"`. Defaults to `"cosine"`.
        kernel: `"auto"`, `"numpy"`, `"tensorflow"` or `"faiss"`. Defaults to `"auto"`.

    Raises:
        ValueError: a bad gallery, metric or kernel name.
        ImportError: `kernel="faiss"` without faiss, or `"tensorflow"` without TensorFlow.
    """

    def __init__(self, gallery, metric="cosine", kernel="auto"):
        self.metric = validation.check_search_metric(metric)
        self.kernel = resolve_kernel(kernel)
        self.gallery = validation.embedding_array(gallery, "gallery")
        self.size = len(self.gallery)
        self._distinct = distinct_rows(self.gallery)
        if self._distinct is None:
            self._searched = self.gallery
        else:
            first, inverse = self._distinct
            self._searched = self.gallery[first]
            self._copies = np.argsort(inverse, kind="stable")  # by distinct row, then index
            self._copy_counts = np.bincount(inverse, minlength=len(first))
            self._copy_starts = np.cumsum(self._copy_counts) - self._copy_counts
        self._flat = None  # faiss' index of the searched rows, made at first use
        self._stored = None  # TensorFlow's form of the searched rows, for the last k
        self._unit = self._squared = None  # the NumPy kernel's form, made at first use

    def scores(self, queries, rows=None, exclusions=None):
        """float32 `(Q, N)` similarities of `queries` (already validated, float32) to
        every gallery item (the NumPy kernel's; copies score alike), the items of
        `exclusions` for query `rows` at -inf."""
        scores = self._numpy_scores(queries)
        if self._distinct is not None:
            scores = scores[:, self._distinct[1]]
        if exclusions is not None:
            scores[exclusions.mask(rows, np.arange(self.size)[np.newaxis, :])] = -np.inf
        return scores

    def search(self, queries, k, exclusions=None, chunk_size=None):
        """Yield `(start, indices, scores)` for consecutive chunks of `queries`.

        Args:
            queries: float32 `(Q, d)` (validated).
            k: results per query.
            exclusions: an `Exclusions` over these queries, or None.
            chunk_size: queries per chunk. Defaults to None (see `nearest_neighbors`).

        Yields:
            int64 `(q, k)` gallery indices, best first, and float32 `(q, k)` scores;
            a query with fewer than k items left has `MISSING` and -inf at the end.
        """
        if queries.shape[1] != self.gallery.shape[1]:
            raise ValueError(f"queries have dimension {queries.shape[1]} but the gallery has "
                             f"dimension {self.gallery.shape[1]}.")
        excluded = 0 if exclusions is None else exclusions.largest()
        depth = min(k + excluded, self.size)
        fetched = min(depth, len(self._searched))
        if chunk_size is None:
            chunk_size = _default_chunk_size(len(self._searched), self.kernel)
        chunk_size = hyperparameters.integer_at_least("chunk_size", chunk_size, 1)
        for start, found, values in self._scan(queries, fetched, chunk_size):
            found = found.astype(np.int64)
            if self._distinct is not None:
                found, values = self._expand(found, values, depth)
            rows = np.arange(start, start + len(found))
            yield (start, *_first_allowed(found, values, rows, exclusions, k))

    def _scan(self, queries, k, chunk_size):
        """The kernel's `(start, found, values)` chunks over the searched (distinct) rows."""
        if self.kernel == "tensorflow":
            from keras_dml.evaluation import knn_tensorflow

            if self._stored is None or self._stored.k != k:
                self._stored = knn_tensorflow.Prepared(self._searched, self.metric, k)
            yield from self._stored.search(queries, chunk_size)
            return
        if self.kernel == "faiss" and self._flat is None:
            self._flat = FlatIndex(self._searched, self.metric)
        for start in range(0, len(queries), chunk_size):
            chunk = queries[start:start + chunk_size]
            if self.kernel == "faiss":
                yield (start, *self._flat.search(chunk, k))
            else:
                scores = self._numpy_scores(chunk)
                found = top_k(scores, k)
                yield start, found, np.take_along_axis(scores, found, 1)

    def _numpy_scores(self, queries):
        """float32 scores of `queries` to the searched (distinct) rows."""
        if self._unit is None:
            searched = self._searched
            self._unit = ops.unit_rows(searched).astype(np.float32) \
                if self.metric == "cosine" else searched
            self._squared = np.einsum("ij,ij->i", searched, searched)
        queries = queries.astype(np.float32, copy=False)
        if self.metric == "cosine":
            queries = ops.unit_rows(queries).astype(np.float32)
        scores = queries @ self._unit.T
        if self.metric == "euclidean":  # -|q - r|^2
            scores = 2.0 * scores - np.einsum("ij,ij->i", queries, queries)[:, np.newaxis] \
                - self._squared
        return scores.astype(np.float32, copy=False)

    def _expand(self, found, values, depth):
        """The first `depth` gallery items of each query from its ranked distinct rows:
        each row's copies (in index order) take its score; equal scores by index."""
        result_found = np.full((len(found), depth), MISSING, np.int64)
        result_values = np.full((len(found), depth), -np.inf, np.float32)
        taken = np.minimum(self._copy_counts[found], depth)  # (q, f) copies used per row
        per_query = taken.sum(axis=1)
        start = 0
        while start < len(found):
            stop = start + max(1, int(np.searchsorted(np.cumsum(per_query[start:]),
                                                      _EXPANSION_BUDGET, side="right")))
            self._expand_rows(found, values, taken, slice(start, stop), depth,
                              result_found, result_values)
            start = stop
        return result_found, result_values

    def _expand_rows(self, found, values, taken, rows, depth, out_found, out_values):
        found, values, taken = found[rows], values[rows], taken[rows]
        entry = np.repeat(np.arange(found.size), taken.reshape(-1))
        within = np.arange(len(entry)) - np.repeat(np.cumsum(taken.reshape(-1))
                                                   - taken.reshape(-1), taken.reshape(-1))
        items = self._copies[self._copy_starts[found.reshape(-1)[entry]] + within]
        scores = values.reshape(-1)[entry]
        query = entry // found.shape[1]
        order = np.lexsort((items, -scores.astype(np.float64), query))
        query, items, scores = query[order], items[order], scores[order]
        position = np.arange(len(query)) - np.searchsorted(query, query, side="left")
        keep = position < depth
        first = rows.start
        out_found[first + query[keep], position[keep]] = items[keep]
        out_values[first + query[keep], position[keep]] = scores[keep]


def _first_allowed(found, values, rows, exclusions, k):
    """Each row's first k results that `exclusions` allows, padded with `MISSING`."""
    if found.shape[1] < k:
        pad = k - found.shape[1]
        found = np.pad(found, ((0, 0), (0, pad)), constant_values=MISSING)
        values = np.pad(values, ((0, 0), (0, pad)), constant_values=-np.inf)
    dropped = found < 0
    if exclusions is not None:
        dropped |= exclusions.mask(rows, found)
    if not dropped.any():
        return found[:, :k], values[:, :k].astype(np.float32)
    order = np.argsort(dropped, axis=1, kind="stable")[:, :k]
    found, values = np.take_along_axis(found, order, 1), np.take_along_axis(values, order, 1)
    dropped = np.take_along_axis(dropped, order, 1)
    return np.where(dropped, MISSING, found), np.where(dropped, -np.inf, values).astype(
        np.float32)


def _default_chunk_size(num_references, kernel="tensorflow"):
    """Queries per chunk. TensorFlow: a 128 MB score buffer, grown up to 512 MB for
    1,024 queries; NumPy: 32 MB of scores; faiss: `_FAISS_CHUNK_ROWS`."""
    if kernel == "faiss":  # faiss bounds its score memory itself, and slows down on small calls
        return _FAISS_CHUNK_ROWS
    if kernel == "numpy":
        return max(1, _NUMPY_SCORE_BUDGET // num_references)
    grown = min(_MIN_CHUNK_ROWS, _MAX_SCORE_BUDGET // num_references)
    return max(1, _SCORE_BUDGET // num_references, grown)


@hyperparameters.renamed_keywords(distance="metric", references="gallery")
def iter_nearest_neighbors(queries, gallery=None, k=1, metric="cosine", chunk_size=None,
                           kernel="auto"):
    """Yield `(start, indices, scores)` for consecutive chunks of queries.

    Same arguments and results as `nearest_neighbors`, but only one chunk of
    results is alive at a time; `indices` and `scores` are NumPy arrays of the
    chunk of queries starting at row `start`.
    """
    metric = validation.check_search_metric(metric)
    k = hyperparameters.integer_at_least("k", k, 1)
    queries = validation.embedding_array(queries, "queries")
    leave_one_out = gallery is None
    search = ExactSearch(queries if leave_one_out else gallery, metric, kernel)
    if search.gallery.shape[1] != queries.shape[1]:
        raise ValueError(f"queries have dimension {queries.shape[1]} but the gallery has "
                         f"dimension {search.gallery.shape[1]}.")
    available = search.size - int(leave_one_out)
    if k > available:
        raise ValueError(
            f"k={k} exceeds the {available} gallery items available to each query"
            + (" (leave-one-out excludes the query itself)." if leave_one_out else ".")
        )
    exclusions = Exclusions.leave_one_out(len(queries)) if leave_one_out else None
    for start, indices, scores in search.search(queries, k, exclusions, chunk_size):
        yield start, indices.astype(np.int32), scores


@hyperparameters.renamed_keywords(distance="metric", references="gallery")
def nearest_neighbors(queries, gallery=None, k=1, metric="cosine", chunk_size=None,
                      kernel="auto"):
    """Exact k nearest gallery items of every query, computed chunk by chunk.

    Scores are computed by one of three kernels (see the module's docstring),
    `chunk_size` queries at a time, so score memory is bounded by
    chunk_size x N, never queries x gallery. Among equal scores the gallery item
    with the lower index comes first, with every kernel (bitwise-identical rows
    score alike: see the module).

    Args:
        queries: float array (Q, d), NumPy or tensor.
        gallery: float array (N, d). Defaults to None: the queries themselves,
            leave-one-out (each query's own row is excluded by index, so exact
            duplicates of a query are still found). (`references=` is its
            deprecated name.)
        k: number of neighbours per query. Defaults to 1.
        metric: "cosine", "dot" (inner product) or "euclidean". Defaults to
            "cosine". (`distance=` is its deprecated name.)
        chunk_size: queries per chunk. Defaults to None: for TensorFlow 2**25 / N
            (a 128 MB score buffer), and at least 1,024 while the buffer stays
            within 512 MB (2**27 / N), as thinner chunks slow the matmul down;
            for faiss 65,536 (faiss scores in its own bounded blocks, and runs
            slower on many small calls); for NumPy 2**23 / N (32 MB of scores).
        kernel: `"auto"` (faiss' `IndexFlatIP` / `IndexFlatL2` when faiss is
            installed, unless Keras runs on TensorFlow with a GPU; else
            TensorFlow's kernel on the TensorFlow backend, NumPy on the others),
            `"numpy"`, `"tensorflow"` or `"faiss"`. Defaults to `"auto"`. They
            agree on the indices except among distinct gallery rows whose
            scores lie within float rounding of each other (each may round the
            last bit differently).

    Returns:
        `(indices, scores)`: int32 (Q, k) gallery indices, nearest first, and
        float32 (Q, k) scores: cosine similarity, inner product, or for
        "euclidean" minus the squared distance.

    Examples:
        >>> nearest_neighbors(np.eye(3, dtype="float32"), k=2)[0]
        array([[1, 2], [0, 2], [0, 1]], dtype=int32)
    """
    indices, scores = [], []
    for _, idx, sc in iter_nearest_neighbors(queries, gallery, k, metric, chunk_size, kernel):
        indices.append(idx)
        scores.append(sc)
    return np.concatenate(indices), np.concatenate(scores)
