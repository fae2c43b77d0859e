"""Shared test set-up: quiet TensorFlow, two logical CPUs, deterministic seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# Two logical CPU devices, so tf.distribute tests can mirror over two replicas. It
# must happen before TensorFlow initialises its devices, hence here.
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

from benchmarks.data import SHARED as _SHARED_DATASETS  # noqa: E402

#: ../shared/datasets beside the repository (or beside its parent, for a worktree): the
#: real data every test and benchmark reads (tests fail loudly where it is missing)
SHARED_DATASETS = os.path.abspath(_SHARED_DATASETS)


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


def pytest_collection_modifyitems(config, items):
    """The quick tier: without --full (or a -m expression naming slow), slow tests are left out."""
    if config.getoption("--full") or "slow" in (config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
