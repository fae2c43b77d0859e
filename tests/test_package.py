"""Package hygiene: one version, a docstring on every public name, a complete API reference."""

import importlib.metadata
import inspect
import os
import re

import pytest

import keras_dml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = keras_dml.import_all()


def test_version_is_the_installed_metadata():
    assert importlib.metadata.version("keras_dml") == keras_dml.__version__


def test_setup_cfg_reads_the_version_from_the_package():
    with open(os.path.join(ROOT, "setup.cfg")) as handle:
        assert "version = attr: keras_dml.__version__" in handle.read()


def public_names(module):
    """`__all__`, or else the classes and functions the module defines without a `_`."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
            and value.__module__ == module.__name__]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_public_name_has_a_docstring(name):
    module = MODULES[name]
    assert (module.__doc__ or "").strip(), f"keras_dml.{name} has no module docstring"
    missing = [f"keras_dml.{name}.{attribute}" for attribute in public_names(module)
               if (inspect.isclass(getattr(module, attribute))
                   or inspect.isroutine(getattr(module, attribute)))
               and not (getattr(module, attribute).__doc__ or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"


def test_the_public_names_are_found():
    assert "MultiSimilarity" in public_names(MODULES["losses"])
    assert "DMLModel" in public_names(MODULES["models"])
    assert "_in_command_line" not in public_names(keras_dml)


def test_the_api_reference_covers_every_module():
    documented = set()
    for page in os.listdir(os.path.join(ROOT, "docs", "api")):
        with open(os.path.join(ROOT, "docs", "api", page)) as handle:
            documented |= set(re.findall(r"^::: keras_dml\.(\w+)", handle.read(), re.M))
    assert sorted(set(MODULES) - documented) == []
