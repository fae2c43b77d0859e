"""A folder or CSV of images: listed, embedded (`keras-dml embed`), indexed, searched and
calibrated from the command line, and indexed from Python."""

import io
import json
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import cli, datasets
from keras_dml.data import Preprocessing, decode_image, evaluation_batches
from keras_dml.index import Index, model_fingerprint
from keras_dml.index.catalogue import list_images, save_embeddings
from keras_dml.index.progress import Progress
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel

PREPROCESSING = Preprocessing(image_size=16, resize_size=20)
CLASSES = {"cat": (200, 40, 40), "dog": (40, 200, 40), "owl": (40, 40, 200)}


def _png(path, colour, seed):
    rng = np.random.default_rng(seed)
    image = np.clip(np.asarray(colour) + rng.integers(-30, 30, (24, 20, 3)), 0, 255)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tf.io.encode_png(image.astype(np.uint8)).numpy())
    return path


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """root/<class>/<image>.png (3 classes x 3), one image outside a class, a text file."""
    root = tmp_path_factory.mktemp("photos")
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(3):
            _png(root / name / f"{i}.png", colour, 10 * number + i)
    _png(root / "loose.png", (128, 128, 128), 99)
    (root / "notes.txt").write_text("not an image")
    return root


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run on image files as `keras-dml train` leaves it (untrained: the commands'
    plumbing is under test), its preprocessing recorded in summary.json."""
    root = tmp_path_factory.mktemp("runs") / "photo-run"
    root.mkdir()
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    DMLModel(inputs, EmbeddingHead(6)(x)).save(root / "model.keras")
    (root / "summary.json").write_text(json.dumps({
        "config": {"dataset": "folder"},
        "export": {"input_format": "image_bytes", "preprocessing": PREPROCESSING.to_dict()}}))
    return root


def _main(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _embedder(run_dir):
    return keras.saving.load_model(run_dir / "model.keras").embedder()


def _expected(run_dir, paths):
    """The embedder on the images decoded and prepared by hand."""
    images = [PREPROCESSING.eval(decode_image(tf.io.read_file(str(p)))) for p in paths]
    return _embedder(run_dir).predict(np.stack(images), verbose=0)


def test_list_images_reads_class_folders_and_loose_images(photos):
    with pytest.warns(UserWarning, match=r"skipped 1 entries \(not an image: 1\).*notes.txt"):
        catalogue = list_images(photos)
    assert catalogue.ids == ["loose.png"] + [f"{c}/{i}.png" for c in CLASSES for i in range(3)]
    assert catalogue.labels == [""] + [c for c in CLASSES for _ in range(3)]
    assert catalogue.paths[1] == str(photos / "cat" / "0.png") and catalogue.labelled


def test_list_images_reads_a_csv_list(photos, tmp_path):
    listing = tmp_path / "list.csv"
    rows = [f"{photos / c / f'{i}.png'},{c}" for c in ("dog", "cat") for i in (2, 0)]
    listing.write_text("path,label\n" + "\n".join(rows) + "\n")
    catalogue = list_images(listing)
    assert catalogue.ids == sorted(str(photos / c / f"{i}.png") for c in ("dog", "cat")
                                   for i in (2, 0))  # outside the CSV's folder: as listed
    assert catalogue.labels == [p.split("/")[-2] for p in catalogue.ids]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list_images(tmp_path / "missing")


def test_embed_writes_an_npz_numpy_reads(photos, run_dir, tmp_path, capsys):
    output = tmp_path / "out" / "catalogue.npz"
    with pytest.warns(UserWarning, match="notes.txt"):
        out = _main(["embed", run_dir, photos, "--output", output, "--batch-size", "4"], capsys)
    assert re.search(r"^embedded 10 images in [\d.]+ s \([\d.]+ images/s\)$", out, re.M), out
    with np.load(output, allow_pickle=False) as saved:  # plain arrays: no keras_dml needed
        assert sorted(saved.files) == ["embeddings", "ids", "labels"]
        embeddings, ids, labels = saved["embeddings"], saved["ids"], saved["labels"]
    assert embeddings.dtype == np.float32 and embeddings.shape == (10, 6)
    assert ids[0] == "loose.png" and ids[1] == "cat/0.png" and labels.tolist()[:2] == ["", "cat"]
    np.testing.assert_allclose(embeddings, _expected(run_dir, [photos / i for i in ids]),
                               atol=1e-5)

    assert cli.main(["embed", str(run_dir), str(photos), "--output", str(output)]) == 2
    assert "--overwrite" in capsys.readouterr().err  # never replaced unasked
    with pytest.warns(UserWarning, match="notes.txt"):
        _main(["embed", run_dir, photos, "--output", output, "--overwrite"], capsys)


def test_embed_a_folder_without_classes_and_a_bad_image(run_dir, tmp_path, capsys):
    flat = tmp_path / "flat"
    for i in range(3):
        _png(flat / f"{i}.PNG", (90, 90, 90), i)
    _main(["embed", run_dir, flat, "--output", tmp_path / "flat.npz"], capsys)
    with np.load(tmp_path / "flat.npz", allow_pickle=False) as saved:
        assert sorted(saved.files) == ["embeddings", "ids"]  # no classes: no labels
        assert saved["ids"].tolist() == ["0.PNG", "1.PNG", "2.PNG"]

    (flat / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    assert cli.main(["embed", str(run_dir), str(flat), "--output", str(tmp_path / "b.npz")]) == 2
    err = capsys.readouterr().err
    assert "keras-dml embed: error:" in err and "3.png" in err and "Traceback" not in err
    assert not (tmp_path / "b.npz").exists()


def test_save_embeddings_refuses_to_overwrite(tmp_path):
    path = tmp_path / "e.npy"  # any name: NumPy adds no suffix
    save_embeddings(path, np.ones((2, 3)), ["a", "b"])
    with pytest.raises(FileExistsError, match="overwrite"):
        save_embeddings(path, np.ones((2, 3)), ["a", "b"])
    with np.load(path, allow_pickle=False) as saved:
        assert saved["ids"].tolist() == ["a", "b"] and "labels" not in saved.files


def test_index_images_search_prints_paths_and_calibrate(photos, run_dir, tmp_path, capsys):
    with pytest.warns(UserWarning, match="notes.txt"):
        out = _main(["index", run_dir, "--images", photos, "--output", tmp_path / "index"],
                    capsys)
    assert "(10 items, dimension 6, exact)" in out
    index = Index.load(tmp_path / "index")
    assert index.labels.tolist() == [""] + [c for c in CLASSES for _ in range(3)]
    assert index.metadata[:2] == [{"path": "loose.png"}, {"path": "cat/0.png"}]
    assert index.info["catalogue"] == {"root": str(photos), "ids": "relative_path"}

    query = photos / "dog" / "1.png"
    out = _main(["search", tmp_path / "index", query, "--k", "3"], capsys)
    first = re.search(r"^\s+1\. (\S+)\s+label (\S+)\s+score ([\d.]+)", out, re.M)
    assert first.groups() == ("dog/1.png", "dog", "1.0000")  # the image itself, by path
    expected = index.search(_expected(run_dir, [query]), 3)
    printed = re.findall(r"^\s+\d\. (\S+)", out, re.M)
    assert printed == [item["path"] for item in expected.metadata[0]]

    with pytest.warns(UserWarning, match="notes.txt"):
        out = _main(["calibrate", run_dir, "--images", photos, "--target-precision", "0.5",
                     "--no-plots"], capsys)
    assert "left out 1 images outside any class folder" in out
    assert f"pairs of {photos}" in out
    calibration = json.loads((run_dir / "calibration" / "calibration.json").read_text())
    assert calibration["images"] == str(photos) and calibration["pairs"] == 9 * 8 // 2

    assert cli.main(["index", str(run_dir), "--images", str(photos), "--dataset", "digits"]) == 2
    assert "not both" in capsys.readouterr().err


def test_the_index_records_its_model_and_search_refuses_another(photos, run_dir, tmp_path,
                                                                capsys):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    with pytest.warns(UserWarning, match="notes.txt"):
        _main(["index", run, "--images", photos, "--output", tmp_path / "index"], capsys)
    made = Index.load(tmp_path / "index").provenance
    before = model_fingerprint(_embedder(run))
    assert made["model_fingerprint"] == before and made["run"] == str(run)
    assert made["preprocessing"] == PREPROCESSING.to_dict()
    model = keras.saving.load_model(run / "model.keras")  # the run retrained in place
    model.set_weights([w + 0.5 for w in model.get_weights()])
    model.save(run / "model.keras")
    assert cli.main(["search", str(tmp_path / "index"), str(photos / "dog" / "1.png")]) == 2
    err = capsys.readouterr().err
    assert before in err and model_fingerprint(_embedder(run)) in err and str(run) in err


def test_calibrate_images_needs_labels(run_dir, tmp_path, capsys):
    flat = tmp_path / "flat"
    for i in range(3):
        _png(flat / f"{i}.png", (90, 90, 90), i)
    assert cli.main(["calibrate", str(run_dir), "--images", str(flat),
                     "--target-precision", "0.5", "--no-plots"]) == 2
    assert "no class folders" in capsys.readouterr().err


def test_from_model_on_a_file_split_keeps_paths_and_class_names(photos, run_dir):
    with pytest.warns(UserWarning):
        split = datasets.from_directory(photos, test_classes=1).test
    embedder = _embedder(run_dir)
    index = Index.from_model(embedder, split, verbose=0, preprocessing=PREPROCESSING)
    assert index.metadata == split.paths  # issue 43: not None
    assert index.labels.tolist() == [split.class_names[y] for y in split.labels]
    np.testing.assert_allclose(index.embeddings, _expected(run_dir, split.paths), atol=1e-5)
    result = index.search(index.embeddings[:2], k=1)
    assert [row[0] for row in result.metadata] == split.paths[:2]

    # (paths, labels), the default preprocessing (the embedder's input size), metadata=
    files = Index.from_model(embedder, (split.paths, split.labels), verbose=0,
                             metadata=[{"n": i} for i in range(len(split))])
    assert files.metadata[1] == {"n": 1} and files.labels.tolist() == split.labels.tolist()
    default = Index.from_model(embedder, (split.paths, split.labels), verbose=0)
    assert default.metadata == split.paths
    # An evaluation dataset carries no paths: no metadata, as before.
    batches = evaluation_batches(split, PREPROCESSING)
    assert Index.from_model(embedder, batches, verbose=0).metadata == [None] * len(split)


def test_progress_bar_shows_images_per_second_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    bar = Progress(10, stream=screen)
    bar.update(4)
    bar.update(6)
    bar.close()
    assert re.search(r"^\r4/10 \[=+ +\] [\d.]+ images/s, \d+ s left", screen.getvalue())
    assert "10/10" in screen.getvalue() and screen.getvalue().endswith("\n")
    quiet = io.StringIO()  # not a terminal: nothing drawn, the rate still measured
    bar = Progress(5, stream=quiet)
    bar.update(5)
    bar.close()
    assert quiet.getvalue() == "" and bar.done == 5 and bar.rate > 0


@pytest.fixture()
def index_dir(photos, run_dir, tmp_path, capsys):
    with pytest.warns(UserWarning, match="notes.txt"):
        _main(["index", run_dir, "--images", photos, "--output", tmp_path / "index"], capsys)
    return tmp_path / "index"


def test_search_answers_good_queries_and_names_each_bad_one(photos, run_dir, index_dir, tmp_path,
                                                           capsys):
    html = tmp_path / "page.jpg"
    html.write_text("<html>not a photo</html>")
    queries = tmp_path / "queries"
    _png(queries / "a.png", CLASSES["owl"], 5)
    (queries / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    code = cli.main(["search", str(index_dir), str(photos / "cat" / "0.png"), str(html),
                     str(tmp_path / "missing.png"), str(queries), "--k", "2"])
    out, err = capsys.readouterr()
    assert code == 1
    answered = re.findall(r"^(\S+)$", out, re.M)
    assert answered == [str(photos / "cat" / "0.png"), str(queries / "a.png")]
    assert "function_node" not in err and "Traceback" not in err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 3, err
    assert any(f"{html} (cannot be decoded)" in line for line in errors)
    assert any(str(queries / "b.jpg") in line for line in errors)
    assert any("missing.png" in line for line in errors)
    assert "3 of 5 queries could not be read" in err


def test_search_k_above_the_index_size_prints_all_with_a_note(index_dir, photos, capsys):
    out = _main(["search", index_dir, photos / "dog" / "0.png", "--k", "50"], capsys)
    assert len(re.findall(r"^\s+\d+\. ", out, re.M)) == 10
    # The same query in Python is refused: the CLI caps k and says so instead.
    with pytest.raises(ValueError, match="k=50 exceeds the 10 items"):
        Index.load(index_dir).search(np.ones((1, 6), "float32"), 50)
    cli.main(["search", str(index_dir), str(photos / "dog" / "0.png"), "--k", "50"])
    assert "note: --k 50 is more than the 10 items in the index: using k=10" in (
        capsys.readouterr().err)


def test_search_refuses_another_model_and_follows_a_moved_run(photos, run_dir, index_dir,
                                                              tmp_path, capsys):
    import shutil

    index = Index.load(index_dir)
    assert index.provenance["run"] == str(run_dir)
    assert index.provenance["preprocessing"] == PREPROCESSING.to_dict()
    fingerprint = index.provenance["model_fingerprint"]
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", fingerprint)
    moved = tmp_path / "moved-run"
    shutil.copytree(run_dir, moved)
    query = str(photos / "owl" / "2.png")
    # The run's model retrained (other weights) at the recorded place: refused, both named.
    keras.utils.set_random_seed(1)
    model = keras.saving.load_model(moved / "model.keras")
    model.set_weights([w + 0.1 for w in model.get_weights()])
    retrained = tmp_path / "retrained"
    shutil.copytree(run_dir, retrained)
    model.save(retrained / "model.keras")
    assert cli.main(["search", str(index_dir), query, "--run", str(retrained)]) == 2
    err = capsys.readouterr().err
    assert f"model {fingerprint} (run {run_dir})" in err
    assert f"(run {retrained})" in err and err.count("\n") == 1 and "--allow-mismatch" in err
    with pytest.warns(UserWarning, match=f"allow_mismatch=True: .*{fingerprint}"):
        out = _main(["search", index_dir, query, "--run", retrained, "--allow-mismatch"],
                    capsys)
    assert out.startswith(query)
    # The run moved: the error says where the index points; --run follows it.
    shutil.move(run_dir, tmp_path / "elsewhere")
    try:
        assert cli.main(["search", str(index_dir), query]) == 2
        err = capsys.readouterr().err
        assert f"points to the run {run_dir}" in err and "--run" in err
        out = _main(["search", index_dir, query, "--run", moved], capsys)
        assert re.search(r"^\s+1\. owl/2.png\s+label owl\s+score 1.0000", out, re.M)
    finally:
        shutil.move(tmp_path / "elsewhere", run_dir)


def test_embedding_shows_images_per_second_and_time_left(run_dir):
    from keras_dml.inference import embed

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    images = np.random.default_rng(0).random((23, 16, 16, 3)).astype("float32")
    embedded = embed(_embedder(run_dir), images, batch_size=10,
                     progress=Progress(23, stream=screen))
    assert embedded.embeddings.shape == (23, 6)
    frames = screen.getvalue().split("\r")[1:]
    assert [f.split("/")[0] for f in frames] == ["10", "20", "23"]
    assert re.match(r"23/23 \[=+\] [\d.]+ images/s, 0 s left", frames[-1])
