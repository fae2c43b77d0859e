"""Backbones: small networks trained from scratch and the Keras Applications families.

`cnn3` and `convnet` normalise with `FusedBatchNormalization` and pool with
`TiledMaxPooling2D`: Keras' own functions computed by each backend's fastest kernel
(TensorFlow's fused batch norm; on JAX a max over reshaped tiles, whose gradient
XLA:CPU computes faster than Keras' pooling gradient), as the training step of these
small networks spends most of its time in them (benchmarks/README.md). Where a ReLU
meets a max pooling, they pool first: the same function, values and gradients (ReLU is
monotone, so the ReLU of a window's max is the max of its ReLUs), on a quarter of the
pixels.

The Keras Applications families (`FAMILIES`) are built with `include_top=False`
and without pooling (the `EmbeddingHead` pools the feature map). Each takes raw
pixels in [0, 255]: its own `preprocess_input` runs inside the model, in a
`keras_dml.layers.BackbonePreprocessing` layer, so an exported SavedModel takes
image bytes and the input pipeline must not normalise (`normalization="none"`).
Weights: None (random), "imagenet" (Keras' download, or its cache offline) or a
path (a weights file, a `.keras` model or a keras-dml run folder; `load_weights`).
"""

import contextlib
import os
import threading
import warnings

import keras

from keras_dml import hub_backbones
from keras_dml.backbone_families import FAMILIES, Family, backbone_name, is_hub  # noqa: F401
from keras_dml.hyperparameters import integer_at_least
from keras_dml.layers import FusedBatchNormalization, ShiftedConv2D, TiledMaxPooling2D

__all__ = ["BACKBONES", "FAMILIES", "Family", "RESNET50_LEVELS", "WeightsUnavailableError",
           "application", "cnn3", "convnet", "copy_layer_weights", "get", "is_application",
           "is_hub", "load_source", "load_weights", "multi_level_embedder", "takes_raw_pixels",
           "zero_shot_embedder"]


SCRATCH = ("cnn3", "convnet")
BACKBONES = SCRATCH + tuple(FAMILIES)


def is_application(name):
    """True for a Keras Applications family (pretrained weights, preprocessing inside)."""
    return backbone_name(name) in FAMILIES


def takes_raw_pixels(name):
    """True for a backbone taking pixels in [0, 255] (its preprocessing inside the
    model): the Keras Applications and the KerasHub "hub:PRESET" backbones."""
    return is_hub(name) or is_application(name)


def convnet(input_shape, widths=(32, 64, 128), name="convnet"):
    """A small VGG-style network: per width, two 3x3 conv + batch norm + ReLU, then pool.

    Pools only while the feature map is larger than 2x2, so it also fits 8x8 digits.
    Returns the feature-map model (put an `EmbeddingHead` on its output).
    """
    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    size = min(input_shape[0], input_shape[1])
    for stage, width in enumerate(widths):
        pooled = size > 2 and stage < len(widths) - 1
        for conv in range(2):
            x = ShiftedConv2D(width, 3, padding="same", use_bias=False,
                              name=f"stage{stage}_conv{conv}")(x)
            x = FusedBatchNormalization(name=f"stage{stage}_bn{conv}")(x)
            if pooled and conv == 1:  # pool, then ReLU: see the module
                x = TiledMaxPooling2D(name=f"stage{stage}_pool")(x)
            x = keras.layers.ReLU(name=f"stage{stage}_relu{conv}")(x)
        if pooled:
            size //= 2
    return keras.Model(inputs, x, name=name)


def cnn3(input_shape, filters=64, blocks=3, name="cnn3"):
    """The Omniglot protocol's network: `blocks` x (3x3 conv, batch norm, ReLU, 2x2
    max-pool), flattened (3 x 3 x 64 = 576 features at 28 x 28); each block pools
    before its ReLU, the same function (see the module).

    Returns the feature model (put an `EmbeddingHead` on its output; on a vector it
    is a dense layer and the L2 normalisation).
    """
    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    for block in range(blocks):
        x = ShiftedConv2D(filters, 3, padding="same", name=f"conv{block}")(x)
        x = FusedBatchNormalization(name=f"bn{block}")(x)
        x = TiledMaxPooling2D(name=f"pool{block}")(x)
        x = keras.layers.ReLU(name=f"relu{block}")(x)
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name=name)


