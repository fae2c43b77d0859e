"""The `keras-dml` parser, entry point and error messages.

Each command module (see `keras_dml.cli`) is listed in `COMMAND_MODULES` and adds
its subcommand and options; none imports TensorFlow before a command runs, so
`keras-dml --help` and `keras-dml train --help` answer at once.
"""

import argparse
import contextlib
import importlib
import importlib.util
import os
import re
import sys
import warnings

__all__ = ["COMMAND_MODULES", "EXTRAS", "build_parser", "flag_words", "load_tensorflow", "main"]

# Modules adding subcommands, in the order of `keras-dml --help`.
COMMAND_MODULES = (
    "keras_dml.cli.train",
    "keras_dml.cli.export",
    "keras_dml.cli.embed",
    "keras_dml.cli.index",
    "keras_dml.cli.search",
    "keras_dml.cli.calibrate",
    "keras_dml.cli.evaluate",
    "keras_dml.cli.verify",
    "keras_dml.cli.serve",
)

# Optional dependencies -> the extra that installs them (setup.cfg).
EXTRAS = {
    "tensorflow": "tensorflow",
    "tensorflow_datasets": "tensorflow",
    "jax": "jax",
    "matplotlib": "plots",
    "sklearn": "plots",
    "tensorflow_serving": "export",
    "faiss": "ann",
    "pymilvus": "milvus",
    "milvus_lite": "milvus",
    "torch": "torch",
    "pytorch_metric_learning": "peers",
    "fastapi": "serve",
    "uvicorn": "serve",
    "multipart": "serve",
}


def build_parser():
    """The `keras-dml` parser; `parser.command_parsers` maps each command to its parser."""
    parser = argparse.ArgumentParser(
        prog="keras-dml", description="Deep metric learning with Keras (TensorFlow, JAX or "
        "PyTorch: KERAS_BACKEND): train an embedder, measure retrieval, export it for TF "
        "Serving (with TensorFlow).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_command(commands)
    parser.command_parsers = dict(commands.choices)
    return parser


def _with_recipe(parser, argv, args):
    """`train --list-recipes` prints them (returns None); `--recipe NAME` re-parses with
    the recipe's values as defaults, so flags given on the command line win."""
    from keras_dml.training import recipes

    if args.list_recipes:
        print(recipes.describe())
        return None
    parser.command_parsers["train"].set_defaults(**recipes.get(args.recipe))
    return parser.parse_args(argv)


@contextlib.contextmanager
def _quiet_stderr():
    """Drops what C++ writes to file descriptor 2 (TensorFlow's start-up log lines)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def load_tensorflow():
    """Imports TensorFlow (where installed) and keras_dml without TensorFlow's console
    noise, with TensorFlow's oneDNN kernels on (unless `TF_ENABLE_ONEDNN_OPTS` says
    otherwise): TensorFlow turns them on by itself only on CPUs with AVX-512 VNNI /
    BF16 or AMX, and elsewhere its default kernels train and search more slowly
    (benchmarks/README.md). Without TensorFlow (Keras on JAX or PyTorch) keras_dml
    alone is imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    if importlib.util.find_spec("tensorflow") is None:
        import keras_dml

        keras_dml.import_all()
        return
    with _quiet_stderr():
        import tensorflow as tf

        import keras_dml

        keras_dml.import_all()
        tf.config.list_physical_devices()  # device start-up logs (cuInit) while quiet
    tf.get_logger().setLevel("ERROR")  # e.g. retracing warnings


def flag_words(message, command_parser):
    """Rewrites Python argument names in `message` as the command's flags.

    `overwrite=True` becomes `--overwrite`, `version=None` `no --version`,
    `data_dir` `--data-dir`; a one-word name only where it is used as an argument
    (`epochs must ...`, `epochs=0`). Paths are left alone.
    """
    for option in command_parser._actions:  # noqa: SLF001 (argparse has no public list)
        flags = [s for s in option.option_strings if s.startswith("--")]
        if not flags:
            continue
        name, flag = rf"(?<![-\w/.]){re.escape(option.dest)}", flags[0]
        message = re.sub(rf"{name}=True\b", flag, message)
        message = re.sub(rf"{name}=None\b", f"no {flag}", message)
        if "_" in option.dest:
            message = re.sub(rf"{name}(?![\w/])", flag, message)
        else:
            message = re.sub(rf"{name}(?= must|=)", flag, message)
    return message


def _bad_image_hint(message, command_parser):
    """keras_dml.data's bad-image hint as the command's: `--skip-bad-images` where the
    command has it (train), no skipping hint where it has not (embed, index, ...)."""
    if "--skip-bad-images" not in message:
        return message
    from keras_dml.data.bad_images import SKIP_HINT

    has_flag = "--skip-bad-images" in command_parser._option_string_actions  # noqa: SLF001
    return message.replace(SKIP_HINT, ", or skip the bad files with "
                           "--skip-bad-images" if has_flag else "")


def _missing_module_message(error):
    top = (error.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return f"{error} (a required dependency: reinstall keras_dml)"
    return f"{error.name} is not installed: pip install \"keras_dml[{extra}]\""


@contextlib.contextmanager
def _warnings_as_lines(command):
    """Python warnings print as `keras-dml COMMAND: warning: message`, without the
    source file and line that mean nothing to a command-line user."""
    saved = warnings.formatwarning
    warnings.formatwarning = (
        lambda message, *args, **kwargs: f"keras-dml {command}: warning: {message}\n")
    try:
        yield
    finally:
        warnings.formatwarning = saved


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "list_recipes", False) or getattr(args, "recipe", None):
            args = _with_recipe(parser, argv, args)
            if args is None:
                return 0
        if not getattr(args, "light_imports", False):  # serve imports what it uses
            load_tensorflow()
        with _warnings_as_lines(args.command):
            return args.handler(args)
    except ModuleNotFoundError as error:
        message = _missing_module_message(error)
    except ImportError as error:  # keras_dml.backend.TensorFlowRequiredError: one line
        message = str(error)
    except (ValueError, FileNotFoundError, FileExistsError, ConnectionError,
            RuntimeError) as error:  # keras_dml raises these with one-line messages
        command_parser = parser.command_parsers[args.command]
        message = flag_words(_bad_image_hint(str(error), command_parser), command_parser)
    except KeyboardInterrupt:
        message = "interrupted"
    print(f"keras-dml {args.command}: error: {message}", file=sys.stderr)
    return 2

