"""`TrainConfig`: every setting of `keras-dml train`, with its default (no TensorFlow here).

The command line builds its options from these defaults (`keras_dml.cli.train`),
so the defaults live in one place; `keras_dml.training.run(config)` runs a config.
"""

import dataclasses
import json
import math
import re

from keras_dml.backbone_families import (  # noqa: F401
    BACKBONE_ALIASES,
    HUB_POOLINGS,
    backbone_name,
    is_hub,
)
from keras_dml.hyperparameters import below_one, integer_at_least

__all__ = ["TrainConfig", "default", "own_files_options"]

# Names `keras-dml train --help` lists without importing TensorFlow; a test keeps them
# equal to `keras_dml.datasets.available()` and `keras_dml.losses.LOSSES`.
DATASETS = ("omniglot", "digits", "cub200", "cars196", "sop", "inshop", "folder", "csv")
# Your own images (`keras_dml.datasets.from_directory` / `from_csv`), split by
# `test_classes` unless the files give the split.
OWN_DATASETS = ("folder", "csv")
DEFAULT_TEST_CLASSES = 0.5
IN_MEMORY_DATASETS = ("omniglot", "digits")
LOSSES = (
    "Angular", "ArcFace", "BalancedContrastive", "BinLifted", "BinomialDeviance", "Circle",
    "Contrastive", "CosFace", "DynamicSoftMargin", "FastAP", "GeneralizedLiftedStructure",
    "Histogram", "Instance", "InstanceCrossEntropy", "IntraPairVariance",
    "LargeMarginSoftmax", "LiftedStructure", "LogRatio", "Manifold", "Margin",
    "MultiSimilarity", "MultipleNegativesRanking", "NCA", "NPair", "NTXent",
    "NormalizedSoftmax", "P2SGrad", "PNP", "ProxyAnchor", "ProxyNCA", "RankedList",
    "RelativeAbsoluteWeighting", "SignalToNoiseRatioContrastive", "SmoothAP", "SoftTriple",
    "SphereFace", "SubCenterArcFace", "SupervisedContrastive", "ThresholdConsistentMargin",
    "Triplet", "TupletMargin", "VICReg",
)
# Keras Applications families (keras_dml.backbones.FAMILIES): pretrained weights,
# their own preprocessing inside the model; names are accepted in any case, and
# "resnet50" is ResNet50.
APPLICATIONS = (
    "ResNet50", "ResNet50V2", "InceptionV3", "EfficientNetV2B0", "EfficientNetV2B1",
    "EfficientNetV2B2", "EfficientNetV2B3", "EfficientNetV2S", "ConvNeXtTiny",
    "MobileNetV3Small", "MobileNetV3Large",
)
BACKBONES = ("cnn3", "convnet") + APPLICATIONS
CROPS = ("random", "random_resized")
# Filters of the conv layers when --width is not given: cnn3 at 32 (not the protocol's
# 64) trains much faster on a CPU and still reaches R@1 >= 78 on Omniglot (README).
DEFAULT_WIDTHS = {"cnn3": 32, "convnet": 32}
LR_SCHEDULES = ("constant", "cosine")
STRATEGIES = ("auto", "mirrored", "multiworker")
# Image side used for image-file datasets when --image-size is not given: small enough
# for a CPU run (a 224 step of ResNet-50 takes ~43 s on 2 cores).
FILE_IMAGE_SIZE = 64
# Batch design (C classes x k images) when not given: 32 x 4, but digits has only 5
# training classes.
BATCH_DESIGNS = {"digits": (5, 16)}
DEFAULT_BATCH_DESIGN = (32, 4)