def get(name, input_shape, weights=None, width=None, source=None, pooling=None,
        drop_path_rate=None):
    """A backbone by name: a feature-map (or, for cnn3 and KerasHub, feature-vector) model.

    Args:
        name: "cnn3", "convnet" or a `FAMILIES` name, in any case ("resnet50" is
            ResNet50), or "hub:PRESET", a KerasHub vision tower
            (`keras_dml.hub_backbones.backbone`: weights "preset" (default), "none"
            or a path as below).
        input_shape: (height, width, channels) of its input.
        weights: None or "none" (random initialisation), "imagenet" (Applications
            families: Keras' download, or its cache `~/.keras/models`), or a path:
            a `.weights.h5` / `.h5` weights file of this backbone, a `.keras` model
            holding it, or a keras-dml run folder (its `model.keras`). Defaults to
            None.
        width: filters of cnn3's convolutions (default 64) or of convnet's first
            stage (default 32, doubled per stage); the Applications have no width.
        source: `load_source(weights)` when the caller has it already (to read the
            saved head of the same file too). Defaults to None: loaded here.
        pooling, drop_path_rate: of a "hub:PRESET" backbone (see
            `keras_dml.hub_backbones.backbone`); None for the others.

    Returns:
        A `keras.Model` from raw pixels (in [0, 255] for the Applications) to features.

    Raises:
        ValueError: an unknown name, a bad width, weights that do not fit.
        FileNotFoundError: a missing path; ImageNet weights neither cached nor
            downloadable (`WeightsUnavailableError`, saying where to put them).
    """
    name = backbone_name(name)
    if is_hub(name):
        return _hub(name, input_shape, weights, source, pooling, drop_path_rate)
    if pooling is not None or drop_path_rate is not None:
        raise ValueError(f"pooling and drop_path_rate apply to hub:PRESET backbones, not "
                         f"{name}.")
    weights = None if weights in (None, "none") else os.fspath(weights)
    if source is None and weights not in (None, "imagenet"):
        source = load_source(weights)  # fail fast, before building
    if name in FAMILIES:
        if width is not None:
            raise ValueError(f"width={width!r} applies to cnn3 and convnet, not {name}.")
        backbone = application(name, input_shape, imagenet=weights == "imagenet")
    else:
        if weights == "imagenet":
            raise ValueError(f"{name} has no ImageNet weights: use weights=None or a path "
                             f"(or one of {list(FAMILIES)}).")
        if width is not None:
            integer_at_least("width", width, 1, strict=True)
        if name == "convnet":
            backbone = convnet(input_shape) if width is None else convnet(
                input_shape, widths=(width, 2 * width, 4 * width))
        else:
            backbone = cnn3(input_shape) if width is None else cnn3(input_shape,
                                                                     filters=width)
    if weights not in (None, "imagenet"):
        load_weights(backbone, weights, source=source)
    return backbone


def _hub(name, input_shape, weights, source, pooling, drop_path_rate):
    """A KerasHub backbone: the preset's weights, random ones, or a path's (warm start)."""
    weights = "preset" if weights is None else os.fspath(weights)
    path = weights not in ("preset", "none")
    if path and source is None:
        source = load_source(weights)  # fail fast, before building
    backbone = hub_backbones.backbone(name, input_shape, pooling=pooling,
                                      weights="none" if path else weights,
                                      drop_path_rate=drop_path_rate)
    if path:
        load_weights(backbone, weights, source=source)
    return backbone


