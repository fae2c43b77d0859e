"""Shared test set-up: the backend's test modules, quiet TensorFlow, two logical CPUs,
deterministic seeds.

The Keras backend comes from the environment (`KERAS_BACKEND`, each backend in its own
process). On TensorFlow every test module is collected; on JAX and PyTorch only the
backend-neutral ones (marked `backend_neutral` in their files), which use NumPy inputs
and `keras.ops` and import TensorFlow at most as the image-file pipeline (tf.data
decoding, installed where CI runs them): the rest test TensorFlow itself (tf.data,
tf.function and XLA modes, SavedModel export, tf.distribute) or have not been written
backend-neutral yet.
"""

import importlib.util
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

BACKEND = keras.backend.backend()

#: How a test module says it runs on every Keras backend: `pytest.mark.backend_neutral` in
#: its `pytestmark`, first (read from its source, so that on JAX and PyTorch the other modules,
#: which import TensorFlow, are never imported). CI runs these modules under
#: KERAS_BACKEND=jax and =torch besides the TensorFlow run of the whole suite. On TensorFlow
#: they repeat what the TensorFlow tests of the same units check in the quick tier, so they
#: run in the full tier only, unless marked `backend_neutral(quick_on_tensorflow=True)`
#: (a unit whose TensorFlow path no other module tests).
BACKEND_NEUTRAL_MARK = re.compile(r"^pytestmark = \[?pytest\.mark\.backend_neutral\b", re.M)


def is_backend_neutral(path):
    """Whether the test module at `path` is marked `backend_neutral` in its source."""
    with open(path, encoding="utf-8") as source:
        return BACKEND_NEUTRAL_MARK.search(source.read()) is not None


def pytest_ignore_collect(collection_path, config):
    """On JAX and PyTorch, only the backend-neutral test modules are collected."""
    if (BACKEND != "tensorflow" and collection_path.name.startswith("test_")
            and collection_path.suffix == ".py" and not is_backend_neutral(collection_path)):
        return True
    return None


if BACKEND == "tensorflow":
    import tensorflow as tf

    # Two logical CPU devices, so tf.distribute tests can mirror over two replicas. It
    # must happen before TensorFlow initialises its devices, hence here.
    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )

from benchmarks.data import SHARED as _SHARED_DATASETS  # noqa: E402

#: ../shared/datasets beside the repository (or beside its parent, for a worktree): the
#: real photos and npz files that tests marked `shared_data` read
SHARED_DATASETS = os.path.abspath(_SHARED_DATASETS)

#: Why a `shared_data` test does not run here: one line, the same for every such test.
MISSING_DATA = (f"no ../shared/datasets at {SHARED_DATASETS} "
                "(KERAS_DML_DATA_REQUIRED=1 makes this a failure)")

#: Where each optional package comes from, for the reason of a `requires` skip.
EXTRAS = {
    "faiss": "faiss-cpu: keras_dml[ann]",
    "jax": "keras_dml[jax]",
    "torch": "keras_dml[torch]",
    "pytorch_metric_learning": "keras_dml[peers]",
    "pymilvus": "keras_dml[milvus]",
    "milvus_lite": "keras_dml[milvus]",
    "milvus": "keras_dml[milvus-server]",
    "selenium": "keras_dml[browser]",
    "fastapi": "keras_dml[serve]",
    "starlette": "keras_dml[serve]",
    "uvicorn": "keras_dml[serve]",
    "multipart": "keras_dml[serve]",
    "tensorflow": "keras_dml[tensorflow]",
    "keras_hub": "keras_dml[hub]",
}


def require_shared_datasets():
    """Returns `SHARED_DATASETS`; where it is missing, skips the calling test or fixture
    (fails it under `KERAS_DML_DATA_REQUIRED=1`, as CI runs)."""
    if os.path.isdir(SHARED_DATASETS):
        return SHARED_DATASETS
    if os.environ.get("KERAS_DML_DATA_REQUIRED") == "1":
        pytest.fail(MISSING_DATA, pytrace=False)
    pytest.skip(MISSING_DATA)


def missing_packages(names):
    """The optional packages among `names` that cannot be imported here."""
    return [name for name in names if importlib.util.find_spec(name) is None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The two marks of what a test needs, checked before its fixtures are set up:
    `requires("faiss", ...)` skips, naming the package and its extra, where one is not
    installed; `shared_data` applies `require_shared_datasets`."""
    for mark in item.iter_markers("requires"):
        missing = missing_packages(mark.args)
        if missing:
            pytest.skip("needs " + ", ".join(f"{name} ({EXTRAS.get(name, 'pip install ' + name)})"
                                             for name in missing))
    if item.get_closest_marker("shared_data"):
        require_shared_datasets()


def pytest_terminal_summary(terminalreporter):
    """One line for all the tests skipped for want of ../shared/datasets."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if isinstance(report.longrepr, tuple) and MISSING_DATA in report.longrepr[2]]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} tests skipped: {MISSING_DATA}")


@pytest.fixture(autouse=True)
def _float32_policy_and_seed():
    """Every test starts in float32 with fixed seeds, whatever the previous one did."""
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def mirrored_strategy():
    """One MirroredStrategy over the two logical CPUs for the whole session.

    Each new strategy restarts TensorFlow's collective instance keys, and a later
    strategy's all-reduce of a different size would collide with an earlier one's.
    """
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture
def mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def pytest_addoption(parser):
    parser.addoption(
        "--full", action="store_true", default=False,
        help="also run the tests marked slow (peer references against PyTorch, PML and faiss, "
             "training runs, multi-worker and kill-and-resume runs, the benchmarks' end-to-end "
             "checks); CI runs the full suite")
    parser.addoption(
        "--skip-passed-in", default=None, metavar="JUNIT_XML",
        help="leave out the tests that passed in the run that wrote this JUnit XML report "
             "(--junitxml): CI completes the full suite after the README's quick tier ran in "
             "its own environment")


def passed_in(report_path):
    """The `(classname, name)` of each test that passed in a JUnit XML report."""
    import xml.etree.ElementTree as ElementTree

    passed = set()
    for case in ElementTree.parse(report_path).iter("testcase"):
        if not any(child.tag in ("failure", "error", "skipped") for child in case):
            passed.add((case.get("classname"), case.get("name")))
    return passed


def _junit_key(item):
    """`(classname, name)` as pytest's JUnit XML report names `item`."""
    parts = item.nodeid.split("::")
    module = parts[0][:-len(".py")].replace("/", ".")
    return ".".join([module, *parts[1:-1]]), item.name


def _leave_out_passed(config, items):
    report = config.getoption("--skip-passed-in")
    if report is None:
        return
    passed = passed_in(report)
    done = [item for item in items if _junit_key(item) in passed]
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = [item for item in items if _junit_key(item) not in passed]


def pytest_collection_modifyitems(config, items):
    """The quick tier: without --full (or a -m expression naming slow), slow tests are left out."""
    for item in items:
        # On TensorFlow the backend-neutral modules repeat what the TensorFlow tests of
        # the same units check in the quick tier: there they are full-tier only.
        neutral = item.get_closest_marker("backend_neutral")
        if (BACKEND == "tensorflow" and neutral is not None
                and not neutral.kwargs.get("quick_on_tensorflow", False)):
            item.add_marker(pytest.mark.slow)
    _leave_out_passed(config, items)
    if config.getoption("--full") or "slow" in (config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