@dataclasses.dataclass
class TrainConfig:
    """What `keras-dml train` does; each field is the option of the same name."""

    dataset: str = "omniglot"
    data_dir: str = None
    test_classes: float = None
    test_dir: str = None
    image_size: int = None
    classes_per_batch: int = None
    samples_per_class: int = None
    backbone: str = "cnn3"
    width: int = None
    embedding_dim: int = 128
    loss: str = "InstanceCrossEntropy"
    loss_args: dict = dataclasses.field(default_factory=dict)
    epochs: int = 2
    steps_per_epoch: int = 500
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    augment_shift: float = 0.0
    augment_rotation: float = 0.0
    augment_scale: float = 0.0
    rotated_classes: bool = False
    seed: int = 0
    jit_compile: bool = False
    strategy: str = "auto"
    memory_size: int = 0
    memory_warmup: int = 0
    memory_momentum: float = None
    memory_batch_loss: bool = False
    run_name: str = None
    runs_dir: str = "runs"
    export_dir: str = "savedmodels"
    overwrite: bool = False
    export: bool = True
    export_anyway: bool = False
    plots: bool = True
    skip_bad_images: bool = False
    weights: str = None
    freeze_bn: bool = None
    head_warmup_steps: int = 0
    backbone_lr_multiplier: float = 1.0
    token_pooling: str = None
    drop_path_rate: float = None
    layer_decay: float = 1.0
    augment_crop: str = None
    mixed_precision: bool = False
    decoded_cache_mb: int = 1024  # keras_dml.data.sources.DECODED_CACHE_MB (a test checks)

    def __post_init__(self):
        if self.test_classes is not None and self.dataset not in OWN_DATASETS:
            raise ValueError(f"test_classes is for your own images (dataset folder or csv); "
                             f"{self.dataset} has its protocol split.")
        self._test_images()
        design = BATCH_DESIGNS.get(self.dataset, DEFAULT_BATCH_DESIGN)
        # not a field: whether C is the default, which a run on few classes may lower
        # (keras_dml.training.verdict.fit_batch_design)
        self._default_classes_per_batch = self.classes_per_batch is None
        if self.classes_per_batch is None:
            self.classes_per_batch = design[0]
        if self.samples_per_class is None:
            self.samples_per_class = design[1]
        for field in ("epochs", "steps_per_epoch", "classes_per_batch", "samples_per_class",
                      "embedding_dim"):
            integer_at_least(field, getattr(self, field), 1, strict=True)
        if self.image_size is not None:
            integer_at_least("image_size", self.image_size, 8, strict=True)
        if not (isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0
                and math.isfinite(self.learning_rate)):
            raise ValueError(f"learning_rate must be positive and finite, got "
                             f"{self.learning_rate!r}.")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got "
                             f"{self.lr_schedule!r}.")
        for field in ("memory_size", "memory_warmup", "decoded_cache_mb"):
            integer_at_least(field, getattr(self, field), 0, strict=True)
        if self.memory_momentum is not None:
            self.memory_momentum = below_one("memory_momentum", self.memory_momentum)
        if not self.memory_size and (self.memory_momentum is not None
                                     or self.memory_batch_loss):
            raise ValueError("memory_momentum and memory_batch_loss need a memory: give "
                             "memory_size too.")
        for field in ("warmup_steps", "weight_decay", "augment_shift", "augment_rotation",
                      "augment_scale"):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{field} must be >= 0, got {value!r}.")
        if self.augment_scale >= 1:
            raise ValueError(f"augment_scale must be below 1 (the zoom factor 1 - scale "
                             f"must stay above 0), got {self.augment_scale!r}.")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}.")
        given_backbone = self.backbone
        self.backbone = backbone_name(self.backbone)
        self._fine_tuning_defaults()
        if self.width is None:
            self.width = DEFAULT_WIDTHS.get(self.backbone)
        elif self.backbone not in DEFAULT_WIDTHS:
            raise ValueError(f"width must not be given with {given_backbone}: it sets the "
                             f"filters of {' and '.join(DEFAULT_WIDTHS)}.")
        else:
            integer_at_least("width", self.width, 1, strict=True)
        if self.run_name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+=-]*",
                                                          self.run_name):
            raise ValueError(f"run_name must be a plain folder name (letters, digits, "
                             f"'._+=-'), got {self.run_name!r}.")

    @property
    def evaluates(self):
        """False when the run measures no retrieval (test_classes=0 and no test_dir)."""
        return not (self.test_classes == 0 and self.test_dir is None)

    def _test_images(self):
        """test_dir: every class of data_dir trains (test_classes 0), the run is
        evaluated on test_dir's images."""
        if self.test_dir is None:
            return
        if self.dataset not in OWN_DATASETS:
            raise ValueError(f"test_dir is for your own images (dataset folder or csv); "
                             f"{self.dataset} has its protocol split.")
        if self.test_classes not in (None, 0):
            raise ValueError(f"test_dir={self.test_dir!r} holds the test images: every class "
                             f"of data_dir trains, so test_classes must not be given (got "
                             f"{self.test_classes!r}).")
        self.test_classes = 0

    def _fine_tuning_defaults(self):
        """Weights, BatchNorm, crop: the defaults of a pretrained backbone, checked.

        An Applications backbone starts from ImageNet (what fine-tuning wants; where
        Keras cannot download them the error says how to work offline), a KerasHub
        one from its preset's weights; either freezes its BatchNorm statistics when
        pretrained (the papers' protocol) and trains on random resized crops (the
        Proxy Anchor code's augmentation).
        """
        hub = is_hub(self.backbone)
        pretrainable = hub or self.backbone in APPLICATIONS
        if self.weights is None:
            self.weights = "preset" if hub else "imagenet" if pretrainable else "none"
        if not isinstance(self.weights, str) or not self.weights:
            raise ValueError(f"weights must be 'imagenet', 'preset', 'none' or a path, got "
                             f"{self.weights!r}.")
        if self.weights.lower() in ("imagenet", "preset", "none"):
            self.weights = self.weights.lower()
        if self.weights in ("imagenet", "preset") and (self.weights == "preset") != hub:
            raise ValueError(f"weights={self.weights} does not apply to {self.backbone}: "
                             "a hub:PRESET backbone starts from its preset's weights "
                             "(preset), a Keras Applications one from imagenet.")
        self._hub_options(hub)
        if self.weights == "imagenet" and not pretrainable:
            raise ValueError(f"{self.backbone} has no ImageNet weights: use --weights none "
                             f"or PATH, or a backbone of {list(APPLICATIONS)}.")
        if self.freeze_bn is None:
            self.freeze_bn = self.weights != "none"
        default_crop = "random_resized" if pretrainable else "random"
        if self.augment_crop is None:
            self.augment_crop = default_crop
        if self.augment_crop not in CROPS:
            raise ValueError(f"augment_crop must be one of {CROPS}, got "
                             f"{self.augment_crop!r}.")
        if self.augment_crop != default_crop and self.dataset in IN_MEMORY_DATASETS:
            raise ValueError(f"augment_crop={self.augment_crop!r} crops image files; "
                             f"{self.dataset} is held in memory (its batches are jittered by "
                             "augment_shift, augment_rotation and augment_scale).")
        integer_at_least("head_warmup_steps", self.head_warmup_steps, 0, strict=True)
        multiplier = self.backbone_lr_multiplier
        if not (isinstance(multiplier, (int, float)) and math.isfinite(multiplier)
                and multiplier >= 0):
            raise ValueError(f"backbone_lr_multiplier must be >= 0, got {multiplier!r}.")

    def _hub_options(self, hub):
        """`token_pooling`, `drop_path_rate` and `layer_decay`, which only a hub:PRESET
        backbone has."""
        decay = self.layer_decay
        if not (isinstance(decay, (int, float)) and 0 < decay <= 1):
            raise ValueError(f"layer_decay must be in (0, 1], got {decay!r}.")
        if not hub:
            if decay != 1:
                raise ValueError(f"layer_decay applies to a hub:PRESET backbone (transformer "
                                 f"blocks), not {self.backbone}.")
            for field in ("token_pooling", "drop_path_rate"):
                if getattr(self, field) is not None:
                    raise ValueError(f"{field} applies to a hub:PRESET backbone, not "
                                     f"{self.backbone}.")
            return
        if self.token_pooling is not None and self.token_pooling not in HUB_POOLINGS:
            raise ValueError(f"token_pooling must be one of {HUB_POOLINGS}, got "
                             f"{self.token_pooling!r}.")
        rate = self.drop_path_rate
        if rate is not None and not (isinstance(rate, (int, float)) and 0 <= rate < 1):
            raise ValueError(f"drop_path_rate must be in [0, 1), got {rate!r}.")

    @classmethod
    def from_args(cls, args):
        """A config from parsed `keras-dml train` arguments."""
        try:
            loss_args = json.loads(args.loss_args)
        except json.JSONDecodeError as error:
            raise ValueError(f"--loss-args must be a JSON object: {error}") from None
        if not isinstance(loss_args, dict):
            raise ValueError(f"--loss-args must be a JSON object, got {args.loss_args!r}.")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in vars(args).items() if k in fields}
        if values.get("dataset") is None:  # not given: --data-dir's layout decides
            from keras_dml.datasets.layout import detect_dataset

            values["dataset"] = (detect_dataset(args.data_dir) if args.data_dir
                                 else default("dataset"))
        values.update(loss_args=loss_args, export=not args.no_export, plots=not args.no_plots)
        return cls(**values)


def own_files_options(dataset, test_classes):
    """`datasets.load` options of your own images (folder, csv): the class split.

    The split is seeded by a fixed 0, not the run's seed, so runs with other
    seeds (or a warm start from an earlier run) are tested on the same classes.
    """
    if dataset not in OWN_DATASETS:
        return {}
    return {"test_classes": DEFAULT_TEST_CLASSES if test_classes is None else test_classes,
            "seed": 0}


def default(field):
    """The default value of a `TrainConfig` field."""
    spec = {f.name: f for f in dataclasses.fields(TrainConfig)}[field]
    return spec.default_factory() if callable(spec.default_factory) else spec.default
