"""Re-ranking (keras_dml.index.rerank) against direct NumPy implementations of the papers'
equations, written with loops and sets on small data."""

import numpy as np
import pytest

from keras_dml.index import Index
from keras_dml.index import rerank as rr


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _data(seed=0, n=40, q=6, d=5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, d))
    gallery = (centres[np.arange(n) % 4] + 0.6 * rng.normal(size=(n, d))).astype("float32")
    queries = (centres[np.arange(q) % 4] + 0.6 * rng.normal(size=(q, d))).astype("float32")
    index = Index()
    index.add(gallery, labels=np.arange(n) % 4)
    return index, gallery, queries


def _reference_qe(gallery, query, n, alpha, k, mutual=0):
    """Radenovic et al. 2018, alpha-QE: q' = q + sum_i s_i^alpha x_i over the top n (with
    `mutual`: only the x_i whose `mutual` nearest other items include the query)."""
    g, q = _unit(gallery.astype(np.float64)), _unit(query.astype(np.float64))
    sims = g @ q
    top = np.argsort(-sims, kind="stable")[:n]
    expanded = q.copy()
    for i in top:
        theirs = sorted((g[j] @ g[i] for j in range(len(g)) if j != i), reverse=True)
        if mutual and sims[i] < theirs[mutual - 1]:
            continue  # the query would not be among x_i's `mutual` nearest
        expanded += max(sims[i], 0.0) ** alpha * g[i]
    expanded = _unit(expanded)
    return np.argsort(-(g @ expanded), kind="stable")[:k]


def _reference_dba(gallery, query, n, alpha, k, relative=0):
    """Database-side augmentation of every item over its n nearest other items (with
    `relative`: each similarity s taken as 1 - (1 - s) / (1 - s_r), s_r the item's
    `relative`-th largest), then the query ranked against the augmented database."""
    g = _unit(gallery.astype(np.float64))
    augmented = np.empty_like(g)
    for i in range(len(g)):
        sims = g @ g[i]
        sims[i] = -np.inf
        order = np.argsort(-sims, kind="stable")
        if relative:
            reference = sims[order[min(relative, len(g) - 1) - 1]]
            sims = 1.0 - (1.0 - sims) / (1.0 - reference)
        augmented[i] = g[i] + sum(max(sims[j], 0.0) ** alpha * g[j] for j in order[:n])
    augmented = _unit(augmented)
    return np.argsort(-(augmented @ _unit(query.astype(np.float64))), kind="stable")[:k]


def _reference_k_reciprocal(gallery, query, k1, k2, lam, k):
    """Zhong et al. 2017, eqs. 4-12, with sets, on the probe p = node 0 and the gallery;
    distances over each row's largest, as the authors' code."""
    nodes = np.concatenate([_unit(query[None]), _unit(gallery)]).astype(np.float64)
    size = len(nodes)
    d = np.array([[np.sum((a - b) ** 2) for b in nodes] for a in nodes])
    scaled = d / d.max(axis=1, keepdims=True)  # each row over its largest (authors' code)

    def neighbours(i, kk):  # N(i, kk): i itself and its kk nearest others
        others = sorted((j for j in range(size) if j != i), key=lambda j: (d[i, j], j))
        return {i, *others[:kk]}

    def reciprocal(i, kk):  # eq. 4
        return {j for j in neighbours(i, kk) if i in neighbours(j, kk)}

    half = int(np.around(k1 / 2))

    def r_star(i):  # eq. 6
        base = reciprocal(i, k1)
        result = set(base)
        for q in base:
            candidate = reciprocal(q, half)
            if len(base & candidate) >= 2 / 3 * len(candidate):
                result |= candidate
        return result

    v = np.zeros((size, size))
    for i in range(size):  # eq. 7
        for j in r_star(i):
            v[i, j] = np.exp(-scaled[i, j])
    v_qe = np.zeros_like(v)
    for i in range(size):  # eq. 11: N(i, k2) is i and its k2 - 1 nearest
        members = sorted(range(size), key=lambda j: (d[i, j], j != i, j))[:k2]
        v_qe[i] = np.mean([v[j] for j in members], axis=0)
    final = []
    for g in range(1, size):  # eqs. 10 and 12
        jaccard = 1 - np.minimum(v_qe[0], v_qe[g]).sum() / np.maximum(v_qe[0], v_qe[g]).sum()
        final.append((1 - lam) * jaccard + lam * scaled[0, g])
    return np.argsort(final, kind="stable")[:k], np.array(final)


def _first_kept(exact, reference, keep, k):
    """`reference`'s ranking with the exact ranking's first `keep` items fixed in front."""
    kept = list(exact[:keep])
    return np.array(kept + [i for i in reference if i not in kept][:k - keep])


