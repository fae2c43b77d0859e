"""keras_dml.datasets.from_directory / from_csv: your own images, listed without decoding."""

import os
import re
import warnings

import pytest

from conftest import SHARED_DATASETS
from keras_dml import datasets
from keras_dml.datasets import from_csv, from_directory
from keras_dml.datasets.layout import detect_dataset

CUB = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011")


def make_tree(root, classes, names=("0.jpg", "1.jpg", "2.jpg")):
    """`root/<class>/<name>` empty files (nothing is decoded on the listing path)."""
    for name in classes:
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for file in names:
            open(os.path.join(root, name, file), "w").close()
    return str(root)


def write_csv(path, text):
    path.write_text(text)
    return str(path)


def test_classes_are_split_at_random_and_reproducibly(tmp_path):
    root = make_tree(tmp_path, [f"class{i:02d}" for i in range(10)])
    splits = from_directory(root)
    assert splits.name == "folder" and splits.root == os.path.abspath(root)
    train, test = splits.train, splits.test
    assert (train.num_classes, test.num_classes, len(train), len(test)) == (5, 5, 15, 15)
    assert not set(train.class_names) & set(test.class_names)
    assert all(os.path.isabs(p) for p in train.paths)
    # each image's label names its own folder
    assert all(os.path.basename(os.path.dirname(path)) == train.class_names[label]
               for path, label in zip(train.paths, train.labels))
    again = from_directory(root)
    assert again.test.class_names == test.class_names and again.test.paths == test.paths
    other = from_directory(root, seed=1)
    assert other.test.class_names != test.class_names
    assert from_directory(root, test_classes=0.3).test.num_classes == 3
    assert from_directory(root, test_classes=4).test.num_classes == 4


def test_every_image_type_in_any_case_and_skips_counted(tmp_path):
    names = ("a.JPG", "b.jpeg", "c.PNG", "d.gif", "e.Bmp", "notes.txt", ".hidden.jpg")
    root = make_tree(tmp_path, ["cat", "dog"], names)
    os.makedirs(tmp_path / ".thumbnails")
    os.makedirs(tmp_path / "cat" / "more")
    open(tmp_path / "cat" / "more" / "f.jpg", "w").close()  # sub-folders of a class count
    with pytest.warns(UserWarning) as caught:
        splits = from_directory(root)
    message = str(caught[0].message)
    assert len(caught) == 1 and "skipped 5 entries (hidden: 3, not an image: 2)" in message
    assert ".hidden.jpg" in message and "notes.txt" in message
    files = sorted(os.path.basename(p) for p in splits.train.paths + splits.test.paths)
    assert files == ["a.JPG", "a.JPG", "b.jpeg", "b.jpeg", "c.PNG", "c.PNG", "d.gif", "d.gif",
                     "e.Bmp", "e.Bmp", "f.jpg"]


def test_train_and_test_folders_are_the_split_as_given(tmp_path):
    make_tree(tmp_path / "train", ["a", "b", "c"])
    make_tree(tmp_path / "test", ["d", "e"])
    make_tree(tmp_path, ["stray"])
    with pytest.warns(UserWarning, match=r"not a split folder: 1\); first: .*stray"):
        splits = from_directory(tmp_path, test_classes=0.9)  # ignored: the split is given
    assert splits.train.class_names == ["a", "b", "c"]
    assert splits.test.class_names == ["d", "e"] and splits.query is None


def test_query_and_gallery_folders_share_the_test_label_space(tmp_path):
    make_tree(tmp_path / "train", ["a", "b"])
    make_tree(tmp_path / "query", ["x", "y"], ["q.jpg"])
    make_tree(tmp_path / "gallery", ["x", "y", "z"], ["g1.jpg", "g2.jpg"])
    splits = from_directory(tmp_path)
    test, query, gallery = splits.test, splits.query, splits.gallery
    assert (len(query), len(gallery), len(test)) == (2, 6, 8)
    assert test.class_names == ["x", "y", "z"] and query.class_names == test.class_names
    assert test.paths == query.paths + gallery.paths
    assert [test.class_names[y] for y in query.labels] == ["x", "y"]