def application(name, input_shape, imagenet=False):
    """A Keras Applications family with its `BackbonePreprocessing` in front.

    The application is one (nested) layer of the returned model, named as Keras
    names it (e.g. "MobileNetV3Small", "resnet50"); `load_weights` finds it by
    that name in a saved model.
    """
    from keras_dml.layers import BackbonePreprocessing

    family = FAMILIES[name]
    side = min(input_shape[:2])
    if side < family.min_size:
        raise ValueError(f"{name} needs images of at least {family.min_size} x "
                         f"{family.min_size} pixels, got input shape {tuple(input_shape)}.")
    constructor = getattr(keras.applications, name)
    with warnings.catch_warnings():  # the weights do not depend on the image size
        warnings.filterwarnings("ignore", message=".*Weights for input shape")
        if imagenet:
            with _keras_cache_first(name):
                network = constructor(include_top=False, weights="imagenet",
                                      input_shape=tuple(input_shape))
        else:
            network = constructor(include_top=False, weights=None,
                                  input_shape=tuple(input_shape))
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    pixels = BackbonePreprocessing(name, name="backbone_preprocessing")(inputs)
    return keras.Model(inputs, network(pixels), name=name.lower())


def zero_shot_embedder(name):
    """A pretrained backbone without training, as an embedder: raw pixels in [0, 255]
    at the backbone's own image size to its pooled features, L2-normalised.

    Args:
        name: "hub:PRESET" (`keras_dml.hub_backbones.embedder`: the preset's weights,
            image size and default pooling) or a Keras Applications family (any case;
            its ImageNet weights from Keras' cache `~/.keras/models` or download, at
            its `Family.default_size`, the average of its feature map).

    Raises:
        ValueError: A backbone without pretrained weights (cnn3, convnet) or unknown.
        WeightsUnavailableError: The ImageNet weights are neither cached nor
            downloadable.
        keras_dml.hub_backbones.HubPresetError: The preset cannot be loaded here.
    """
    name = backbone_name(name)
    if is_hub(name):
        return hub_backbones.embedder(name)
    if name not in FAMILIES:
        raise ValueError(f"{name} has no pretrained weights to measure without training: "
                         f"give hub:PRESET or one of {list(FAMILIES)}.")
    size = FAMILIES[name].default_size
    try:
        network = application(name, (size, size, 3), imagenet=True)
    except WeightsUnavailableError as error:
        raise WeightsUnavailableError(error.missing,
                                      ZERO_SHOT_REMEDY.format(name=name)) from None
    vectors = keras.layers.GlobalAveragePooling2D(name="average_pool")(network.output)
    vectors = keras.layers.UnitNormalization(name="l2_normalize")(vectors)
    return keras.Model(network.input, vectors, name=f"{name.lower()}_zero_shot")


class WeightsUnavailableError(FileNotFoundError):
    """ImageNet weights neither in Keras' cache nor downloadable (offline).

    Attributes:
        missing: The sentence naming the file, Keras' cache folder and the download
            that failed; the message adds what to do instead.
    """

    def __init__(self, missing, remedy=""):
        super().__init__(f"{missing} {remedy}".strip())
        self.missing = missing


#: What to do without ImageNet weights when training (the message of `get`).
TRAINING_REMEDY = (
    "Put that file there, or pass --weights PATH (a .weights.h5 or .keras file of {name}, or "
    "an earlier keras-dml run), or train --backbone cnn3 or convnet, which start from random "
    "weights ({name} from random weights falls to chance-level retrieval, so keras-dml train "
    "refuses --weights none for it).")
#: What to do without ImageNet weights for a zero-shot baseline (`zero_shot_embedder`).
ZERO_SHOT_REMEDY = ("Put that file there, or evaluate a trained run (RUN) instead of "
                    "--backbone {name}.")


def keras_cache_folder(cache_subdir="models", cache_dir=None):
    """The folder where `keras.utils.get_file` keeps `cache_subdir` files.

    As Keras: `cache_dir`, else `$KERAS_HOME` (read when keras is imported), else
    `~/.keras`; `/tmp/.keras` when that folder is not writable.
    """
    from keras.src.backend import config

    base = os.path.expanduser(cache_dir or config.keras_home())
    if not os.access(base, os.W_OK):
        base = os.path.join("/tmp", ".keras")
    return os.path.join(base, cache_subdir)


_FETCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _keras_cache_first(name):
    """Keras Applications fetch their weights with `file_utils.get_file`; within
    this context a file already in Keras' cache is used as it is (Keras would
    re-download, and delete it when offline, if its hash differs: a file the user
    put there), and a failed download is a short `WeightsUnavailableError`."""
    from keras.src.utils import file_utils

    fetch = file_utils.get_file

    def get_file(fname=None, origin=None, *args, cache_subdir="datasets", file_hash=None,
                 cache_dir=None, **kwargs):
        folder = keras_cache_folder(cache_subdir, cache_dir)
        path = os.path.join(folder, fname)
        if os.path.isfile(path):
            if file_hash and not file_utils.validate_file(path, file_hash):
                warnings.warn(f"{path} is not the file Keras publishes for {name} (its hash "
                              "differs): loading it as it is.", stacklevel=2)
            return path
        try:
            return fetch(fname, origin, *args, cache_subdir=cache_subdir,
                         file_hash=file_hash, cache_dir=cache_dir, **kwargs)
        except Exception as error:  # noqa: BLE001 (Keras raises a bare Exception)
            # Keras: "URL fetch failure on <origin>: <code> -- <reason>"
            reason = (str(error).rsplit(" -- ", 1)[-1].strip() or type(error).__name__)[:160]
            raise WeightsUnavailableError(
                f"ImageNet weights for {name} are not available: Keras looked for {fname} "
                f"in its cache {folder} (~/.keras/models, or $KERAS_HOME/models) and "
                f"could not download it from {origin} ({reason}).",
                TRAINING_REMEDY.format(name=name)) from None

    with _FETCH_LOCK:
        file_utils.get_file = get_file
        try:
            yield
        finally:
            file_utils.get_file = fetch


def load_source(path):
    """The model a weights path names: a `.keras` file or a run folder's
    `model.keras` (loaded without compiling), or None for a weights file."""
    path = os.fspath(path)
    if os.path.isdir(path):
        model_path = os.path.join(path, "model.keras")
        if not os.path.isfile(model_path):
            raise FileNotFoundError(f"weights {path}: a folder without model.keras; give a "
                                    "keras-dml run folder, a .keras or a .weights.h5 file.")
        path = model_path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weights {path}: no such file or folder.")
    if path.endswith(".h5"):
        return None
    if not path.endswith(".keras"):
        raise ValueError(f"weights {path}: expected a .weights.h5 / .h5 weights file, a "
                         ".keras model or a keras-dml run folder.")
    import keras_dml.layers  # noqa: F401 (registers the layers the file may hold)
    import keras_dml.models  # noqa: F401

    hub_backbones.import_keras_hub_for(path)
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as error:  # noqa: BLE001 (a file of another Keras or package)
        raise ValueError(f"weights {path}: cannot load it as a Keras model ({error}).") \
            from None


def load_weights(backbone, path, source=None):
    """Loads `path` (see `get`) into `backbone`; `source`: its model when already
    loaded (`load_source(path)`).

    A weights file goes to the Keras application (or to the whole backbone for
    cnn3 / convnet); from a model, each layer of `backbone` that has weights takes
    those of the layer of the same name (the application is one such layer, or the
    saved model itself when it is that application).
    """
    if source is None:
        source = load_source(path)
    if source is None:
        target = _application_layer(backbone) or backbone
        try:
            target.load_weights(os.fspath(path))
        except Exception as error:  # noqa: BLE001 (h5py / Keras errors on a wrong file)
            raise ValueError(f"weights {path} do not fit {backbone.name}: {error}") from None
        return
    copy_layer_weights(source, backbone, [layer.name for layer in backbone.layers
                                          if layer.weights], path)


