"""`keras-dml train`: train an embedder, report Recall@K before/after, save, plot, export."""

import argparse

from keras_dml.training.config import (
    APPLICATIONS,
    BACKBONES,
    CROPS,
    DEFAULT_WIDTHS,
    HUB_POOLINGS,
    BATCH_DESIGNS,
    DATASETS,
    DEFAULT_BATCH_DESIGN,
    DEFAULT_TEST_CLASSES,
    FILE_IMAGE_SIZE,
    LOSSES,
    LR_SCHEDULES,
    STRATEGIES,
    backbone_name,
    default,
)

__all__ = ["add_command", "run"]

HELP = "train an embedder (default: the bundled Omniglot, 964 characters train, 659 test)"
_DESCRIPTION = (
    "Train an embedder with a keras_dml loss on C x k class-balanced batches; print "
    "Recall@1/2/4/8 and MAP@R on the held-out classes before and after training; save "
    "the model, logs and figures under --runs-dir/<run> and export a TF Serving "
    "SavedModel under --export-dir/<run>/<version> (on the TensorFlow backend; on JAX or "
    "PyTorch the export is skipped with a message). Without options it trains on the "
    "Omniglot copy shipped with the package (under 2 minutes on a 2-core CPU). Your own "
    "images: --data-dir DIR with one folder of images per class, DIR/<class>/<image>, or a "
    "CSV file of path,label rows; half of the classes are held out for testing "
    "(--test-classes; --test-classes 0 trains on every class, evaluated on --test-dir "
    "or not at all)."
)


def add_command(commands):
    """Adds `train` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser("train", help=HELP, description=_DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser):
    """The `train` options; their defaults are `TrainConfig`'s."""
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model"))
    _add_training_arguments(parser.add_argument_group("training"))
    _add_fine_tuning_arguments(parser.add_argument_group("fine-tuning (a pretrained backbone)"))
    recipe = parser.add_argument_group("recipes")
    recipe.add_argument("--recipe", default=None,
                        help="start from a shipped recipe's flags (flags you give override "
                        "them), e.g. omniglot-best")
    recipe.add_argument("--list-recipes", action="store_true",
                        help="list the shipped recipes and exit")
    _add_output_arguments(parser.add_argument_group("output"))
    faults = parser.add_argument_group("faults")
    faults.add_argument("--resume", default=None, metavar="RUN",
                        help="continue a killed run from its last epoch backup (RUN: its "
                        "directory, runs/<name>) with its saved settings")
    faults.add_argument("--skip-bad-images", action="store_true",
                        help="leave out image files that cannot be read or decoded, in "
                        "training and test images (each named once on stderr, listed in "
                        "summary.json), instead of stopping with an error naming the first")


def _add_data_arguments(data):
    """--dataset, --data-dir, the held-out classes, image size and the C x k batch."""
    data.add_argument("--dataset", default=None, choices=DATASETS, metavar="NAME",
                      help=f"one of: {', '.join(DATASETS)} (default {default('dataset')}: "
                      "bundled; digits: bundled with scikit-learn; folder and csv: your own "
                      "images in --data-dir; the others need --data-dir or a "
                      "tensorflow_datasets download); default with --data-dir: detected "
                      "from it")
    # The list files are keras_dml.datasets.layout.MARKERS' (not imported: --help stays
    # without NumPy; a test keeps the two in step).
    data.add_argument("--data-dir", default=None, metavar="DIR|CSV",
                      help="the dataset's folder in its official layout, or your own images: "
                      "a folder DIR/<class>/<image> (.jpg .jpeg .png .gif .bmp; DIR/train/ + "
                      "DIR/test/ for a given split) or a CSV file with columns path,label"
                      "[,split]. Without --dataset: a file is csv, a folder holding a known "
                      "dataset's list file (omniglot images_background.npz, cub200 images.txt, "
                      "cars196 cars_annos.mat, sop Ebay_train.txt, inshop "
                      "list_eval_partition.txt) is that dataset, any other folder is folder")
    data.add_argument("--test-classes", type=_fraction_or_count, default=None,
                      metavar="FRACTION|COUNT",
                      help="folder / csv without a given split: the classes held out for "
                      f"testing, a fraction in (0, 1) or a count (default "
                      f"{DEFAULT_TEST_CLASSES}; the same classes in every run, whatever "
                      "--seed); 0: every class trains and the run measures no Recall@K, "
                      "unless --test-dir gives the test images")
    data.add_argument("--test-dir", default=None, metavar="DIR|CSV",
                      help="evaluate on these images instead of held-out classes: a folder "
                      "DIR/<class>/<image> or a CSV file path,label (its classes may differ "
                      "from --data-dir's, each image searched among the others); every "
                      "class of --data-dir then trains")
    data.add_argument("--image-size", type=int, default=None,
                      help="image side: in-memory datasets (omniglot, digits) are resized to "
                      "it (default: as stored, 28 / 8); image-file datasets are resized and "
                      f"centre-cropped to it (default {FILE_IMAGE_SIZE}, CPU-friendly)")
    data.add_argument("--decoded-cache-mb", type=int, default=default("decoded_cache_mb"),
                      metavar="MB",
                      help="image files: hold each training image decoded and resized after "
                      "its first read when all of them fit in MB MiB (the random crop; "
                      "float32, 62 KiB an image at the default 64 px), so later epochs "
                      "only crop and flip; 0: decode on every draw (default %(default)s)")
    exceptions = "; ".join(f"{name}: {c} x {k}" for name, (c, k) in BATCH_DESIGNS.items())
    data.add_argument("--classes-per-batch", type=int, default=None,
                      help=f"C, classes per batch (default {DEFAULT_BATCH_DESIGN[0]}; "
                      f"{exceptions})")
    data.add_argument("--samples-per-class", type=int, default=None,
                      help=f"k, images per class in a batch (default {DEFAULT_BATCH_DESIGN[1]})")