@pytest.mark.parametrize("n,alpha,mutual", [(2, 3.0, 0), (3, 0.0, 0), (5, 1.0, 2), (4, 3.0, 1)])
def test_alpha_qe_matches_the_papers_equation(n, alpha, mutual):
    index, gallery, queries = _data()
    result = index.search(queries, 10, rerank=rr.AlphaQE(n=n, alpha=alpha, mutual=mutual))
    for row, query in enumerate(queries):
        np.testing.assert_array_equal(result.ids[row],
                                      _reference_qe(gallery, query, n, alpha, 10, mutual))


def test_the_defaults_are_the_documented_settings_and_match_the_references():
    """The defaults chosen on held-out classes (docs/guide/insight.md), each re-ranking
    as its reference on data where it changes the exact order."""
    assert rr.get("qe") == rr.AlphaQE(n=1, alpha=3.0, mutual=1)
    assert rr.get("dba") == rr.DBA(n=1, alpha=3.0, relative=0, depth=100, keep=1)
    assert rr.get("k_reciprocal") == rr.KReciprocal(k1=20, k2=3, lam=0.3, depth=100, keep=1)
    index, gallery, queries = _data(6, n=40, q=10, d=3)
    exact = index.search(queries, 10).ids
    found = {name: index.search(queries, 10, rerank=name).ids for name in rr.METHODS}
    for row, query in enumerate(queries):
        np.testing.assert_array_equal(found["qe"][row],
                                      _reference_qe(gallery, query, 1, 3.0, 10, mutual=1))
        full_dba = _reference_dba(gallery, query, 1, 3.0, 40, relative=0)
        np.testing.assert_array_equal(found["dba"][row], _first_kept(exact[row], full_dba, 1, 10))
        full_kr, distances = _reference_k_reciprocal(gallery, query, 20, 3, 0.3, 40)
        expected = _first_kept(exact[row], full_kr, 1, 10)
        np.testing.assert_allclose(distances[found["k_reciprocal"][row]], distances[expected],
                                   atol=1e-9)
    for name in rr.METHODS:
        assert (found[name] != exact).any(), name  # each default does re-rank here


def test_k_reciprocal_does_not_depend_on_the_scale_of_the_distances():
    """Distances over their row's largest (the authors' code): embeddings 100x smaller (a
    narrow cone's distances) are re-ranked the same, and not as the exact order."""
    _, gallery, queries = _data(7, n=50, q=8)
    found = []
    for scale in (1.0, 0.01):
        index = Index(metric="euclidean")
        index.add(scale * gallery, labels=np.arange(len(gallery)) % 4)
        found.append(index.search(scale * queries, 10, rerank="k_reciprocal:lam=0.3").ids)
    np.testing.assert_array_equal(found[0], found[1])
    assert (found[0] != index.search(0.01 * queries, 10).ids).any()


@pytest.mark.parametrize("n,alpha,relative", [(1, 3.0, 0), (2, 1.0, 0), (3, 2.0, 4),
                                              (5, 5.0, 10)])
def test_dba_over_all_candidates_matches_a_fully_augmented_database(n, alpha, relative):
    index, gallery, queries = _data(1)
    reranker = rr.DBA(n=n, alpha=alpha, relative=relative, depth=len(gallery), keep=0)
    result = index.search(queries, 8, rerank=reranker)
    for row, query in enumerate(queries):
        np.testing.assert_array_equal(result.ids[row],
                                      _reference_dba(gallery, query, n, alpha, 8, relative))
    assert np.all(np.diff(result.scores, axis=1) <= 0)


def test_dba_augments_its_candidates_in_blocks_as_in_one(monkeypatch):
    from keras_dml.evaluation import rerank as evaluation_rerank

    index, _, queries = _data(8)
    whole = index.search(queries, 10, rerank="dba")
    monkeypatch.setattr(evaluation_rerank, "_BLOCK", 7)  # 40 candidates: 6 blocks
    blocks = index.search(queries, 10, rerank="dba")
    np.testing.assert_array_equal(blocks.ids, whole.ids)
    np.testing.assert_allclose(blocks.scores, whole.scores, rtol=1e-6)


@pytest.mark.parametrize("k1,k2,lam", [(20, 6, 0.3), (6, 3, 0.0), (4, 1, 0.7)])
def test_k_reciprocal_matches_the_papers_equations(k1, k2, lam):
    index, gallery, queries = _data(2, n=30, q=4)
    reranker = rr.KReciprocal(k1=k1, k2=k2, lam=lam, depth=len(gallery), keep=0)
    result = index.search(queries, 10, rerank=reranker)
    for row, query in enumerate(queries):
        expected, distances = _reference_k_reciprocal(gallery, query, k1, k2, lam, 10)
        # the same order up to exact ties (lam=0 ties many Jaccard distances)
        np.testing.assert_allclose(distances[result.ids[row]], distances[expected], atol=1e-9)
        np.testing.assert_allclose(-result.scores[row], distances[expected], rtol=1e-5)