def _application_layer(backbone):
    return next((layer for layer in backbone.layers
                 if isinstance(layer, keras.Model) and layer.weights), None)


def copy_layer_weights(source, target, names, origin):
    """Sets each named layer of `target` to the weights of `source`'s layer of that
    name (or `source` itself when it bears the name).

    Raises:
        ValueError: a layer missing from `source`, or weights of other shapes.
    """
    for name in names:
        layer = target.get_layer(name)
        found = source if source.name == name else next(
            (candidate for candidate in source.layers if candidate.name == name), None)
        if found is None:
            raise ValueError(f"weights {origin}: its model {source.name!r} has no layer "
                             f"{name!r} (is it a model of {target.name}?).")
        values = found.get_weights()
        shapes = [tuple(v.shape) for v in layer.get_weights()]
        if [tuple(v.shape) for v in values] != shapes:
            raise ValueError(f"weights {origin}: layer {name!r} holds weights of shapes "
                             f"{[tuple(v.shape) for v in values][:4]}..., {target.name} "
                             f"needs {shapes[:4]}...")
        layer.set_weights(values)


# Low, mid and high levels of keras.applications.ResNet50: the last block of stages 3-5.
RESNET50_LEVELS = ("conv3_block4_out", "conv4_block6_out", "conv5_block3_out")


def multi_level_embedder(backbone, layer_names, dims=512, pooling="avg", normalize_levels=True,
                         model_class=None, name=None):
    """An embedding model from the named layers of any functional Keras backbone.

    Args:
        backbone: a functional `keras.Model` (e.g. `keras.applications.ResNet50(
            weights=None, include_top=False, input_shape=(224, 224, 3))`).
        layer_names: the layers whose outputs are the levels, low to high, e.g.
            `RESNET50_LEVELS`. `backbone.summary()` lists the names.
        dims: embedding size per level: an int for every level, or one per level.
            Defaults to 512.
        pooling, normalize_levels: as for `keras_dml.layers.MultiLevelEmbedding`.
        model_class: the model to build. Defaults to `keras_dml.models.DMLModel`.
        name: model name. Defaults to None.

    Returns:
        `model_class(backbone.input, embeddings)` with embeddings of size sum(dims).

    Examples:

    >>> backbone = keras.applications.ResNet50(weights=None, include_top=False,
    ...                                        input_shape=(224, 224, 3))
    >>> model = keras_dml.backbones.multi_level_embedder(backbone, RESNET50_LEVELS, 512)
    >>> model.compile("adam", loss=keras_dml.losses.InstanceCrossEntropy())
    """
    if isinstance(layer_names, str) or not len(layer_names):
        raise ValueError(f"layer_names must be a non-empty list of layer names, got "
                         f"{layer_names!r}.")
    if isinstance(dims, (int, float)):
        dims = [int(dims)] * len(layer_names)
    if len(dims) != len(layer_names):
        raise ValueError(f"dims has {len(dims)} entries but layer_names has "
                         f"{len(layer_names)}: give one size per level or a single int.")
    known = {layer.name for layer in getattr(backbone, "layers", [])}
    missing = [n for n in layer_names if n not in known]
    if missing:
        raise ValueError(
            f"Backbone {getattr(backbone, 'name', backbone)!r} has no layer(s) {missing}; "
            f"its layers include {sorted(known)[-8:] if known else 'none'} "
            "(see backbone.summary() for all names)."
        )
    try:
        maps = [backbone.get_layer(n).output for n in layer_names]
    except (AttributeError, ValueError) as error:
        raise ValueError(
            f"Cannot read the outputs of layers {list(layer_names)}: the backbone must be a "
            f"functional keras.Model ({error})."
        ) from None
    from keras_dml.layers import MultiLevelEmbedding

    embeddings = MultiLevelEmbedding(dims, pooling=pooling, normalize_levels=normalize_levels,
                                     name="multi_level_embedding")(maps)
    if model_class is None:
        from keras_dml.models import DMLModel as model_class
    return model_class(backbone.input, embeddings, name=name)
