import numpy as np
import pytest
import tensorflow as tf

from keras_dml import ops


def _points(n=6, d=5, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype("float32")


@pytest.mark.parametrize("metric", ops.METRICS)
def test_pairwise_matches_numpy(metric):
    q, k = _points(6), _points(4, seed=1)
    got = ops.pairwise(q, k, metric).numpy()
    if metric == "cosine":
        qn = q / np.linalg.norm(q, axis=1, keepdims=True)
        kn = k / np.linalg.norm(k, axis=1, keepdims=True)
        expected = qn @ kn.T
    elif metric == "dot":
        expected = q @ k.T
    else:
        expected = np.sqrt(((q[:, None] - k[None]) ** 2).sum(-1))
        if metric == "squared_euclidean":
            expected = expected**2
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_pairwise_defaults_to_self_and_euclidean_gradient_is_finite_at_zero():
    x = tf.Variable(np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]], "float32"))
    with tf.GradientTape() as tape:
        d = ops.pairwise(x, metric="euclidean")
        total = tf.reduce_sum(d)
    assert d.shape == (3, 3) and float(d[0, 1]) == 0.0
    assert np.isfinite(tape.gradient(total, x).numpy()).all()


@pytest.mark.parametrize("axis", [-1, 0])
def test_l2_normalize_equals_tensorflow_in_value_and_gradient(axis):
    points = _points(6, 4)
    points[4] = 0.0  # the zero vector maps to zero; a clipped norm has no radial part
    points[5] = 1e-8
    if axis == 0:
        points = np.ascontiguousarray(points.T)
    x = tf.Variable(points)
    upstream = tf.constant(np.random.default_rng(2).normal(size=points.shape), tf.float32)
    results = []
    for normalize in (ops.l2_normalize, lambda v, axis: tf.math.l2_normalize(v, axis=axis)):
        with tf.GradientTape() as tape:
            unit = normalize(x, axis=axis)
            total = tf.reduce_sum(unit * upstream)
        results.append((unit.numpy(), tape.gradient(total, x).numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(results[0][1]))


def test_pairwise_rejects_unknown_metric():
    with pytest.raises(ValueError, match="Unknown metric 'manhattan'"):
        ops.pairwise(_points(), metric="manhattan")


@pytest.mark.parametrize("metric", ops.SIMILARITIES)
@pytest.mark.parametrize("jit_compile", [False, True])
def test_similarities_between_rows_equal_the_gathered_pairwise_in_value_and_gradient(
        metric, jit_compile):
    points = _points(7, 4)
    points[5] = 0.0  # a zero row (normalised to zero) and a row whose norm is clipped
    points[6] = 1e-8
    x = tf.Variable(points)
    rows = tf.constant([0, 2, 5, 2], tf.int32)  # a repeated index: its gradients add up
    columns = tf.constant([1, 6, 3], tf.int32)
    upstream = tf.constant(np.random.default_rng(3).normal(size=(4, 3)), tf.float32)

    def value_and_gradient(similarities):
        @tf.function(jit_compile=jit_compile)
        def run():
            with tf.GradientTape() as tape:
                matrix = similarities()
                total = tf.reduce_sum(matrix * upstream)
            return matrix, tf.convert_to_tensor(tape.gradient(total, x))

        return [t.numpy() for t in run()]

    got = value_and_gradient(lambda: ops.similarities_between_rows(x, rows, columns, metric))
    expected = value_and_gradient(
        lambda: ops.pairwise(tf.gather(x, rows), tf.gather(x, columns), metric))
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)
    assert np.abs(got[1][[0, 2, 5]]).max() > 0  # the test reaches the rows it selects
    assert not got[1][4].any()  # an unselected row gets exactly zero


def test_similarities_between_rows_are_float32_and_reject_distances():
    half = tf.constant(_points(), tf.float16)
    matrix = ops.similarities_between_rows(half, tf.constant([0, 1]), tf.constant([2]))
    assert matrix.dtype == tf.float32 and matrix.shape == (2, 1)
    with pytest.raises(ValueError, match="metric in .* got 'euclidean'"):
        ops.similarities_between_rows(half, tf.constant([0]), tf.constant([1]), "euclidean")