@pytest.mark.parametrize("keep", [1, 3])
def test_keep_fixes_the_exact_first_results_and_reorders_the_rest_as_the_references(keep):
    index, gallery, queries = _data(4, n=30, q=5)
    exact = index.search(queries, keep).ids
    dba = index.search(queries, 10, rerank=rr.DBA(n=1, alpha=3.0, relative=0, depth=30,
                                                  keep=keep)).ids
    k_reciprocal = index.search(queries, 10, rerank=rr.KReciprocal(k2=6, lam=0.3, depth=30,
                                                                   keep=keep)).ids
    changed = False
    for row, query in enumerate(queries):
        full_dba = _reference_dba(gallery, query, 1, 3.0, 30, relative=0)
        np.testing.assert_array_equal(dba[row], _first_kept(exact[row], full_dba, keep, 10))
        full_kr, distances = _reference_k_reciprocal(gallery, query, 20, 6, 0.3, 30)
        expected = _first_kept(exact[row], full_kr, keep, 10)
        np.testing.assert_array_equal(k_reciprocal[row][:keep], exact[row])
        np.testing.assert_allclose(distances[k_reciprocal[row]], distances[expected], atol=1e-9)
        changed |= full_dba[0] != exact[row][0] or full_kr[0] != exact[row][0]
    assert changed  # without keep, some first result would move here


def test_every_method_searches_a_gallery_of_one_or_two_items():
    for size in (1, 2):
        index = Index()
        index.add(np.eye(3, dtype="float32")[:size], labels=list(range(size)))
        for method in rr.METHODS:
            found = index.search(np.ones((2, 3), "float32"), size, rerank=method)
            assert sorted(found.ids[0].tolist()) == list(range(size)), method


def test_reranked_results_carry_labels_and_metadata_of_their_ids():
    rng = np.random.default_rng(3)
    gallery = rng.normal(size=(30, 4)).astype("float32")
    index = Index()
    index.add(gallery, labels=[f"c{i % 3}" for i in range(30)], ids=[f"item{i}" for i in range(30)],
              metadata=[{"n": i} for i in range(30)])
    for method in rr.METHODS:
        result = index.search(gallery[:3], 5, rerank=method)
        for row in range(3):
            numbers = [int(i[4:]) for i in result.ids[row]]
            assert result.labels[row].tolist() == [f"c{i % 3}" for i in numbers]
            assert result.metadata[row] == [{"n": i} for i in numbers]


def test_without_rerank_the_search_is_unchanged():
    index, _, queries = _data()
    plain = index.search(queries, 5)
    again = index.search(queries, 5, rerank=None)
    np.testing.assert_array_equal(plain.ids, again.ids)
    np.testing.assert_array_equal(plain.scores, again.scores)


def test_rerank_names_with_options_and_bad_ones():
    assert rr.get("k_reciprocal:k1=10,lam=0.5") == rr.KReciprocal(k1=10, lam=0.5)
    assert rr.get("qe:n=3") == rr.AlphaQE(n=3)
    for bad, words in [("qx", "rerank must be one of"), ("qe:m=2", "takes n, alpha"),
                       ("qe:n=two", "n must be a number"), ("k_reciprocal:lam=2", "lam must"),
                       ("qe:mutual=-1", "mutual"), ("dba:relative=-1", "relative"),
                       ("dba:keep=-1", "keep must be an integer >= 0"),
                       ("k_reciprocal:keep=1.5", "keep must be a number")]:
        with pytest.raises(ValueError, match=words):
            rr.get(bad)
    for build, words in [(lambda: rr.DBA(keep=-1), "keep must be an integer >= 0"),
                         (lambda: rr.KReciprocal(lam=1.5), "lam must be in"),
                         (lambda: rr.AlphaQE(n=0), "n must be a positive integer")]:
        with pytest.raises(ValueError, match=words):  # objects built in Python too
            build()


def test_rerank_on_the_faiss_backend_agrees_with_exact():
    pytest.importorskip("faiss")
    index, gallery, queries = _data(4)
    hnsw = Index(backend="faiss_hnsw")
    hnsw.add(gallery, labels=np.arange(len(gallery)) % 4)
    for method in rr.METHODS:
        np.testing.assert_array_equal(index.search(queries, 5, rerank=method).ids,
                                      hnsw.search(queries, 5, rerank=method).ids)


@pytest.mark.slow
def test_rerank_on_milvus_lite_agrees_with_exact(tmp_path):
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    index, gallery, queries = _data(5)
    milvus = Index(backend="milvus", uri=str(tmp_path / "rerank.db"), collection="rerank")
    try:
        milvus.add(gallery, labels=np.arange(len(gallery)) % 4)
        for method in rr.METHODS:
            expected = index.search(queries, 5, rerank=method)
            found = milvus.search(queries, 5, rerank=method)
            np.testing.assert_array_equal(found.ids, expected.ids)
            np.testing.assert_array_equal(found.labels, expected.labels)
    finally:
        milvus.close()
