"""Faults: broken image files and broken list files say where they are."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import datasets
from keras_dml.data import Preprocessing, class_balanced_batches, evaluation_batches
from keras_dml.data.bad_images import MAX_BAD_BATCHES_IN_A_ROW

pytestmark = pytest.mark.faults

PREP = Preprocessing(image_size=16, resize_size=20)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _jpeg(seed):
    pixels = np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels).numpy()


def _write_cub(root, classes=4, per_class=4):
    """A CUB_200_2011 folder; returns the image paths in images.txt order."""
    os.makedirs(os.path.join(root, "images"))
    image_lines, label_lines, paths = [], [], []
    for c in range(1, classes + 1):
        folder = f"{c:03d}.class_{c}"
        os.makedirs(os.path.join(root, "images", folder))
        for j in range(per_class):
            i = len(paths) + 1
            rel = f"{folder}/img_{j}.jpg"
            with open(os.path.join(root, "images", rel), "wb") as f:
                f.write(_jpeg(i))
            image_lines.append(f"{i} {rel}")
            label_lines.append(f"{i} {c}")
            paths.append(os.path.join(root, "images", rel))
    for name, lines in (("images.txt", image_lines), ("image_class_labels.txt", label_lines),
                        ("classes.txt", [f"{c} {c:03d}.class_{c}" for c in
                                         range(1, classes + 1)])):
        with open(os.path.join(root, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return paths


def _truncate(path):
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 3])


def _edit_line(path, number, text):
    lines = open(path).read().splitlines()
    lines[number - 1] = text
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def test_a_truncated_jpeg_in_a_cub_folder_is_named_by_the_default_pipeline(tmp_path):
    paths = _write_cub(str(tmp_path))
    _truncate(paths[5])
    train = datasets.load("cub200", data_dir=str(tmp_path)).train  # classes 1-2: images 0-7
    index = train.paths.index(paths[5])
    ds = class_balanced_batches(train, 2, 4, seed=0, preprocessing=PREP)
    # (tf.data's own error prints the message as assertion data: quotes escaped)
    with pytest.raises(tf.errors.OpError, match=rf"image {index} \\?'.*img_1.jpg") as error:
        next(iter(ds))
    assert "skip_bad_images=True" in str(error.value)
    with pytest.raises(tf.errors.OpError, match=rf"image {index} \\?'.*img_1.jpg"):
        list(evaluation_batches(train, PREP, batch_size=3))


def _iterate_with_timeout(ds, steps, seconds=120):
    outcome = {}

    def run():
        try:
            for _ in ds.take(steps):
                pass
            outcome["finished"] = True
        except Exception as error:  # noqa: BLE001
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the pipeline hangs"
    return outcome


def test_an_all_bad_pipeline_fails_with_the_file_names_and_does_not_hang(tmp_path, capfd):
    paths = _write_cub(str(tmp_path), classes=2, per_class=3)
    for path in paths:
        _truncate(path)
    ds = class_balanced_batches((paths, np.repeat([0, 1], 3)), 2, 2, seed=0,
                                preprocessing=PREP, skip_bad_images=True)
    outcome = _iterate_with_timeout(ds, 5)
    message = str(outcome.get("error"))
    assert f"{MAX_BAD_BATCHES_IN_A_ROW} batches in a row" in message, outcome
    assert "img_0.jpg" in message
    err = capfd.readouterr().err
    assert err.count("keras_dml.data: skipped ") == len(paths), err  # each file named once


def test_a_missing_listed_file_is_reported_at_load_time_with_its_line(tmp_path):
    paths = _write_cub(str(tmp_path))
    os.remove(paths[2])
    os.remove(paths[9])
    with pytest.warns(UserWarning, match=r"skipped 2 of 16 images \(missing: 2\).*img_2.jpg "
                      r"missing \(images.txt line 3\).*img_1.jpg missing \(images.txt line 10\)"):
        splits = datasets.load("cub200", data_dir=str(tmp_path))
    assert len(splits.train) + len(splits.test) == 14


@pytest.mark.parametrize("filename, line, text, match", [
    ("images.txt", 4, "4", r"images.txt, line 4: expected 2 fields '<image_id> <path>', got 1"),
    ("images.txt", 2, "x 001.class_1/img_1.jpg", r"images.txt, line 2: image_id is not an integer"),
    ("images.txt", 3, "2 001.class_1/img_2.jpg", r"images.txt, line 3: image_id 2 already given "
                                                 r"at line 2"),
    ("image_class_labels.txt", 7, "7 two", r"image_class_labels.txt, line 7: class_id is not"),
    ("image_class_labels.txt", 5, "5 2 extra", r"image_class_labels.txt, line 5: expected 2"),
    ("classes.txt", 1, "one 001.class_1", r"classes.txt, line 1: class_id is not an integer"),
])
def test_a_malformed_cub_list_line_names_the_file_and_line(tmp_path, filename, line, text, match):
    _write_cub(str(tmp_path))
    _edit_line(os.path.join(tmp_path, filename), line, text)
    with pytest.raises(ValueError, match=match):
        datasets.load("cub200", data_dir=str(tmp_path))


def test_malformed_sop_and_inshop_lines_name_the_file_and_line(tmp_path):
    sop = tmp_path / "sop"
    sop.mkdir()
    for name in ("Ebay_train.txt", "Ebay_test.txt"):
        (sop / name).write_text("image_id class_id super_class_id path\n"
                                "1 1 1 a/1.jpg\n2 one 1 a/2.jpg\n")
    with pytest.raises(ValueError, match=r"Ebay_train.txt, line 3: class_id is not an integer"):
        datasets.load("sop", data_dir=str(sop))
    inshop = tmp_path / "inshop"
    inshop.mkdir()
    (inshop / "list_eval_partition.txt").write_text(
        "2\nimage_name item_id evaluation_status\nimg/a.jpg id_00000001 train\n"
        "img/b.jpg id_00000001 tran\n")
    with pytest.raises(ValueError, match=r"list_eval_partition.txt, line 4: evaluation_status"):
        datasets.load("inshop", data_dir=str(inshop))


def _fit_three_steps(paths):
    """`fit` with steps_per_epoch=3 on a 2 x 2 stream of 4 classes x 4 images (seed 0:
    batches 0-2 hold images {0-4, 6, 9, 11-15}, batch 3 images {5, 7, 8, 10})."""
    import keras

    from keras_dml.losses import MultiSimilarity
    from keras_dml.models import DMLModel

    ds = class_balanced_batches((paths, np.repeat(np.arange(4), 4)), 2, 2, seed=0,
                                preprocessing=PREP)
    inputs = keras.Input(PREP.output_shape)
    model = DMLModel(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(inputs)))
    model.compile("sgd", loss=MultiSimilarity())
    return model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0)


def test_a_bad_image_stops_fit_with_one_clean_error_naming_it(tmp_path):
    from keras_dml.data.bad_images import BadImageError

    paths = _write_cub(str(tmp_path))
    _truncate(paths[0])  # in batch 1
    with pytest.raises(BadImageError) as error:
        _fit_three_steps(paths)
    message = str(error.value)
    assert message.startswith("keras_dml.data: cannot read or decode image 0 '")
    assert "img_0.jpg' (batch 1)" in message and "Graph execution" not in message
    assert isinstance(error.value, ValueError) and error.value.__cause__ is None


def test_a_bad_image_in_a_batch_fit_never_takes_raises_nothing(tmp_path):
    paths = _write_cub(str(tmp_path))
    _truncate(paths[5])  # only in batch 3, which fit prefetches but never takes
    assert _fit_three_steps(paths).history["loss"]


@pytest.mark.slow
def test_a_bad_image_in_a_batch_never_taken_logs_no_traceback(tmp_path):
    paths = _write_cub(str(tmp_path))
    _truncate(paths[5])  # only in batch 3
    # TensorFlow's warnings (where a pipeline logs an error's traceback) are hidden in
    # this process: take 3 batches, as fit(steps_per_epoch=3), in one that shows them.
    script = (
        "import sys, time, numpy as np\n"
        "from keras_dml.data import Preprocessing, class_balanced_batches\n"
        f"paths = {paths!r}\n"
        "ds = class_balanced_batches((paths, np.repeat(np.arange(4), 4)), 2, 2, seed=0,\n"
        "    preprocessing=Preprocessing(image_size=16, resize_size=20))\n"
        "it = iter(ds)\n"
        "for _ in range(3): next(it)\n"
        "time.sleep(2)  # the prefetch reaches batch 3\n"
        "print('took 3 batches', flush=True)\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=300)
    assert "took 3 batches" in result.stdout, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "img_1.jpg" not in result.stderr, (
        result.stderr[-2000:])


def test_skip_bad_images_replaces_the_file_in_its_batch_and_names_it_once(tmp_path, capfd):
    from keras_dml.data.bad_images import guards_made, skipped_files

    paths = _write_cub(str(tmp_path), classes=2, per_class=3)
    _truncate(paths[0])
    mark = guards_made()
    ds = class_balanced_batches((paths, np.repeat([0, 1], 3)), 2, 3, seed=0,
                                preprocessing=PREP, skip_bad_images=True)
    batches = [(x.numpy(), y.numpy()) for x, y in ds.take(4)]
    for x, y in batches:  # every batch kept whole: C x k, its labels unshifted
        assert x.shape[0] == 6 and sorted(y) == [0, 0, 0, 1, 1, 1]
        # class 0's three samples are its two good images, one of them twice
        assert len({image.tobytes() for image in x[y == 0]}) == 2
        assert len({image.tobytes() for image in x[y == 1]}) == 3
    err = capfd.readouterr().err
    assert err.count("keras_dml.data: skipped ") == 1 and "img_0.jpg" in err, err
    assert skipped_files(mark) == [paths[0]]


def test_evaluation_batches_skip_bad_images_drops_only_the_file(tmp_path):
    paths = _write_cub(str(tmp_path), classes=2, per_class=3)
    _truncate(paths[4])
    ds = evaluation_batches((paths, np.repeat([0, 1], 3)), PREP, batch_size=4,
                            skip_bad_images=True)
    assert int(ds.cardinality()) == 2  # the length stays known
    labels = np.concatenate([y.numpy() for _, y in ds])
    assert list(labels) == [0, 0, 0, 1, 1]


def test_unreadable_files_lists_every_bad_file_with_its_reason(tmp_path):
    from keras_dml.data.verify import unreadable_files

    paths = _write_cub(str(tmp_path), classes=2, per_class=3)
    _truncate(paths[1])
    with open(paths[4], "w") as f:
        f.write("<html></html>")
    missing = str(tmp_path / "gone.jpg")
    assert unreadable_files(paths + [missing]) == [
        (paths[1], "cannot be decoded"), (paths[4], "cannot be decoded"), (missing, "missing")]