def _add_model_arguments(model):
    """The network and its loss."""
    model.add_argument("--backbone", default=default("backbone"), type=_backbone,
                       metavar="NAME",
                       help=f"{', '.join(BACKBONES)}, in any case (default %(default)s), or "
                       "hub:PRESET, a KerasHub DINOv2, DINOv3, ViT, CLIP or SigLIP vision "
                       "tower (a KerasHub preset name, hf://..., kaggle://... or a local "
                       "preset folder; pip install \"keras_dml[hub]\"); the Keras "
                       "Applications and KerasHub towers take raw pixels (their own "
                       "preprocessing runs inside the model)")
    model.add_argument("--weights", default=None, metavar="imagenet|preset|none|PATH",
                       help="start the backbone from ImageNet (Keras' download or its cache "
                       "~/.keras/models), from a hub:PRESET's own weights (preset), from "
                       "random weights, or from PATH: a .weights.h5 "
                       "or .keras file of the backbone, or an earlier run folder (warm "
                       "start, also the head when its size matches); default: imagenet for "
                       f"{', '.join(APPLICATIONS[:2])}, ... , preset for hub:PRESET, none "
                       "for cnn3 and convnet")
    model.add_argument("--token-pooling", default=None, choices=HUB_POOLINGS,
                       help="hub:PRESET: how the tower's tokens become one vector: cls (the "
                       "class token), mean or gem (of the patch tokens), head (SigLIP's own "
                       "attention pooling); default: cls, head for SigLIP (no class token), "
                       "as DINO's nearest-neighbour evaluation and SigLIP's image embedding "
                       "read them")
    widths = ", ".join(f"{name} {width}" for name, width in DEFAULT_WIDTHS.items())
    model.add_argument("--width", type=int, default=None,
                       help=f"filters per convolution of cnn3, of convnet's first stage "
                       f"(doubled per stage); default: {widths}")
    model.add_argument("--embedding-dim", type=int, default=default("embedding_dim"),
                       help="default %(default)s")
    model.add_argument("--loss", default=default("loss"), metavar="NAME",
                       help=f"default %(default)s; one of: {', '.join(LOSSES)}")
    model.add_argument("--loss-args", default="{}",
                       help='JSON constructor arguments, e.g. \'{"alpha": 2, "beta": 40}\'')


def _add_training_arguments(fit):
    """The optimiser, its schedule, augmentation, strategy and cross-batch memory."""
    fit.add_argument("--epochs", type=int, default=default("epochs"),
                     help="default %(default)s (Recall@K is measured after each)")
    fit.add_argument("--steps-per-epoch", type=int, default=default("steps_per_epoch"),
                     help="default %(default)s")
    fit.add_argument("--learning-rate", type=float, default=default("learning_rate"),
                     help="Adam's (peak) learning rate (default %(default)s)")
    fit.add_argument("--weight-decay", type=float, default=default("weight_decay"),
                     help="decoupled weight decay: AdamW instead of Adam when > 0 (default "
                     "%(default)s)")
    fit.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=default("lr_schedule"),
                     help="constant, or cosine decay to 0 at the last step (default "
                     "%(default)s)")
    fit.add_argument("--warmup-steps", type=int, default=default("warmup_steps"),
                     help="linear learning-rate warm-up from 0 (default %(default)s)")
    fit.add_argument("--augment-shift", type=float, default=default("augment_shift"),
                     help="random translation of training images, in pixels (default "
                     "%(default)s)")
    fit.add_argument("--augment-rotation", type=float, default=default("augment_rotation"),
                     help="random rotation of training images, in degrees (default "
                     "%(default)s)")
    fit.add_argument("--augment-scale", type=float, default=default("augment_scale"),
                     help="random zoom of training images, a fraction (default %(default)s)")
    fit.add_argument("--rotated-classes", action=argparse.BooleanOptionalAction,
                     default=default("rotated_classes"),
                     help="add each training class turned by 90, 180 and 270 degrees as three "
                     "new classes (for characters, as omniglot; in-memory datasets)")
    fit.add_argument("--seed", type=int, default=default("seed"), help="default %(default)s")
    fit.add_argument("--jit-compile", action="store_true",
                     help="compile the step with XLA on TensorFlow (torch.compile on PyTorch); "
                     "JAX always compiles its step")
    fit.add_argument("--strategy", choices=STRATEGIES, default=default("strategy"),
                     help="tf.distribute strategy: mirrored = this machine's GPUs, multiworker "
                     "= the cluster in TF_CONFIG, auto (default) = multiworker when TF_CONFIG "
                     "names several workers, mirrored with several GPUs (docs/distributed.md)")
    fit.add_argument("--memory-size", type=int, default=default("memory_size"),
                     help="cross-batch memory (XBM) of this many past embeddings around the "
                     "loss (a pair loss); default 0: none")
    fit.add_argument("--memory-warmup", type=int, default=default("memory_warmup"),
                     help="training steps on the batch alone before the memory starts "
                     "(default %(default)s)")
    fit.add_argument("--memory-momentum", type=float, default=default("memory_momentum"),
                     help="fill the memory from a momentum copy of the network (MoCo uses "
                     "0.999); default: the trained network itself")
    fit.add_argument("--memory-batch-loss", action=argparse.BooleanOptionalAction,
                     default=default("memory_batch_loss"),
                     help="add the in-batch loss to the memory loss (the XBM paper's form)")


