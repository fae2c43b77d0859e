"""`keras_dml.inference`: one embedding loop with one progress line, one label rule and
one bad-image rule, shared by every caller (evaluation, callbacks, index, export, CLI)."""

import io
import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import evaluation, inference
from keras_dml.data import Preprocessing
from keras_dml.data.bad_images import BadImageError
from keras_dml.index import Index
from keras_dml.inference import Embedded, Progress, embed, embed_chunks
from test_index_catalogue import CLASSES, _main, _png, run_dir  # noqa: F401 (fixture)

SIZE = 8
PREPARED = Preprocessing(image_size=SIZE, resize_size=SIZE)


def _model(inputs=(SIZE, SIZE, 3)):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(inputs), keras.layers.Flatten(),
                              keras.layers.Dense(4)])
    model.preprocessing = PREPARED
    return model


@pytest.fixture()
def files(tmp_path):
    """Six PNG files; the third unreadable (text), the fifth missing."""
    paths = []
    for i in range(6):
        path = tmp_path / f"{i}.png"
        if i == 2:
            path.write_text("<html>not an image</html>")
        elif i != 4:
            _png(path, (40 * i, 90, 90), i)
        paths.append(str(path))
    return paths


# -- the label rule --------------------------------------------------------------------------

LABEL_CASES = {
    "ids": (np.arange(6), (6,)),
    "a column": (np.arange(6).reshape(6, 1), (6,)),
    "two columns": (np.arange(12).reshape(6, 2), (6, 2)),
    "names": (np.array(list("aabbcc")), (6,)),
}


@pytest.mark.parametrize("case", LABEL_CASES)
def test_labels_keep_their_columns_in_every_form(case):
    labels, shape = LABEL_CASES[case]
    x = np.random.default_rng(0).random((6, 3)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    forms = {
        "arrays": (x, labels),
        "batches": [(x[:4], labels[:4]), (x[4:], labels[4:])],
        "tf.data": tf.data.Dataset.from_tensor_slices((x, labels)).batch(4),
    }
    for name, data in forms.items():
        embedded = embed(model, data, batch_size=4)
        assert embedded.labels.shape == shape, (case, name)
        np.testing.assert_array_equal(_text(embedded.labels), _text(labels.reshape(shape)),
                                      err_msg=f"{case} {name}")


def _text(labels):
    """Labels as str (tf.data gives class names as bytes)."""
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else str(v))(labels)


def test_every_caller_shares_the_label_rule():
    """(N, 2) labels reach every caller as (N, 2); the index, which holds one label per
    item, refuses them with a clear error instead of cutting them to a column."""
    from keras_dml.index.embedding import embed_batches

    x = np.random.default_rng(1).random((6, 3)).astype("float32")
    labels = np.arange(12).reshape(6, 2)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    seen = {
        "inference.embed": embed(model, (x, labels)).labels,
        "embed_dataset": evaluation.embed_dataset(model, (x, labels))[1],
        "embed_finite": evaluation.embedding.embed_finite(
            inference.inference_function(model), inference.as_dataset((x, labels), 4))[1],
    }
    with pytest.warns(DeprecationWarning):
        seen["index.embedding.embed_batches"] = embed_batches(model, (x, labels), verbose=0)[1]
    for caller, got in seen.items():
        np.testing.assert_array_equal(got, labels, err_msg=caller)
    with pytest.raises(ValueError, match="labels"):
        Index.from_model(model, (x, labels), verbose=0)
    assert embed(model, x).labels is None  # no labels: None, everywhere


def test_labels_in_only_some_batches_are_refused():
    x = np.zeros((2, 3), "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="labels for only some batches"):
        embed(model, [(x, [0, 1]), (x,)])


def test_wrong_outputs_and_empty_data_are_named():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Reshape((3, 1))])
    with pytest.raises(ValueError, match=r"must return \(batch, dim\) embeddings, got shape"):
        embed(model, np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match="data is empty: no batch to embed"):
        embed(_model((3,)), [])
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        embed_chunks(_model((3,)), np.zeros((2, 3), "float32"), 0)


