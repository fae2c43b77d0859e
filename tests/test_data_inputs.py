"""One way in: every public function normalises the user's data once (`as_data`), every
accepted form, and the one error for the rest."""

import os
import pathlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import callbacks, data, evaluation, inference
from keras_dml.data import inputs
from keras_dml.data.inputs import FORMS, as_data
from keras_dml.data.sources import make_source
from keras_dml.datasets.base import DMLSplits, LabeledImages
from keras_dml.index import Index
from keras_dml.index.catalogue import embed_files
from keras_dml.pair_designs import GroupDesign

N, SIZE = 8, 4
LABELS = np.repeat(np.arange(4), 2)


class _Batches(keras.utils.PyDataset):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return self.x[index * 4:(index + 1) * 4], self.y[index * 4:(index + 1) * 4]


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).random((N, SIZE, SIZE, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def paths(tmp_path_factory, images):
    folder = tmp_path_factory.mktemp("inputs")
    written = []
    for i, image in enumerate(images):
        path = str(folder / f"{i}.png")
        tf.io.write_file(path, tf.io.encode_png(tf.constant(image * 255, tf.uint8)))
        written.append(path)
    return written


@pytest.fixture(scope="module")
def forms(images, paths):
    """One value of every form (the tf.data pipelines' dataset yields samples, the
    embedding functions' yields batches)."""
    split = dict(labels=LABELS, class_names=list("abcd"), original_class_ids=np.arange(4))
    return {
        "arrays": (images, LABELS),
        "weighted": (images, LABELS, np.ones(N, np.float32)),
        "images": images,
        "files": (paths, LABELS),
        "paths": paths,
        "split": LabeledImages(images, None, **split),
        "file split": LabeledImages(None, paths, **split),
        "samples dataset": tf.data.Dataset.from_tensor_slices((images, LABELS)),
        "batches dataset": tf.data.Dataset.from_tensor_slices((images, LABELS)).batch(4),
        "pydataset": _Batches(images, LABELS),
        "batches": [(images[:4], LABELS[:4]), (images[4:], LABELS[4:])],
    }


def test_each_form_is_told_apart_once_and_a_data_passes_through(forms):
    expected = {"arrays": "arrays", "weighted": "weighted", "images": "images",
                "files": "files", "paths": "paths", "split": "split", "file split": "split",
                "samples dataset": "dataset", "batches dataset": "dataset",
                "pydataset": "pydataset", "batches": "batches"}
    for name, value in forms.items():
        normalised = as_data(value)
        assert normalised.form == expected[name], name
        assert as_data(normalised) is normalised  # no rebuild
    assert as_data(forms["file split"]).files and not as_data(forms["split"]).files
    assert as_data(forms["file split"]).class_names == list("abcd")
    # paths as str, whatever the caller gave (pathlib, bytes, a NumPy array of str)
    given = [pathlib.Path("a.jpg"), pathlib.Path("b.jpg")]
    assert as_data((given, [0, 1])).x == ["a.jpg", "b.jpg"]
    assert as_data([b"a.jpg", b"b.jpg"]).x == ["a.jpg", "b.jpg"]
    assert as_data((np.array(["a.jpg", "b.jpg"]), [0, 1])).form == "files"
    # a tuple (x list, y) is arrays; a list of two batches is batches
    listed = [np.zeros((2, 2)), np.ones((2, 2))]
    assert as_data((listed, [0, 1])).form == "arrays"
    assert as_data([(listed[0], [0, 1]), (listed[1], [0, 1])]).form == "batches"
    assert as_data(forms["paths"]).with_labels(LABELS).form == "files"


def test_unsupported_input_gets_one_message_naming_type_and_forms():
    with pytest.raises(ValueError) as error:
        as_data({"x": 1}, inputs.SAMPLES)
    assert str(error.value) == (
        "source must be (x, y) arrays, (paths, labels) of image files, a "
        "keras_dml.datasets.LabeledImages split or a tf.data.Dataset; got dict. See "
        "docs/guide/data.md, 'Accepted data'.")
    with pytest.raises(ValueError, match=r"got str 'photos' \(a folder or CSV file: read it "
                                         "with keras_dml.datasets.from_directory"):
        as_data("photos")
    split = LabeledImages(np.zeros((1, 2, 2, 1)), None, [0], ["a"], [0])
    splits = DMLSplits("mine", split, split)
    with pytest.raises(ValueError, match=r"got DMLSplits \(pass one of its splits"):
        as_data(splits, inputs.SAMPLES)
    with pytest.raises(ValueError, match=r"got a keras.utils.PyDataset \(_Batches\)"):
        as_data(_Batches(None, None), inputs.SAMPLES)
    with pytest.raises(TypeError, match="make_source takes the Data of as_data, got tuple"):
        make_source((np.zeros((2, 2)), [0, 1]))


def _entry_points():
    """`name -> (call(value), accepted forms)` for every public function that takes data."""
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Flatten()])
    model.preprocessing = data.Preprocessing(image_size=SIZE, resize_size=SIZE)
    prep = model.preprocessing
    samples = ("arrays", "files", "split", "file split", "samples dataset")
    labelled = ("arrays", "weighted", "files", "split", "file split", "batches dataset",
                "pydataset", "batches")
    embeddable = labelled + ("images", "paths")
    streams = ("arrays", "weighted", "batches dataset", "pydataset", "batches")
    return {
        "class_balanced_batches": (
            lambda v: data.class_balanced_batches(v, 2, 2, seed=0, preprocessing=prep), samples),
        "design_batches": (
            lambda v: data.design_batches(v, GroupDesign(m=2, n=2), seed=0, preprocessing=prep),
            samples),
        "distributed_class_balanced_batches": (
            lambda v: data.distributed_class_balanced_batches(
                tf.distribute.get_strategy(), v, 2, 2, seed=0, preprocessing=prep), samples),
        "hard_negative_class_batches": (
            lambda v: data.hard_negative_class_batches(v, 2, 2, seed=0, preprocessing=prep),
            samples),
        "HardNegativeClassMining": (
            lambda v: data.HardNegativeClassMining(None, v, preprocessing=prep), samples),
        "two_view_batches": (
            lambda v: data.two_view_batches(v, lambda x: x, 2, seed=0, preprocessing=prep),
            samples + ("images",)),
        "evaluation_batches": (lambda v: data.evaluation_batches(v, prep), samples),
        "verify_images": (data.verify_images, ("arrays", "files", "paths", "split",
                                               "file split")),
        "ClassBalancedPyDataset": (
            lambda v: data.ClassBalancedPyDataset(*v, 2, 2), ("arrays",)),
        "embed_dataset": (lambda v: evaluation.embed_dataset(model, v), embeddable),
        "evaluate_retrieval": (
            lambda v: evaluation.evaluate_retrieval(model, v, ks=(1,)), labelled),
        "inference.embed": (lambda v: inference.embed(model, v), embeddable),
        "inference.embed_chunks": (
            lambda v: list(inference.embed_chunks(model, v, 4)), embeddable),
        "RecallAtK": (lambda v: callbacks.RecallAtK(v, ks=(1,)), streams),
        "VerificationMetrics": (callbacks.VerificationMetrics, streams),
        "Index.from_model": (lambda v: Index.from_model(model, v, verbose=0), embeddable),
        "embed_files": (lambda v: embed_files(model, v, prep, progress=False), ("paths",)),
    }