def _add_fine_tuning_arguments(tune):
    """What changes when the backbone starts pretrained."""
    tune.add_argument("--freeze-bn", action=argparse.BooleanOptionalAction, default=None,
                      help="BatchNorm layers keep their statistics and scale / shift, as in "
                      "the papers (default: on with pretrained --weights)")
    tune.add_argument("--head-warmup-steps", type=int, default=default("head_warmup_steps"),
                      help="first steps in which only the embedding head and any proxies "
                      "train, the backbone frozen (Proxy Anchor's warm-up; default "
                      "%(default)s)")
    tune.add_argument("--backbone-lr-multiplier", type=float,
                      default=default("backbone_lr_multiplier"),
                      help="the backbone's learning rate relative to --learning-rate "
                      "(default %(default)s)")
    tune.add_argument("--layer-decay", type=float, default=default("layer_decay"),
                      help="hub:PRESET: layer-wise learning-rate decay, each transformer "
                      "block's rate times this per block below the top one (the embeddings "
                      "below them all), in (0, 1] (default %(default)s: none; the BEiT and "
                      "MAE fine-tuning recipes use 0.65-0.75, docs: Which backbone)")
    tune.add_argument("--drop-path-rate", type=float, default=default("drop_path_rate"),
                      help="hub:PRESET DINOv2 / DINOv3: stochastic depth while training "
                      "(a rate in [0, 1); default: the preset's own, KerasHub's default 0)")
    tune.add_argument("--augment-crop", choices=CROPS, default=None,
                      help="image files: the training crop, random (of the image resized to "
                      "--image-size x 256/224) or random_resized (8-100 %% of the image, "
                      "resized); evaluation always resizes and centre-crops (default: "
                      "random_resized for the Keras Applications, random otherwise)")
    tune.add_argument("--mixed-precision", action="store_true",
                      help="float16 computations with float32 weights and losses (GPUs)")


def _add_output_arguments(out):
    """Where the run, its figures and its export go."""
    out.add_argument("--run-name", default=None,
                     help="default <dataset>-<loss>-<date>-<time>, never an existing one")
    out.add_argument("--runs-dir", default=default("runs_dir"),
                     help="logs, model and figures go to <runs-dir>/<run> (default %(default)s)")
    out.add_argument("--export-dir", default=default("export_dir"),
                     help="TF Serving exports go to <export-dir>/<run>/<version> "
                     "(default %(default)s)")
    out.add_argument("--overwrite", action="store_true",
                     help="replace an existing <runs-dir>/<run> (the export gets a new version)")
    out.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    out.add_argument("--export-anyway", action="store_true",
                     help="export even when the final Recall@1 is at chance or below its "
                     "start (such a run is not exported by default)")
    out.add_argument("--no-plots", action="store_true", help="skip the figures")


def _fraction_or_count(text):
    """`--test-classes`: an int count ("20") or a fraction ("0.3")."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a fraction such as 0.3 or a number of classes; got {text!r}") from None


def _backbone(name):
    """`--backbone` as given (`TrainConfig` spells it as `BACKBONES` does), if known."""
    try:
        backbone_name(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return name


def run(args):
    """`keras-dml train`: trains (or resumes) the run; returns the exit code."""
    from keras_dml import backend, training
    from keras_dml.backend import cpu
    from keras_dml.training.config import TrainConfig

    if args.resume:
        config = training.load_run_config(args.resume)
        print(f"resuming {config.runs_dir}/{config.run_name} with its "
              "saved settings", flush=True)
        training.run(config, report=training.ConsoleReport(), resume=True)
        return 0
    config = TrainConfig.from_args(args)
    if backend.is_tensorflow():  # the first line: which CPU-dependent form runs
        print(cpu.tensorflow_choice_line(), flush=True)
    training.run(config, report=training.ConsoleReport())
    return 0
