"""Faults: nothing keras_dml loads executes code (no pickle, Keras' safe_mode, JSON only)."""

import ast
import os

import keras
import pytest

from keras_dml import cli
from keras_dml.export.load import load_keras_model

pytestmark = pytest.mark.faults

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_dml")
UNSAFE_MODULES = {"pickle", "cPickle", "dill", "shelve", "marshal", "cloudpickle", "joblib"}


def _calls():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                tree = ast.parse(open(path, encoding="utf-8").read())
                for node in ast.walk(tree):
                    yield os.path.relpath(path, PACKAGE), node


def test_the_package_source_has_no_code_executing_loader():
    problems = []
    for where, node in _calls():
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if UNSAFE_MODULES & {n.split(".")[0] for n in names}:
                problems.append(f"{where}:{node.lineno} imports {names}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        keywords = {k.arg: k.value for k in node.keywords}
        if name in ("eval", "exec") and isinstance(func, ast.Name):
            problems.append(f"{where}:{node.lineno} calls {name}")
        if name == "load" and isinstance(func, ast.Attribute) and getattr(
                func.value, "id", "") == "np":
            flag = keywords.get("allow_pickle")
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                problems.append(f"{where}:{node.lineno} np.load without allow_pickle=False")
        flag = keywords.get("safe_mode")
        if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is True):
            problems.append(f"{where}:{node.lineno} safe_mode={ast.unparse(flag)}")
        if name == "load" and getattr(func.value if isinstance(func, ast.Attribute) else None,
                                      "id", "") == "yaml":
            problems.append(f"{where}:{node.lineno} yaml.load")
    assert not problems, problems


def test_a_keras_file_with_a_lambda_is_refused_by_safe_mode(tmp_path):
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    path = str(tmp_path / "lambda.keras")
    model.save(path)
    with pytest.raises(ValueError, match="safe_mode"):
        load_keras_model(path)


@pytest.mark.parametrize("text", ["__import__('os').system('echo pwned')", "dict(a=1)",
                                  "{'alpha': 2}"])
def test_loss_args_are_json_only(text, capsys, tmp_path):
    assert cli.main(["train", "--loss-args", text, "--runs-dir", str(tmp_path),
                     "--no-export", "--no-plots"]) == 2
    assert "--loss-args must be a JSON object" in capsys.readouterr().err
    assert not os.listdir(tmp_path)