# -- the bad-image rule ----------------------------------------------------------------------

def test_a_bad_image_stops_every_caller_with_its_name(files):
    model = _model()
    labels = np.arange(6)
    callers = {
        "inference.embed": lambda: embed(model, (files, labels)),
        "embed_chunks": lambda: list(embed_chunks(model, (files, labels), 2)),
        "embed_dataset": lambda: evaluation.embed_dataset(model, (files, labels)),
        "evaluate_retrieval": lambda: evaluation.evaluate_retrieval(model, (files, labels)),
        "Index.from_model": lambda: Index.from_model(model, (files, labels), verbose=0),
    }
    for caller, call in callers.items():
        with pytest.raises(BadImageError, match=r"cannot read or decode image 2 '.*2\.png'") \
                as error:
            call()
        assert "skip_bad_images=True" in str(error.value), caller


def test_skipping_leaves_the_bad_files_out_and_lists_them(files, capfd):
    model = _model()
    labels = np.arange(12).reshape(6, 2)
    embedded = embed(model, (files, labels), batch_size=4, skip_bad_images=True)
    assert embedded.positions.tolist() == [0, 1, 3, 5]
    assert embedded.paths == [files[i] for i in (0, 1, 3, 5)]
    np.testing.assert_array_equal(embedded.labels, labels[[0, 1, 3, 5]])
    assert embedded.skipped == [(files[2], "cannot be decoded"), (files[4], "missing")]
    err = capfd.readouterr().err
    assert err.count("keras_dml.data: skipped ") == 2  # each named once as it is met
    good = embed(model, [files[i] for i in (0, 1, 3, 5)])
    np.testing.assert_allclose(embedded.embeddings, good.embeddings, atol=1e-6)
    assert good.labels is None and good.skipped == []

    index = Index.from_model(model, (files, np.arange(6)), verbose=0, skip_bad_images=True,
                             metadata=list("abcdef"))
    assert index.labels.tolist() == [0, 1, 3, 5] and index.metadata == list("abdf")
    with pytest.raises(ValueError, match=r"No image of data could be read: every file was "
                                         r"skipped \(2, e.g. .*2\.png\)"):
        embed(model, [files[2], files[4]], skip_bad_images=True)


def test_chunks_cover_every_file_once_with_the_skipped_in_their_chunk(files):
    model = _model()
    chunks = list(embed_chunks(model, files, 2, batch_size=1, skip_bad_images=True))
    assert all(isinstance(chunk, Embedded) for chunk in chunks)
    kept = [p for chunk in chunks for p in chunk.positions.tolist()]
    skipped = [path for chunk in chunks for path, _ in chunk.skipped]
    assert kept == [0, 1, 3, 5] and skipped == [files[2], files[4]]
    assert [len(chunk) for chunk in chunks] == [2, 1, 1]  # files 2-3 and 4-5: one bad each
    whole = embed(model, files, skip_bad_images=True)
    np.testing.assert_allclose(np.concatenate([c.embeddings for c in chunks]),
                               whole.embeddings, atol=1e-6)


def test_the_progress_line_counts_every_item_skipped_or_not(files):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    line = Progress(6, stream=screen)
    embed(_model(), files, batch_size=3, skip_bad_images=True, progress=line)
    assert line.done == 6
    assert [frame.split("/")[0] for frame in screen.getvalue().split("\r")[1:]] == ["3", "6"]