def test_a_test_class_also_in_train_is_an_error_naming_it(tmp_path):
    make_tree(tmp_path / "train", ["a", "b"])
    make_tree(tmp_path / "test", ["b", "c"])
    with pytest.raises(ValueError, match=r"1 classes are in both train and test \(e.g. b\)"):
        from_directory(tmp_path)
    make_tree(tmp_path / "query", ["c"])
    with pytest.raises(ValueError, match="needs train and test, or train, query and gallery"):
        from_directory(tmp_path)


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "is empty: it needs one folder of images per class"),
    (lambda root: open(os.path.join(root, "x.txt"), "w").close(),
     r"is empty \(only 1 other files\)"),
    (lambda root: [open(os.path.join(root, f"{i}.jpg"), "w").close() for i in range(3)],
     r"holds 3 images but no class folders: put each class's images in .*<class>"),
    (lambda root: make_tree(root, ["a", "b"], ["readme.md"]), "no images in its 2 class folders"),
    (lambda root: make_tree(root, ["only"]), "1 class \\(only\\); a class-disjoint"),
])
def test_bad_folders_are_clear_errors(tmp_path, make, message):
    root = tmp_path / "photos"
    root.mkdir()
    make(str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=message) as error:
            from_directory(root)
    assert str(root) in str(error.value)


def test_missing_root_or_a_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none"))):
        from_directory(tmp_path / "none")
    (tmp_path / "list.csv").write_text("path,label\n")
    with pytest.raises(ValueError, match="is not a folder"):
        from_directory(tmp_path / "list.csv")


def test_a_class_with_one_image_is_warned_about_by_name(tmp_path):
    make_tree(tmp_path, ["a", "b", "c", "d"])
    make_tree(tmp_path, ["lonely"], ["only.jpg"])
    for seed in (0, 1):
        with pytest.warns(UserWarning, match="fewer than 2 images .*e.g. lonely"):
            from_directory(tmp_path, test_classes=2, seed=seed)


@pytest.mark.parametrize("test_classes", [0.0, 1.0, 3, -1, True, "half"])
def test_test_classes_out_of_range(tmp_path, test_classes):
    make_tree(tmp_path, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"test_classes must be .* from 0 to 2"):
        from_directory(tmp_path, test_classes=test_classes)


def test_csv_with_relative_and_absolute_paths_and_any_labels(tmp_path):
    make_tree(tmp_path / "img", ["a", "b", "c", "d"])
    absolute = tmp_path / "img" / "d" / "0.jpg"
    rows = [f"img/{c}/{i}.jpg,{label}" for c, label in zip("abc", (10, 9, 2))
            for i in range(3)]
    path = write_csv(tmp_path / "list.csv",
                     "label,path\n".replace("label,path", "path,label") + "\n".join(rows)
                     + f"\n{absolute},tabby cat\n{tmp_path}/img/d/1.jpg,tabby cat\n")
    splits = from_csv(path, test_classes=2)
    assert splits.name == "csv" and splits.root == str(tmp_path)
    names = sorted(splits.train.class_names + splits.test.class_names)
    assert names == ["10", "2", "9", "tabby cat"]
    assert len(splits.train) + len(splits.test) == 11
    assert all(os.path.isfile(p) for p in splits.train.paths + splits.test.paths)
    integers = from_csv(write_csv(tmp_path / "ints.csv", "path,label\n" + "\n".join(rows)),
                        test_classes=1, seed=3)
    assert integers.train.class_names + integers.test.class_names in (
        ["9", "10", "2"], ["2", "10", "9"], ["2", "9", "10"])  # numbers sort as numbers


def test_csv_split_column(tmp_path):
    make_tree(tmp_path, ["a", "b", "c"])
    rows = ["a/0.jpg,a,train", "a/1.jpg,a,TRAIN", "b/0.jpg,b,query", "b/1.jpg,b,gallery",
            "c/0.jpg,c,gallery", "c/1.jpg,c,gallery"]
    splits = from_csv(write_csv(tmp_path / "l.csv", "path,label,split\n" + "\n".join(rows)))
    assert splits.train.class_names == ["a"] and len(splits.train) == 2
    assert (len(splits.query), len(splits.gallery)) == (1, 3)
    assert splits.test.class_names == ["b", "c"]
    rows[2] = "b/0.jpg,a,test"
    with pytest.raises(ValueError, match="needs train and test"):
        from_csv(write_csv(tmp_path / "l.csv", "path,label,split\n" + "\n".join(rows)))
    rows = ["a/0.jpg,a,train", "b/0.jpg,b,test", "b/1.jpg,a,test"]
    with pytest.raises(ValueError, match=r"classes are in both train and test \(e.g. a\)"):
        from_csv(write_csv(tmp_path / "l.csv", "path,label,split\n" + "\n".join(rows)))