def test_label_masks_remove_self_pairs_only_for_the_batch_itself():
    labels = tf.constant([0, 0, 1])
    pos, neg = ops.label_masks(labels)
    np.testing.assert_array_equal(pos.numpy(), [[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(neg.numpy(), [[0, 0, 1], [0, 0, 1], [1, 1, 0]])
    pos, _ = ops.label_masks(labels, tf.constant([0, 1]))
    np.testing.assert_array_equal(pos.numpy(), [[1, 0], [1, 0], [0, 1]])


def test_masked_reductions_match_numpy_and_are_finite_on_empty_rows():
    x = np.array([[1.0, 5.0, -2.0], [3.0, 4.0, 9.0]], "float32")
    mask = np.array([[True, False, True], [False, False, False]])
    assert ops.masked_max(x, mask).numpy().tolist() == [1.0, 0.0]
    assert ops.masked_min(x, mask).numpy().tolist() == [-2.0, 0.0]
    lse = ops.masked_logsumexp(x, mask).numpy()
    np.testing.assert_allclose(lse[0], np.log(np.exp(1.0) + np.exp(-2.0)), rtol=1e-6)
    assert lse[1] == 0.0
    soft = ops.masked_logsumexp(x, mask, include_zero=True).numpy()
    np.testing.assert_allclose(soft, [np.log(1 + np.exp(1.0) + np.exp(-2.0)), 0.0], rtol=1e-6)


def test_masked_logsumexp_is_stable_and_its_gradient_is_the_masked_softmax():
    x = tf.Variable(np.array([[1000.0, 999.0, -1000.0], [-5.0, 0.0, 0.0]], "float32"))
    mask = tf.constant([[True, True, False], [False, False, False]])
    with tf.GradientTape() as tape:
        value = ops.masked_logsumexp(x, mask, include_zero=True)
        total = tf.reduce_sum(value)
    grad = tape.gradient(total, x).numpy()
    assert np.isfinite(value.numpy()).all() and np.isfinite(grad).all()
    np.testing.assert_allclose(grad, ops.masked_softmax(x, mask, include_zero=True).numpy(),
                               atol=1e-6)
    assert (grad[1] == 0).all() and grad[0, 2] == 0.0


def test_masked_softmax_parts_match_numpy_and_drop_excluded_rows():
    x = np.array([[3.0, -200.0, 1.0, 0.5], [0.0, 2.0, -1.0, 4.0], [1.0, 1.0, 1.0, 1.0]],
                 "float32")
    mask = np.array([[True, True, False, True], [False, True, True, False],
                     [False, False, False, False]])
    rows = np.array([[True], [False], [True]])  # the second row is excluded, the third empty
    lse, softmax, non_empty = ops.masked_softmax_parts(x, mask, rows=rows)
    exps = np.where(mask, np.exp(x.astype("float64")), 0.0)
    expected_lse = np.log(exps[0].sum())
    np.testing.assert_allclose(lse.numpy(), [expected_lse, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(softmax.numpy()[0], exps[0] / exps[0].sum(), rtol=1e-6, atol=1e-30)
    assert not softmax.numpy()[1:].any()
    assert non_empty.numpy().ravel().tolist() == [True, False, False]
    # without `rows`, the same as the two single-purpose reductions
    lse, softmax, _ = ops.masked_softmax_parts(x, mask)
    np.testing.assert_allclose(lse.numpy(), ops.masked_logsumexp(x, mask).numpy(), rtol=1e-6)
    np.testing.assert_allclose(softmax.numpy(), ops.masked_softmax(x, mask).numpy(), rtol=1e-6)


def test_logaddexp_matches_numpy_and_is_finite_on_two_lowest_floats():
    a = np.array([0.0, 1000.0, -3.0, -1e4], "float32")
    b = np.array([0.0, 999.0, 2.0, -1e4], "float32")
    np.testing.assert_allclose(ops.logaddexp(a, b).numpy(), np.logaddexp(a, b), rtol=1e-6)
    lowest = np.full(2, np.finfo("float32").min, "float32")
    assert np.isfinite(ops.logaddexp(lowest, lowest).numpy()).all()


def test_grouped_softplus_lse_is_the_per_group_log_one_plus_sum_exp_and_shares():
    x = np.array([2.0, -1.0, 90.0, 0.5, 3.0], "float32")
    groups = np.array([0, 0, 2, 2, 0], "int32")
    values, shares = ops.grouped_softplus_lse(x, groups, 4)  # group 1 and 3 are empty
    totals = [1.0 + np.exp(x[groups == g].astype("float64")).sum() for g in range(4)]
    np.testing.assert_allclose(values.numpy(), np.log(totals), rtol=1e-6)
    np.testing.assert_allclose(shares.numpy(),
                               np.exp(x.astype("float64")) / np.take(totals, groups), rtol=1e-6,
                               atol=1e-30)  # exp(0.5 - 90) underflows float32


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reductions_are_float32_for_half_precision_inputs(dtype):
    x = tf.cast(tf.constant([[60000.0, 1.0], [2.0, 3.0]]), dtype)
    mask = tf.constant([[True, True], [True, False]])
    for value in (ops.masked_logsumexp(x, mask), ops.masked_max(x, mask),
                  ops.pairwise(x, metric="squared_euclidean")):
        assert value.dtype == tf.float32
        assert np.isfinite(value.numpy()).all()


@pytest.mark.parametrize("padded", [False, True])
def test_first_pair_per_class_takes_each_class_first_two_samples(padded):
    labels = tf.constant([3, 1, 3, 2, 1, 1, 0, 2, 5], tf.int32)
    anchors, positives, valid = ops.first_pair_per_class(labels, padded=padded)
    pairs = [(int(a), int(p)) for a, p, v in zip(anchors, positives, valid) if v]
    assert pairs == [(0, 2), (1, 4), (3, 7)]  # labels 3, 1, 2; 0 and 5 are singletons
    assert len(valid) == (4 if padded else 3)
    for labels in ([], [7], [0, 1, 2]):
        anchors, _, valid = ops.first_pair_per_class(tf.constant(labels, tf.int32), padded)
        assert not np.any(valid.numpy())


def test_cosine_between_matches_autodiff_of_normalised_matmul():
    rng = np.random.default_rng(9)
    x = tf.Variable(np.concatenate([rng.normal(size=(5, 6)), np.zeros((1, 6))]).astype("f"))
    k = tf.Variable(rng.normal(size=(7, 6)).astype("float32") * 3.0)
    upstream = tf.constant(rng.normal(size=(6, 7)).astype("float32"))
    results = []
    for similarity in (ops.cosine_between, lambda a, b: tf.matmul(
            ops.l2_normalize(a), ops.l2_normalize(b), transpose_b=True)):
        with tf.GradientTape() as tape:
            s = similarity(x, k)
            total = tf.reduce_sum(s * upstream)
        results.append([s] + tape.gradient(total, [x, k]))
    for fused, plain in zip(*results):
        np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_similarity_gradients_from_weights_equal_autodiff_through_the_matrix(metric):
    rng = np.random.default_rng(4)
    x = tf.constant(np.concatenate([rng.normal(size=(5, 6)), np.zeros((1, 6))]).astype("f"))
    k = tf.constant(rng.normal(size=(7, 6)).astype("float32") * 3.0)
    weights = tf.constant(rng.normal(size=(6, 7)).astype("float32"))
    row_scale = tf.constant(rng.normal(size=6).astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch([x, k])
        s = ops.pairwise(x, k, metric)
        total = tf.reduce_sum(s * weights * row_scale[:, tf.newaxis])
    expected = tape.gradient(total, [x, k])
    got = ops.similarity_gradients(x, k, weights, row_scale, metric)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    only_queries = ops.similarity_gradients(x, k, weights, row_scale, metric,
                                            key_gradient=False)
    np.testing.assert_allclose(only_queries[0], expected[0], rtol=1e-5, atol=1e-6)
    assert not np.any(only_queries[1])
    with pytest.raises(ValueError, match="euclidean"):
        ops.similarity_gradients(x, k, weights, row_scale, "euclidean")
    for key_gradient in (True, False):
        blocks = tf.TensorArray(tf.float32, size=3, infer_shape=False)
        for i, start in enumerate((0, 4)):  # row blocks of 4 rows, the last shorter
            blocks = blocks.write(i, weights[start:start + 4])
        blocks = blocks.write(2, weights[6:])  # and an empty one
        from_blocks = ops.similarity_gradients(x, k, blocks, row_scale, metric, key_gradient,
                                               block_rows=4)
        for a, b in zip(from_blocks, ops.similarity_gradients(x, k, weights, row_scale, metric,
                                                              key_gradient)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_closest_below_is_the_largest_candidate_under_the_threshold():
    rng = np.random.default_rng(4)
    similarity = rng.uniform(-1, 1, size=(7, 9)).astype("float32")
    similarity[0, 3] = similarity[0, 5] = 0.25  # a tie: the first column wins
    negative = rng.uniform(size=(7, 9)) < 0.5
    negative[0, [3, 5]] = True
    threshold = rng.uniform(-1, 1, size=(7, 1)).astype("float32")
    threshold[0] = 0.3
    threshold[1] = -2.0  # no candidate below
    chosen, found = ops.closest_below(
        ops.masked_fill(tf.constant(similarity), negative, tf.float32.min), threshold)
    for a in range(7):
        below = [j for j in range(9) if negative[a, j] and similarity[a, j] < threshold[a, 0]]
        assert bool(found[a]) == bool(below)
        if below:
            best = max(similarity[a, j] for j in below)
            assert int(chosen[a]) == min(j for j in below if similarity[a, j] == best)
    assert int(chosen[0]) == 3 and not bool(found[1])


def test_unit_rows_is_the_numpy_twin_of_l2_normalize():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-8, 0.0], [-2.0, 0.5]], np.float32)
    np.testing.assert_allclose(ops.unit_rows(x), ops.l2_normalize(x).numpy(), rtol=1e-6,
                               atol=0)
    assert np.all(ops.unit_rows(x)[1] == 0.0)
