import numpy as np
import pytest

import keras_dml
from keras_dml.datasets import DMLSplits, LabeledImages, load


def test_digits_contract():
    splits = load("digits")
    assert isinstance(splits, DMLSplits)
    train, test = splits.train, splits.test
    assert isinstance(train, LabeledImages)
    assert train.images.shape[1:] == (8, 8, 1) and train.images.dtype == np.float32
    assert len(train) + len(test) == 1797
    assert 0.0 <= train.images.min() and train.images.max() == 1.0
    assert train.num_classes == test.num_classes == 5
    np.testing.assert_array_equal(train.original_class_ids, [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(test.original_class_ids, [5, 6, 7, 8, 9])
    assert test.class_names == ["5", "6", "7", "8", "9"]
    assert train.labels.dtype == np.int32 and set(train.labels) == set(range(5))
    assert train.paths is None
    # Label mapping is faithful: compare against scikit-learn directly.
    from sklearn.datasets import load_digits

    bunch = load_digits()
    mask = bunch.target >= 5
    np.testing.assert_array_equal(test.original_class_ids[test.labels], bunch.target[mask])
    np.testing.assert_allclose(test.images[..., 0] * 16, bunch.images[mask])
    assert load("digits", split="test").num_classes == 5


def test_unknown_name_and_split():
    with pytest.raises(ValueError, match="Unknown dataset"):
        load("mnist-ish")
    with pytest.raises(ValueError, match="split"):
        load("digits", split="validation")
    with pytest.raises(ValueError, match="gallery"):
        load("digits", split="gallery")


def test_labeled_images_validation():
    with pytest.raises(ValueError, match="exactly one"):
        LabeledImages(images=None, paths=None, labels=np.zeros(1, int),
                      class_names=["a"], original_class_ids=np.array([0]))
    with pytest.raises(ValueError, match="must match"):
        LabeledImages(images=np.zeros((2, 1, 1, 1)), paths=None, labels=np.zeros(3, int),
                      class_names=["a"], original_class_ids=np.array([0]))
    with pytest.raises(ValueError, match="range"):
        LabeledImages(images=np.zeros((2, 1, 1, 1)), paths=None, labels=np.array([0, 2]),
                      class_names=["a", "b"], original_class_ids=np.array([0, 1]))


def test_rotated_classes_are_new_classes_in_memory_only():
    images = np.arange(2 * 3 * 3).reshape(2, 3, 3).astype(np.uint8)
    split = LabeledImages(images=images, paths=None, labels=np.array([1, 0]),
                          class_names=["a", "b"], original_class_ids=np.array([7, 9]))
    rotated = split.with_rotated_classes()
    assert rotated.num_classes == 8 and len(rotated) == 8
    assert rotated.labels.tolist() == [1, 0, 3, 2, 5, 4, 7, 6]
    assert rotated.class_names[:3] == ["a", "b", "a (rotated 90)"]
    assert rotated.original_class_ids.tolist() == [7, 9] * 4
    np.testing.assert_array_equal(rotated.images[2], np.rot90(images[0]))
    np.testing.assert_array_equal(rotated.images[7], np.rot90(images[1], 3))
    files = LabeledImages(images=None, paths=["x.jpg"], labels=np.array([0]),
                          class_names=["a"], original_class_ids=np.array([0]))
    with pytest.raises(ValueError, match="rotated classes need a split held in memory"):
        files.with_rotated_classes()


def test_lazy_top_level_access():
    assert keras_dml.datasets.load is load


# --------------------------------------------------------------------------
# Real data: ../shared/datasets (the tests marked shared_data; tests/conftest.py).
import glob  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

from keras_dml.datasets.layout import DatasetNotFoundError  # noqa: E402

from conftest import SHARED_DATASETS as SHARED  # noqa: E402
CUB = os.path.join(SHARED, "cub200_subset", "CUB_200_2011")


def _rows(path):
    return [line.split() for line in open(path).read().splitlines() if line.strip()]


@pytest.mark.shared_data
def test_cub200_subset_real_layout_and_dml_split():
    assert not os.path.exists(os.path.join(CUB, "bounding_boxes.txt"))
    splits = load("cub200", data_dir=os.path.dirname(CUB))
    train, test = splits.train, splits.test
    np.testing.assert_array_equal(train.original_class_ids, np.arange(1, 51))
    np.testing.assert_array_equal(test.original_class_ids, np.arange(51, 101))
    labels = {i: int(c) for i, c in _rows(os.path.join(CUB, "image_class_labels.txt"))}
    expected_train = sum(1 for c in labels.values() if c <= 50)
    assert len(train) == expected_train and len(train) + len(test) == len(labels) == 5902
    names = dict(_rows(os.path.join(CUB, "classes.txt")))
    assert test.class_names[0] == names["51"]
    # Every path's folder is the class name of its label: no silent wrong label.
    for split in (train, test):
        folders = [os.path.basename(os.path.dirname(p)) for p in split.paths]
        assert folders == [split.class_names[c] for c in split.labels]
        assert split.images is None and all(os.path.isfile(p) for p in split.paths[:50])
    # Pointing at the folder itself works too.
    assert len(load("cub200", data_dir=CUB, split="test")) == len(test)


@pytest.mark.shared_data
def test_omniglot_real_npz():
    splits = load("omniglot", data_dir=os.path.join(SHARED, "omniglot"))
    train, test = splits.train, splits.test
    assert train.images.shape == (964 * 20, 105, 105, 1)
    assert test.images.shape == (659 * 20, 105, 105, 1)
    assert train.num_classes == 964 and test.num_classes == 659
    assert train.images.dtype == np.uint8
    raw = np.load(os.path.join(SHARED, "omniglot", "images_evaluation.npz"))
    np.testing.assert_array_equal(test.images[25, ..., 0] == 255, raw["images"][1, 5])
    assert test.original_class_ids[test.labels[25]] == 964 + raw["labels"][1, 5]
    assert set(train.original_class_ids).isdisjoint(test.original_class_ids)


@pytest.mark.shared_data
def test_omniglot_bundled_without_data_dir(monkeypatch):
    """The package's copy: every character, ink bright, the same drawings as the official npz."""
    import subprocess
    import sys

    monkeypatch.delenv("KERAS_DML_DATA_DIR", raising=False)
    splits = load("omniglot")
    train, test = splits.train, splits.test
    assert train.images.shape == (964 * 20, 28, 28, 1) and train.num_classes == 964
    assert test.images.shape == (659 * 20, 28, 28, 1) and test.num_classes == 659
    assert test.images.dtype == np.uint8 and test.images.max() == 255
    assert set(train.original_class_ids).isdisjoint(test.original_class_ids)
    assert test.original_class_ids[test.labels[25]] == 964 + 1
    # The file is tools/build_omniglot.py's output for the official drawings.
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_omniglot", os.path.join(os.path.dirname(__file__), "..", "tools",
                                       "build_omniglot.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    raw = np.load(os.path.join(SHARED, "omniglot", "images_evaluation.npz"))["images"]
    for character in (0, 1, 658):
        np.testing.assert_array_equal(test.images[20 * character:20 * (character + 1), ..., 0],
                                      build.ink_28x28(raw[character:character + 1])[0])
    drawing = test.images[25, ..., 0].astype(float)  # ink bright: the border is dark
    assert drawing[[0, -1]].mean() < 10 and drawing.max() == 255
    # A plain npz: NumPy alone reads it (no pickle, no TensorFlow, no tensorflow_datasets).
    from keras_dml.datasets.omniglot import BUNDLED

    code = ("import sys, numpy as np; d = np.load(sys.argv[1], allow_pickle=False); "
            "print(d['background'].shape, d['evaluation'].shape, "
            "sorted(m for m in ('tensorflow', 'tensorflow_datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, BUNDLED], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "(964, 20, 28, 28) (659, 20, 28, 28) []"


def test_missing_data_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_DML_DATA_DIR", raising=False)
    for name, marker in [("cub200", "images.txt"), ("cars196", "cars_annos.mat"),
                         ("sop", "Ebay_train.txt"), ("inshop", "list_eval_partition.txt"),
                         ("omniglot", "images_background.npz")]:
        with pytest.raises(DatasetNotFoundError, match=marker) as info:
            load(name, data_dir=tmp_path)
        assert str(tmp_path) in str(info.value) and "data_dir" in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="KERAS_DML_DATA_DIR"):
        load("sop", source="local")
    with pytest.raises(ValueError, match="no tfds"):
        load("inshop", source="tfds")


@pytest.mark.shared_data
def test_env_var_points_to_the_data(monkeypatch):
    monkeypatch.setenv("KERAS_DML_DATA_DIR", os.path.join(SHARED, "omniglot"))
    assert load("omniglot", split="test").num_classes == 659


# --------------------------------------------------------------------------
# Fixtures in the official formats, built from real CUB images.

def _cub_images(num_classes, per_class):
    folders = sorted(glob.glob(os.path.join(CUB, "images", "*")))[:num_classes]
    return [sorted(glob.glob(os.path.join(f, "*.jpg")))[:per_class] for f in folders]


@pytest.mark.shared_data
def test_cars196_fixture_cars_annos_mat(tmp_path):
    from scipy.io import savemat

    os.makedirs(tmp_path / "car_ims")
    fields = [("relative_im_path", object), ("bbox_x1", object), ("bbox_y1", object),
              ("bbox_x2", object), ("bbox_y2", object), ("class", object), ("test", object)]
    rows, n = [], 0
    for cls, files in enumerate(_cub_images(8, 3), start=1):
        for f in files:
            n += 1
            rel = f"car_ims/{n:06d}.jpg"
            shutil.copy(f, tmp_path / rel)
            rows.append((rel, np.uint8(1), np.uint8(2), np.int16(200), np.int16(150),
                         np.uint8(cls), np.uint8(n % 2)))
    annotations = np.array(rows, dtype=fields).reshape(1, -1)
    class_names = np.array([f"Brand Model {c}" for c in range(1, 9)], dtype=object).reshape(1, -1)
    savemat(tmp_path / "cars_annos.mat", {"annotations": annotations, "class_names": class_names})

    splits = load("cars196", data_dir=tmp_path)
    np.testing.assert_array_equal(splits.train.original_class_ids, [1, 2, 3, 4])
    np.testing.assert_array_equal(splits.test.original_class_ids, [5, 6, 7, 8])
    assert len(splits.train) == len(splits.test) == 12
    assert splits.test.class_names[0] == "Brand Model 5"
    assert splits.test.paths[0].endswith("car_ims/000013.jpg")
    assert open(splits.test.paths[0], "rb").read() == open(_cub_images(5, 1)[4][0], "rb").read()


def _write_sop(root, counts_train, counts_test):
    files = _cub_images(len(counts_train) + len(counts_test), 6)
    image_id, class_id = 0, 0
    for name, counts in (("Ebay_train.txt", counts_train), ("Ebay_test.txt", counts_test)):
        lines = ["image_id class_id super_class_id path"]
        for count in counts:
            class_id += 1
            for f in files[class_id - 1][:count]:
                image_id += 1
                rel = f"bicycle_final/{class_id:05d}_{image_id}.JPG"
                os.makedirs(root / "bicycle_final", exist_ok=True)
                shutil.copy(f, root / rel)
                lines.append(f"{image_id} {class_id} 1 {rel}")
        (root / name).write_text("\n".join(lines) + "\n")


@pytest.mark.shared_data
def test_sop_fixture_official_lists(tmp_path):
    root = tmp_path / "Stanford_Online_Products"
    os.makedirs(root)
    _write_sop(root, [3, 2, 4], [2, 5, 1])
    with pytest.warns(UserWarning, match="fewer than 2 images"):
        splits = load("sop", data_dir=tmp_path)
    assert splits.train.num_classes == 3 and splits.test.num_classes == 3
    np.testing.assert_array_equal(splits.test.original_class_ids, [4, 5, 6])
    np.testing.assert_array_equal(splits.train.class_counts(), [3, 2, 4])
    assert splits.test.class_names == ["4", "5", "6"]


@pytest.mark.shared_data
def test_sop_bad_images_are_skipped_with_a_counted_warning(tmp_path):
    root = tmp_path
    _write_sop(root, [3, 3], [3, 3])
    rows = open(root / "Ebay_train.txt").read().splitlines()
    os.remove(root / rows[1].split()[3])  # missing
    (root / rows[2].split()[3]).write_text("<html>not found</html>")  # not an image
    (root / rows[4].split()[3]).write_bytes(b"")  # empty
    skipped = r"skipped 3 of 6 images \(empty: 1, missing: 1, not an image: 1\)"
    with pytest.warns(UserWarning, match=skipped):
        splits = load("sop", data_dir=root, split=None)
    assert len(splits.train) == 3 and len(splits.train.skipped) == 3
    np.testing.assert_array_equal(splits.train.class_counts(), [1, 2])
    # Labels stay attached to their own files.
    for path, label in zip(splits.train.paths, splits.train.labels):
        assert f"{splits.train.original_class_ids[label]:05d}_" in path


@pytest.mark.shared_data
def test_inshop_fixture_query_gallery_partition(tmp_path):
    files = _cub_images(6, 4)
    rows = []
    for item, group in enumerate(files, start=1):
        for j, f in enumerate(group):
            rel = f"img/WOMEN/Dresses/id_{item:08d}/{j:02d}_1_front.jpg"
            os.makedirs(tmp_path / "Img" / os.path.dirname(rel), exist_ok=True)
            shutil.copy(f, tmp_path / "Img" / rel)
            status = "train" if item <= 2 else ("query" if j == 0 else "gallery")
            rows.append(f"{rel} id_{item:08d} {status}")
    os.makedirs(tmp_path / "Eval")
    (tmp_path / "Eval" / "list_eval_partition.txt").write_text(
        f"{len(rows)}\nimage_name item_id evaluation_status\n" + "\n".join(rows) + "\n")
    splits = load("inshop", data_dir=tmp_path)
    assert len(splits.train) == 8 and splits.train.num_classes == 2
    assert len(splits.query) == 4 and len(splits.gallery) == 12
    assert splits.query.class_names == splits.gallery.class_names == splits.test.class_names
    np.testing.assert_array_equal(np.unique(splits.query.labels), np.unique(splits.gallery.labels))
    assert splits.query.class_names[splits.query.labels[0]] == "id_00000003"
    assert all(os.path.isfile(p) for p in splits.gallery.paths)
    assert load("inshop", data_dir=tmp_path, split="gallery").labels.shape == (12,)


@pytest.mark.shared_data
def test_tfds_route_exports_encoded_images(tmp_path):
    import tensorflow as tf
    import tensorflow_datasets as tfds

    files = _cub_images(4, 2)

    def as_dataset(self, split, decoders=None, read_config=None, **kwargs):
        # tfds caltech_birds2011: labels 0..199; here 4 classes over 2 splits.
        pick = 0 if split == "train" else 1
        images = [open(group[pick], "rb").read() for group in files]
        return tf.data.Dataset.from_tensor_slices(
            {"image": images, "label": np.arange(4, dtype=np.int64)})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        splits = load("cub200", data_dir=str(tmp_path), source="tfds")
    np.testing.assert_array_equal(splits.train.original_class_ids, [1, 2])
    np.testing.assert_array_equal(splits.test.original_class_ids, [3, 4])
    assert len(splits.train) == len(splits.test) == 4
    exported = open(splits.test.paths[0], "rb").read()
    assert exported in {open(f, "rb").read() for f in files[2]}
    # The export is reused: a second call reads the manifest, no tfds needed.
    again = load("cub200", data_dir=str(tmp_path), source="tfds")
    assert again.test.paths == splits.test.paths


def test_tfds_failure_becomes_a_clear_error(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def offline(*args, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(tfds, "load", offline)
    monkeypatch.delenv("KERAS_DML_DATA_DIR", raising=False)
    with pytest.raises(DatasetNotFoundError, match="no route to host.*Download"):
        load("sop", data_dir=str(tmp_path), source="tfds")
    with pytest.raises(DatasetNotFoundError, match="omniglot"):
        load("omniglot", source="tfds", data_dir=str(tmp_path))


@pytest.mark.shared_data
def test_loaded_cub_feeds_class_balanced_batches():
    from keras_dml.data import Preprocessing, class_balanced_batches

    train = load("cub200", data_dir=CUB, split="train")
    ds = class_balanced_batches(train, 3, 2, seed=0,
                                preprocessing=Preprocessing(image_size=48, resize_size=56))
    x, y = next(iter(ds))
    assert x.shape == (6, 48, 48, 3)
    y = y.numpy().reshape(3, 2)
    assert (y[:, 0] == y[:, 1]).all() and len(set(y[:, 0])) == 3