@pytest.fixture
def classified(monkeypatch):
    """The number of values `as_data` has told apart (the real `_classify`, counted)."""
    counter = {"calls": 0}
    classify = inputs._classify

    def counting(value):
        counter["calls"] += 1
        return classify(value)

    monkeypatch.setattr(inputs, "_classify", counting)
    return counter


def test_every_public_function_normalises_each_accepted_form_exactly_once(
        forms, classified):
    for name, (call, accepted) in _entry_points().items():
        for form in accepted:
            classified["calls"] = 0
            call(forms[form])
            assert classified["calls"] == 1, (name, form, classified["calls"])


@pytest.fixture
def normalised(monkeypatch):
    """The number of calls to `as_data` (wherever it was imported), through a profile
    hook on its code: a helper handed a `Data` that checks it again counts too."""
    import sys
    import threading

    counter = {"calls": 0}
    code = inputs.as_data.__code__

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            counter["calls"] += 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    yield counter
    sys.setprofile(None)
    threading.setprofile(None)


def test_embedding_entry_points_call_as_data_once_and_hand_on_the_data(forms, normalised):
    entry_points = _entry_points()
    for name in ("Index.from_model", "inference.embed", "embed_dataset", "evaluate_retrieval",
                 "embed_files"):
        call, accepted = entry_points[name]
        for form in accepted:
            normalised["calls"] = 0
            call(forms[form])
            assert normalised["calls"] == 1, (name, form, normalised["calls"])


def test_the_visit_counter_sees_a_second_check():
    """The counting hook is real: a public function that re-checks counts twice."""
    import sys

    calls = []
    code = inputs.as_data.__code__
    sys.setprofile(lambda frame, event, arg: calls.append(1)
                   if event == "call" and frame.f_code is code else None)
    try:
        as_data(as_data((np.zeros((2, 2)), [0, 1])))
    finally:
        sys.setprofile(None)
    assert len(calls) == 2


def test_every_public_function_refuses_other_input_with_the_one_message(paths):
    pattern = re.compile(r"^.+ must be [^;]+; got (.+?)\. .*See docs/guide/data\.md, "
                         "'Accepted data'\\.$")
    for name, (call, _) in _entry_points().items():
        files = name == "ClassBalancedPyDataset"  # (x, y): paths are its other form
        with pytest.raises(ValueError) as error:
            call((paths, LABELS) if files else {"x": 1})
        match = pattern.match(str(error.value))
        assert match, (name, str(error.value))
        assert match.group(1) == ("(paths, labels) of image files (tuple)" if files else "dict")


def test_the_data_guide_documents_every_form():
    guide = open(os.path.join(os.path.dirname(__file__), "..", "docs", "guide", "data.md"),
                 encoding="utf-8").read()
    table = guide[guide.index("## Accepted data"):]
    for form in FORMS:
        assert f"`{form}`" in table, form
