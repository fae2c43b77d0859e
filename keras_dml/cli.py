"""The `keras-dml` command: train, evaluate and export deep metric learning models."""

import argparse
import json
import os
import sys
import time


def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def add_train_arguments(parser):
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="digits",
                      help="digits (bundled, default), cub200, cars196, sop, inshop, omniglot")
    data.add_argument("--data-dir", default=None,
                      help="local folder in the dataset's official layout")
    data.add_argument("--image-size", type=int, default=None,
                      help="image side: crop size for image-file datasets (default 224); "
                      "in-memory datasets (digits, omniglot) are resized to it (default: as stored)")
    data.add_argument("--classes-per-batch", type=int, default=5, help="C (default 5)")
    data.add_argument("--samples-per-class", type=int, default=16, help="k (default 16)")
    model = parser.add_argument_group("model")
    model.add_argument("--backbone", default="convnet", help="convnet (default) or resnet50")
    model.add_argument("--embedding-dim", type=int, default=64, help="default 64")
    model.add_argument("--loss", default="MultiSimilarity",
                       help="a keras_dml loss class name (default MultiSimilarity)")
    model.add_argument("--loss-args", default="{}",
                       help='JSON constructor arguments, e.g. \'{"alpha": 2, "beta": 40}\'')
    fit = parser.add_argument_group("training")
    fit.add_argument("--epochs", type=int, default=4, help="default 4")
    fit.add_argument("--steps-per-epoch", type=int, default=25, help="default 25")
    fit.add_argument("--learning-rate", type=float, default=1e-3, help="Adam, default 1e-3")
    fit.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant",
                     help="constant (default), or cosine decay to 0 at the last step")
    fit.add_argument("--warmup-steps", type=int, default=0,
                     help="linear learning-rate warm-up from 0 (default 0)")
    fit.add_argument("--augment-shift", type=float, default=0.0,
                     help="random translation of training images, in pixels (default 0)")
    fit.add_argument("--augment-rotation", type=float, default=0.0,
                     help="random rotation of training images, in degrees (default 0)")
    fit.add_argument("--augment-scale", type=float, default=0.0,
                     help="random zoom of training images, a fraction (default 0)")
    fit.add_argument("--seed", type=int, default=0, help="default 0")
    fit.add_argument("--jit-compile", action="store_true", help="compile the step with XLA")
    fit.add_argument("--strategy", choices=("auto", "mirrored", "multiworker"), default="auto",
                     help="tf.distribute strategy: mirrored = this machine's GPUs, multiworker "
                     "= the cluster in TF_CONFIG, auto (default) = multiworker when TF_CONFIG "
                     "names several workers, mirrored with several GPUs (docs/distributed.md)")
    recipe = parser.add_argument_group("recipes")
    recipe.add_argument("--recipe", default=None,
                        help="start from a shipped recipe's flags (flags you give override "
                        "them), e.g. omniglot-best")
    recipe.add_argument("--list-recipes", action="store_true",
                        help="list the shipped recipes and exit")
    out = parser.add_argument_group("output")
    out.add_argument("--run-name", default=None, help="default <dataset>-<loss>-<time>")
    out.add_argument("--runs-dir", default="runs", help="logs, model and plots (default runs/)")
    out.add_argument("--export-dir", default="savedmodels",
                     help="TF Serving exports go to <export-dir>/<run>/<version>")
    out.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    out.add_argument("--no-plots", action="store_true", help="skip the figures")
    faults = parser.add_argument_group("faults")
    faults.add_argument("--resume", default=None, metavar="RUN",
                        help="continue a killed run from its last epoch backup (RUN: its "
                        "directory, runs/<name>); its saved settings are used")
    faults.add_argument("--skip-bad-images", action="store_true",
                        help="skip training batches holding an unreadable image (counted on "
                        "stderr) instead of stopping with an error naming the file")


def _print_metrics(title, metrics, ks):
    row = "  ".join(f"R@{k} {100 * metrics[f'recall@{k}']:5.1f}" for k in ks)
    print(f"{title:<16}{row}  MAP@R {100 * metrics['map@r']:5.1f}", flush=True)


def train(args):
    """Train an embedder, print Recall@K before/after, save, export and plot."""
    _quiet_tensorflow()
    from keras_dml import training

    if args.resume:
        config = training.load_run_config(args.resume)
        print(f"resuming {os.path.join(config.runs_dir, config.run_name)} with its saved "
              "settings", flush=True)
        run = training.run(config, report=_print_metrics, resume=True)
    else:
        run = training.run(training.TrainConfig.from_args(args), report=_print_metrics)
    print(f"run directory: {run['run_dir']}")
    if run.get("export_dir"):
        print(f"SavedModel:    {run['export_dir']}")
    return 0


def _with_recipe(parser, argv, args):
    """`train --list-recipes` prints them (returns None); `--recipe NAME` re-parses with
    the recipe's values as defaults, so flags given on the command line win."""
    from keras_dml import recipes

    if args.list_recipes:
        print(recipes.describe())
        return None
    parser.train_parser.set_defaults(**recipes.get(args.recipe))
    return parser.parse_args(argv)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-dml", description="Deep metric learning with TensorFlow / Keras."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser(
        "train", help="train an embedder (default: bundled digits, class-disjoint split)",
        description="Train an embedder with a keras_dml loss on C x k class-balanced "
        "batches; print Recall@1/2/4/8 and MAP@R on the held-out classes before and after "
        "training; save the model, logs and figures under --runs-dir and export a TF "
        "Serving SavedModel under --export-dir.",
    )
    add_train_arguments(train_parser)
    parser.train_parser = train_parser  # --recipe sets its defaults
    train_parser.set_defaults(handler=train)
    from keras_dml import cli_serving

    cli_serving.add_commands(commands)
    return parser


def main(argv=None):
    _quiet_tensorflow()  # before anything imports TensorFlow (the export options do)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "list_recipes", False) or getattr(args, "recipe", None):
            args = _with_recipe(parser, argv, args)
            if args is None:
                return 0
        return args.handler(args)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f"keras-dml {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
