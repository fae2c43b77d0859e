"""`keras-dml train --data-dir DIR` on your own images: a folder of class folders or a CSV."""

import json
import os
import re
import struct

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import cli

# A 1 x 1 GIF89a (TensorFlow decodes GIF but cannot write one).
GIF = (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00"
       b"\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")
TINY = ["--epochs", "1", "--steps-per-epoch", "2", "--image-size", "16",
        "--classes-per-batch", "2", "--samples-per-class", "2", "--embedding-dim", "8",
        "--width", "4", "--no-export", "--no-plots"]


def bmp(image):
    """A 24-bit BMP of a uint8 `(h, w, 3)` image."""
    h, w, _ = image.shape
    stride = (3 * w + 3) // 4 * 4
    rows = np.zeros((h, stride), np.uint8)
    rows[:, :3 * w] = image[::-1, :, ::-1].reshape(h, 3 * w)  # bottom-up, BGR
    header = struct.pack("<2sIHHI", b"BM", 54 + rows.size, 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, rows.size, 2835, 2835, 0, 0)
    return header + info + rows.tobytes()


def mixed_images(root, classes=("ant", "bee", "cat", "dog")):
    """Per class: a grey PNG, colour JPEGs of other sizes, a GIF and a BMP."""
    rng = np.random.default_rng(0)
    for name in classes:
        folder = os.path.join(root, name)
        os.makedirs(folder)
        files = {
            "grey.png": tf.io.encode_png(rng.integers(0, 255, (20, 30, 1), np.uint8)),
            "colour.JPG": tf.io.encode_jpeg(rng.integers(0, 255, (40, 24, 3), np.uint8)),
            "small.jpeg": tf.io.encode_jpeg(rng.integers(0, 255, (12, 12, 3), np.uint8)),
            "one.gif": GIF,
            "wide.BMP": bmp(rng.integers(0, 255, (9, 31, 3), np.uint8)),
        }
        for file, data in files.items():
            with open(os.path.join(folder, file), "wb") as handle:
                handle.write(data.numpy() if hasattr(data, "numpy") else data)
    return str(root)


def test_help_names_every_known_layout_and_the_rule(capsys):
    from keras_dml.datasets.layout import MARKERS

    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, (marker, _) in MARKERS.items():
        assert f"{name} {marker}" in text, name
    assert "any other folder is folder" in text and "a file is csv" in text


def test_train_on_a_folder_of_mixed_images_saves_the_class_names(tmp_path, capsys):
    photos = mixed_images(tmp_path / "photos")
    code = cli.main(["train", "--data-dir", photos, *TINY, "--runs-dir", str(tmp_path / "runs"),
                     "--run-name", "mine"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "folder: 2 training classes (10 images), 2 test classes (10 images)" in out
    run = tmp_path / "runs" / "mine"
    names = json.loads((run / "class_names.json").read_text())
    assert sorted(names["train"] + names["test"]) == ["ant", "bee", "cat", "dog"]
    config = json.loads((run / "config.json").read_text())
    assert config["dataset"] == "folder" and config["data_dir"] == photos


@pytest.mark.slow
def test_train_on_a_folder_of_20_classes_picks_a_batch_design_that_fits(tmp_path, capsys):
    """The guide's `keras-dml train --data-dir photos/` on a catalogue of 20 classes: 10
    train, fewer than the default 32 a batch; the run says the design it took."""
    rng = np.random.default_rng(0)
    for number in range(20):
        for i in range(2):
            folder = tmp_path / "photos" / f"class{number:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i}.png").write_bytes(tf.io.encode_png(
                rng.integers(0, 255, (12, 12, 3), np.uint8)).numpy())
    at = TINY.index("--classes-per-batch")
    given = TINY[:at] + TINY[at + 2:]  # C not given: the default, 32
    with pytest.warns(UserWarning, match=re.escape(
            "10 training classes, fewer than the default 32 a batch: each batch holds all 10 "
            "classes x 2 images (--classes-per-batch 10).")):
        code = cli.main(["train", "--data-dir", str(tmp_path / "photos"), *given,
                         "--runs-dir", str(tmp_path / "runs"), "--run-name", "few"])
    assert code == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "runs" / "few" / "config.json").read_text())
    assert config["classes_per_batch"] == 10


@pytest.mark.parametrize("setup, args, message", [
    (lambda root: None, [], "is empty: it needs one folder of images per class"),
    (lambda root: open(os.path.join(root, "x.jpg"), "w").close(), [],
     "holds 1 images but no class folders: put each class's images in"),
    (lambda root: mixed_images(root, ("a",)), [], r"1 class \(a\); a class-disjoint"),
    (lambda root: [mixed_images(os.path.join(root, part), names) for part, names in
                   (("train", ("a", "b")), ("test", ("b", "c")))], [],
     r"classes are in both train and test \(e.g. b\)"),
    (lambda root: mixed_images(root, ("a", "b", "c")), ["--test-classes", "3"],
     "--test-classes must be a fraction in"),
    (lambda root: None, ["--dataset", "digits", "--test-classes", "0.3"],
     "--test-classes is for your own images"),
])
def test_bad_folder_is_a_one_line_error(tmp_path, capsys, setup, args, message):
    root = tmp_path / "photos"
    root.mkdir()
    setup(str(root))
    _assert_refused(tmp_path, capsys, root, args, message)


def test_a_csv_file_is_read_as_csv(tmp_path, capsys):
    """`--data-dir FILE` is the csv dataset: its errors name the file and line."""
    mixed_images(tmp_path / "photos", ("a", "b"))
    listing = tmp_path / "list.csv"
    listing.write_text("path,label\nphotos/a/grey.png,a\nphotos/a/grey.png,a\n")
    _assert_refused(tmp_path, capsys, listing, [],
                    r"list.csv, line 3: 'photos/a/grey.png' is listed again \(first at line 2\)")


def _assert_refused(tmp_path, capsys, data_dir, args, message):
    code = cli.main(["train", "--data-dir", str(data_dir), *args, *TINY,
                     "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("keras-dml train: error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not (tmp_path / "runs").exists()  # refused before any run folder
