"""keras_dml where TensorFlow is not installed (Keras on JAX or PyTorch).

Each test runs a child process in which `tensorflow` cannot be imported
(`sys.modules["tensorflow"] = None`, which also makes `importlib.util.find_spec`
report it missing), with KERAS_BACKEND the parent's, or jax when the parent runs on
TensorFlow. /work/venvs/notf (.ci/run) checks the same on a real install without it.
"""

import os
import subprocess
import sys
import textwrap

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = "jax" if keras.backend.backend() == "tensorflow" else keras.backend.backend()

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


_HIDE_TENSORFLOW = """
import sys
for name in ("tensorflow", "tensorflow_datasets", "tensorflow_serving"):
    sys.modules[name] = None  # `import tensorflow` fails: ModuleNotFoundError
"""


def _run(code, tmp_path):
    env = dict(os.environ, KERAS_BACKEND=BACKEND,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _HIDE_TENSORFLOW + textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def _ok(result):
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_registers_the_losses_and_the_numpy_stream_runs(tmp_path):
    _ok(_run("""
        import keras
        import numpy as np

        import keras_dml
        from keras_dml.data import ClassBalancedPyDataset

        assert keras.backend.backend() != "tensorflow"
        assert sys.modules["tensorflow"] is None  # still hidden, never imported
        assert keras.saving.get_registered_object("keras_dml>MultiSimilarity") is not None
        splits = keras_dml.datasets.load("omniglot")
        batches = ClassBalancedPyDataset(splits.train.images, splits.train.labels, 8, 4,
                                         seed=0)
        x, y = batches[3]
        assert x.shape == (32, 28, 28, 1) and len(set(y.tolist())) == 8
        # A saved model's Preprocessing is plain data here too.
        prep = keras_dml.data.Preprocessing(image_size=64, normalization="imagenet")
        assert keras_dml.data.Preprocessing.from_dict(prep.to_dict()) == prep
        print("ok")
    """, tmp_path))


def test_tensorflow_only_features_raise_one_line_naming_them(tmp_path):
    result = _run("""
        import importlib

        import numpy as np

        import keras_dml
        from keras_dml.backend import TensorFlowRequiredError

        def message(use):
            try:
                use()
            except TensorFlowRequiredError as error:
                return str(error)
            raise AssertionError(f"{use} did not raise TensorFlowRequiredError")

        uses = {
            "keras_dml.data.class_balanced_batches": lambda: keras_dml.data.class_balanced_batches,
            "keras_dml.data.Preprocessing's image ops": lambda: keras_dml.data.Preprocessing(
                image_size=8).eval(np.zeros((9, 9, 3), np.uint8)),
            "keras_dml.export": lambda: keras_dml.export,
            "keras_dml.export ": lambda: importlib.import_module("keras_dml.export"),
            # the former path, whose message names where the module lives now
            "keras_dml.training.distribute": lambda: keras_dml.distribute,
            "keras_dml.data": lambda: importlib.import_module("keras_dml.data.pipeline"),
        }
        importlib.import_module("keras_dml.index.runs")  # imports; TensorFlow only when used
        for feature, use in uses.items():
            text = message(use)
            assert feature.strip() in text and "needs TensorFlow" in text, (feature, text)
            assert "\\n" not in text and "keras-dml[tensorflow]" in text, text
        print("ok")
    """, tmp_path)
    _ok(result)


def test_cli_says_in_one_line_that_export_needs_tensorflow(tmp_path):
    result = _run("""
        from keras_dml.cli import main

        sys.exit(main(["export", "model.keras", "savedmodels/x"]))
    """, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-dml export: error: "), lines
    assert "keras_dml.export" in lines[0] and "needs TensorFlow" in lines[0]


def test_no_keras_backend_installed_is_one_line(tmp_path):
    env_backend = {"KERAS_BACKEND": "tensorflow"}  # Keras' default, hidden here
    result = subprocess.run(
        [sys.executable, "-c", _HIDE_TENSORFLOW + "import keras_dml"], capture_output=True,
        text=True, cwd=tmp_path, timeout=600, env=dict(
            os.environ, **env_backend,
            PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: keras_dml needs a Keras backend"), result.stderr
    assert 'pip install "keras_dml[tensorflow]" (or [jax], [torch]' in last


@pytest.mark.slow  # a training run (about 2 minutes on 2 busy cores: JAX/torch compile)
def test_train_runs_on_numpy_batches_and_skips_the_export_in_one_line(tmp_path):
    result = _run("""
        from keras_dml.cli import main

        sys.exit(main(["train", "--dataset", "digits", "--epochs", "1",
                       "--steps-per-epoch", "5", "--classes-per-batch", "4",
                       "--samples-per-class", "4", "--run-name", "run", "--no-plots"]))
    """, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "after training" in out and "SavedModel:" not in out, out
    skipped = [line for line in out.splitlines() if line.startswith("export skipped")]
    assert skipped == ['export skipped: the SavedModel export needs TensorFlow, which is not '
                       'installed (pip install "keras_dml[tensorflow]"); the run saved '
                       'model.keras'], out
    assert (tmp_path / "runs" / "run" / "model.keras").is_file()
    assert not (tmp_path / "savedmodels").exists()


@pytest.mark.slow  # a child process building and fitting the main job's model (~15 s CPU)
def test_the_main_jobs_jax_step_is_one_compiled_program(tmp_path):
    _ok(_run("""
        import keras
        import numpy as np

        from keras_dml import training
        from keras_dml.backend.jax import trainer as trainer_jax
        from keras_dml.backend.torch import trainer as trainer_torch
        from keras_dml.data import ClassBalancedPyDataset
        from keras_dml.training_config import TrainConfig

        backend = keras.backend.backend()
        module = trainer_jax if backend == "jax" else trainer_torch
        step, calls = module.train_step, []

        def counted(*args):
            calls.append(1)  # once per trace when jitted, once per step when eager
            return step(*args)

        module.train_step = counted
        config = TrainConfig(dataset="digits", width=4, embedding_dim=8, steps_per_epoch=3)
        model = training.build_model(config, (8, 8, 1))
        training.compile_model(model, config, num_classes=5)
        rng = np.random.default_rng(0)
        x, y = rng.random((50, 8, 8, 1), dtype=np.float32), np.repeat(np.arange(5), 10)
        model.fit(ClassBalancedPyDataset(x, y, 4, 4, seed=0), epochs=1, steps_per_epoch=3,
                  verbose=0)
        jitted = backend == "jax"
        assert model.jit_compile is jitted, model.jit_compile
        assert len(calls) == (1 if jitted else 3), (backend, len(calls))
        print("ok")
    """, tmp_path))
