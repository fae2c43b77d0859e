"""Each loss's value and gradient on JAX and PyTorch equal TensorFlow's (1e-5 relative).

One subprocess per backend (tests/backend_values.py, KERAS_BACKEND set for it) writes
every registered loss's value and d value / d embeddings on the same float32 batch;
the tests compare them loss by loss. The processes run once for the module, whatever
backend runs the tests (CI runs this in the TensorFlow process).
"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import backend_checks as checks
import backend_values

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 1e-5
pytestmark = pytest.mark.slow  # three fresh processes, each running every loss


@pytest.fixture(scope="module")
def values(tmp_path_factory):
    """backend -> the .npz of tests/backend_values.py under that backend."""
    directory = tmp_path_factory.mktemp("backend_values")
    out = {}
    for backend in backend_values.BACKENDS:
        if importlib.util.find_spec(backend) is None:
            continue
        path = directory / f"{backend}.npz"
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": ROOT,
               "TF_CPP_MIN_LOG_LEVEL": "2"}
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "backend_values.py"),
                        "write", str(path)], check=True, env=env, cwd=ROOT, timeout=900)
        out[backend] = np.load(path)
    return out


@pytest.mark.parametrize("name", checks.NAMES)
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_value_and_gradient_equal_tensorflows(values, backend, name):
    for needed in ("tensorflow", backend):
        if needed not in values:
            pytest.skip(f"{needed} is not installed: nothing to compare on this machine")
    result = backend_values.relative_differences(values[backend], values["tensorflow"], name)
    assert isinstance(result, tuple), result  # the failing side's error
    value_difference, gradient_difference = result
    assert value_difference <= TOLERANCE, (value_difference, gradient_difference)
    assert gradient_difference <= TOLERANCE, (value_difference, gradient_difference)
