"""benchmarks/forward_twins.py: the embedder's forward pass beside its twins."""

import pytest


def test_quick_run_times_keras_dml_plain_keras_and_the_framework_alone(capsys):
    from benchmarks.forward_twins import main

    table = main(["--quick"])
    names = list(table)
    assert names[:2] == ["keras_dml", "plain Keras"] and len(names) >= 3
    assert all(cell["median"] > 0 for cell in table.values())
    assert "| keras_dml | " in capsys.readouterr().out


def test_the_twins_compute_embeddings_of_one_shape():
    import numpy as np

    from benchmarks.forward_twins import EMBEDDING, systems

    x = np.random.default_rng(0).random((4, 32, 32, 3), dtype=np.float32)
    for name, forward in systems(32).items():
        out = np.asarray(forward(x))
        assert out.shape == (4, EMBEDDING), name
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("argv, message", [
    (["--image-size", "30"], "--image-size must be a multiple of 8, got 30"),
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
])
def test_bad_flags_are_one_line(argv, message, capsys):
    from benchmarks.forward_twins import main

    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