def test_commands_stop_at_a_bad_image_unless_asked_to_skip(run_dir, tmp_path, capsys):  # noqa: F811
    from keras_dml import cli

    photos = tmp_path / "photos"
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(2):
            _png(photos / name / f"{i}.png", colour, 10 * number + i)
    (photos / "owl" / "bad.png").write_text("<html>not an image</html>")
    commands = {
        "embed": ["embed", run_dir, photos, "--output", tmp_path / "out.npz"],
        "index": ["index", run_dir, "--images", photos, "--output", tmp_path / "index"],
        "evaluate": ["evaluate", run_dir, "--images", photos, "--output", tmp_path / "eval",
                     "--ks", "1,2", "--no-report"],
    }
    for command, argv in commands.items():
        assert cli.main([str(a) for a in argv]) == 2, command
        err = capsys.readouterr().err
        assert re.search(rf"keras-dml {command}: error: .*cannot read or decode image \d+ "
                         r"'.*owl/bad\.png'.*or skip the bad files with --skip-bad-images",
                         err), (command, err)
    for command, argv in commands.items():
        _main(argv + ["--skip-bad-images", "--overwrite"], capsys)
    with np.load(tmp_path / "out.npz") as saved:
        assert len(saved["ids"]) == 6 and "owl/bad.png" not in saved["ids"].tolist()
        assert saved["labels"].tolist() == ["cat", "cat", "dog", "dog", "owl", "owl"]
    assert len(Index.load(tmp_path / "index")) == 6


# -- one home, earlier names -----------------------------------------------------------------

def test_earlier_names_lead_to_the_one_loop():
    from keras_dml.data.transforms import array_transform
    from keras_dml.evaluation import embedding
    from keras_dml.index import progress

    for name in ("ArrayBatches", "Batches", "as_dataset", "embed_finite", "finite_batches",
                 "finite_dataset", "inference_function"):
        assert getattr(embedding, name) is getattr(inference, name), name
    assert progress.Progress is Progress
    images = np.full((2, 4, 4), 255, np.uint8)
    x, _ = array_transform(type("Split", (), {"images": images}), (6, 6, 1))(images, None)
    assert tuple(x.shape) == (2, 6, 6, 1) and float(np.max(x)) == pytest.approx(1.0)


def test_old_keywords_and_functions_warn_and_still_work(files):
    from keras_dml.index import embedding

    model = _model()
    good = [files[i] for i in (0, 1, 3)]
    with pytest.warns(DeprecationWarning, match="dataset= is deprecated and removed in 0.3"):
        index = Index.from_model(embedder=model, dataset=(good, [0, 1, 1]), verbose=0)
    assert len(index) == 3 and index.metadata == good
    with pytest.raises(TypeError):
        Index.from_model(model, embedder=model, data=good)
    x = np.random.default_rng(0).random((6, SIZE, SIZE, 3)).astype("float32")
    y = np.repeat(np.arange(3), 2)
    with pytest.warns(DeprecationWarning, match="reference_dataset= is deprecated"):
        old = evaluation.evaluate_retrieval(model, dataset=(x, y), reference_dataset=(x, y),
                                            ks=(1,))
    assert old == evaluation.evaluate_retrieval(model, (x, y), gallery_data=(x, y), ks=(1,))
    with pytest.warns(DeprecationWarning, match="embed_source is deprecated"):
        embeddings, labels, paths = embedding.embed_source(model, (good, ["a", "b", "b"]),
                                                           verbose=0)
    assert embeddings.shape == (3, 4) and labels.tolist() == ["a", "b", "b"] and paths == good
    from keras_dml.index.catalogue import embed_files

    with pytest.warns(DeprecationWarning, match="embedder= is deprecated and removed in 0.3"):
        shape = embed_files(embedder=model, paths=good, preprocessing=PREPARED,
                            progress=False).shape
    assert shape == (3, 4)
    with pytest.warns(DeprecationWarning, match="source_preprocessing is deprecated"):
        assert embedding.source_preprocessing(model, good) is PREPARED
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        embed(model, good)  # the new names warn nothing


def test_run_chunks_old_protocol_is_deprecated(run_dir, files):  # noqa: F811
    from keras_dml.index.runs import embedded_chunks, load_run

    run = load_run(run_dir)
    with pytest.warns(DeprecationWarning, match="embedded_chunks is deprecated"):
        chunks = list(embedded_chunks(run, files, 10))
    (embeddings, kept, problems), = chunks
    assert embeddings.shape == (4, 6) and kept == [files[i] for i in (0, 1, 3, 5)]
    assert problems == [f"{files[2]} (cannot be decoded)", f"{files[4]} (missing)"]