@pytest.mark.parametrize("text, message", [
    ("", "is empty: it needs a header row"),
    ("\n\n", "is empty: it needs a header row"),
    ("path,label\n", "has a header row but no image rows"),
    ("file,class\na/0.jpg,a\n", r"line 1: no 'path' or 'label' column; found 'file', 'class'"),
    ("path,label\na/0.jpg,a\na/1.jpg\n", r"line 3: expected 2 fields"),
    ("path,label\na/0.jpg,a\n,a\n", "line 3: empty path"),
    ("path,label,split\na/0.jpg,a,train\na/1.jpg,a,validation\n",
     r"line 3: split must be train, test, query or gallery; got 'validation'"),
    ("path,label\na/0.jpg,a\nb/0.jpg,b\n./a/0.jpg,a\n",
     r"line 4: './a/0.jpg' is listed again \(first at line 2\)"),
    ("path,label\nnone/0.jpg,a\nnone/1.jpg,b\n", r"none of the 2 listed files exists .*line 2"),
])
def test_bad_csv_files_name_the_file_and_line(tmp_path, text, message):
    make_tree(tmp_path, ["a", "b"])
    path = write_csv(tmp_path / "list.csv", text)
    with pytest.raises(ValueError, match=message) as error:
        from_csv(path)
    assert path in str(error.value)


def test_csv_rows_whose_file_is_missing_are_skipped_with_a_count(tmp_path):
    make_tree(tmp_path, ["a", "b"])
    path = write_csv(tmp_path / "list.csv", "path,label\n" + "\n".join(
        [f"{c}/{i}.jpg,{c}" for c in "ab" for i in range(3)] + ["a/gone.jpg,a"]))
    with pytest.warns(UserWarning, match=r"skipped 1 of 7 rows whose file does not exist; "
                                         r"first: line 8: a/gone.jpg"):
        splits = from_csv(path)
    assert len(splits.train) + len(splits.test) == 6
    with pytest.raises(FileNotFoundError, match="nothing.csv"):
        from_csv(tmp_path / "nothing.csv")


@pytest.mark.shared_data
def test_load_names_folder_and_csv_and_detects_layouts(tmp_path):
    root = make_tree(tmp_path / "photos", ["a", "b", "c", "d"])
    splits = datasets.load("folder", data_dir=root, test_classes=1, seed=2)
    assert splits.test.num_classes == 1
    assert splits.test.class_names == from_directory(root, 1, 2).test.class_names
    path = write_csv(tmp_path / "l.csv", "path,label\n" + "".join(
        f"photos/{c}/{i}.jpg,{c}\n" for c in "ab" for i in range(2)))
    assert datasets.load("csv", data_dir=path, split="test").num_classes == 1
    with pytest.raises(ValueError, match="'folder' with data_dir=root/<class>/<image>"):
        datasets.load("my-photos")
    with pytest.raises(ValueError, match="test_classes: only for the 'folder' and 'csv'"):
        datasets.load("digits", test_classes=0.3)
    with pytest.raises(ValueError, match="needs data_dir"):
        datasets.load("folder")
    assert "folder" in datasets.available() and "csv" in datasets.available()
    assert (detect_dataset(root), detect_dataset(path)) == ("folder", "csv")
    assert detect_dataset(tmp_path / "missing") == "folder"
    assert detect_dataset(CUB) == "cub200"
    assert detect_dataset(os.path.dirname(CUB)) == "cub200"  # its parent
    assert detect_dataset(os.path.join(CUB, "images")) == "folder"


@pytest.mark.shared_data
def test_reprs_are_one_short_line():
    splits = datasets.load("cub200", data_dir=CUB)
    text = repr(splits)
    assert len(text) < 400 and "\n" not in text, text
    assert repr(splits.train).startswith(f"LabeledImages({len(splits.train)} images, 50 classes, "
                                         "files, first '")
    digits = repr(datasets.load("digits").test)
    assert digits.startswith("LabeledImages(") and "in memory (" in digits


@pytest.mark.shared_data
def test_cub_images_folder_reads_as_a_folder_dataset():
    splits = from_directory(os.path.join(CUB, "images"))
    assert splits.train.num_classes + splits.test.num_classes == 100
    assert len(splits.train) + len(splits.test) == 5902
