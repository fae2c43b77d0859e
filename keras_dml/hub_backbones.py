"""KerasHub vision backbones (DINOv2, DINOv3, ViT, CLIP, SigLIP) as embedding networks.

`backbone("hub:PRESET", input_shape)` loads a KerasHub preset (a KerasHub name such
as `dinov2_small`, an `hf://` or `kaggle://` handle, or a local preset folder, as
`keras_hub.models.Backbone.from_preset` reads them) and returns a model from raw
pixels in [0, 255] to one feature vector per image:

    images -> the preset's ImageConverter (resize to the tower's size, rescale,
              normalise: the preprocessing recorded with the preset)
           -> the vision tower (of a CLIP or SigLIP preset: its vision encoder)
           -> TokenPooling (class token, mean or GeM of the patch tokens), or
              SigLIP's own attention-pooling head

The preprocessing is inside the model, so an exported SavedModel takes image bytes
as for any keras_dml model, and the input pipeline must not normalise. Install
KerasHub with `pip install "keras_dml[hub]"`.
"""

import dataclasses
import importlib.util
import os
import re

import keras

from keras_dml.backbone_families import HUB_POOLINGS as POOLINGS
from keras_dml.backbone_families import HUB_PREFIX, is_hub

__all__ = ["DEFAULT_POOLING", "HUB_PREFIX", "POOLINGS", "HubPresetError", "Tower", "backbone",
           "embedder", "from_network", "import_keras_hub_for", "is_hub", "layer_decay_scales",
           "preset_of", "tower"]

#: The pooling used when none is given: the class token where the tower has one (the
#: DINO and ViT retrieval papers' choice), SigLIP's own head where it has none.
DEFAULT_POOLING = "cls"


class HubPresetError(FileNotFoundError):
    """A KerasHub preset that cannot be loaded here (not downloadable, not a folder)."""


def preset_of(name):
    """The preset of a "hub:PRESET" name, checked non-empty."""
    preset = name[len(HUB_PREFIX):] if is_hub(name) else None
    if not preset:
        raise ValueError(f"Expected a backbone 'hub:PRESET' (a KerasHub preset name, hf:// "
                         f"or kaggle:// handle, or a preset folder), got {name!r}.")
    return preset


@dataclasses.dataclass
class Tower:
    """A vision tower and how to read its output.

    Attributes:
        network: Model from converted images to tokens `(batch, tokens, dim)`, or to
            pooled vectors when `pooled` is True.
        family: KerasHub's class name of the loaded backbone.
        prefix_tokens: Tokens before the patch tokens (class and register tokens).
        head: The tower's own pooled model (SigLIP), or None.
    """

    network: keras.Model
    family: str
    prefix_tokens: int
    head: keras.Model = None


def _keras_hub():
    if importlib.util.find_spec("keras_hub") is None:
        raise ImportError("A 'hub:' backbone needs KerasHub: pip install \"keras_dml[hub]\".")
    import keras_hub

    return keras_hub


def import_keras_hub_for(keras_path):
    """Imports KerasHub when the `.keras` file at `keras_path` holds its layers, so that
    `keras.saving.load_model` finds their registered classes.

    Raises:
        ImportError: The file needs KerasHub and it is not installed.
    """
    import zipfile

    try:
        with zipfile.ZipFile(keras_path) as archive:
            needs = b'"keras_hub' in archive.read("config.json")
    except (OSError, KeyError, zipfile.BadZipFile):
        return  # not a readable .keras archive: Keras' own error says so
    if needs:
        try:
            _keras_hub()
        except ImportError:
            raise ImportError(f"{keras_path} holds a KerasHub backbone: pip install "
                              "\"keras_dml[hub]\" to load it.") from None


def _load_preset(preset, load_weights, overrides):
    """`keras_hub.models.Backbone.from_preset` and the preset's `ImageConverter`, with a
    one-line error offline."""
    keras_hub = _keras_hub()
    local = os.path.isdir(os.path.expanduser(preset))
    path = os.path.expanduser(preset) if local else preset
    try:
        network = _backbone_from_preset(keras_hub, path, load_weights, overrides)
        converter = keras_hub.layers.ImageConverter.from_preset(path)
    except _OptionError as error:
        raise ValueError(f"hub:{preset}: {error}") from None
    except Exception as error:  # noqa: BLE001 (KerasHub raises many kinds offline)
        if local:
            raise ValueError(f"hub:{preset}: not a KerasHub preset folder ({error}).") \
                from None
        cache = os.path.expanduser(os.environ.get("KAGGLEHUB_CACHE", "~/.cache/kagglehub"))
        raise HubPresetError(
            f"hub:{preset}: KerasHub could not load this preset ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:160]}). Offline, download it on a machine that "
            f"can (it lands in {cache} or ~/.cache/huggingface), copy the preset folder "
            "here and pass --backbone hub:PATH/TO/FOLDER.") from None
    if converter is None:
        raise ValueError(f"hub:{preset}: the preset has no image converter, so its "
                         "preprocessing is unknown (is it a vision preset?).")
    return network, converter


class _OptionError(Exception):
    """An override the preset's backbone does not take."""


def _backbone_from_preset(keras_hub, path, load_weights, overrides):
    network = keras_hub.models.Backbone.from_preset(path, load_weights=load_weights,
                                                    **overrides)
    ignored = [key for key in overrides if key not in network.get_config()]
    if ignored:
        raise _OptionError(f"{type(network).__name__} has no {' or '.join(ignored)} "
                           "(DINOv2 and DINOv3 towers have drop_path_rate).")
    return network


def tower(network):
    """The vision tower of a loaded KerasHub backbone, and where its patch tokens start."""
    family = type(network).__name__
    encoder = getattr(network, "vision_encoder", None)  # CLIP, SigLIP: image and text
    if encoder is not None:
        network = encoder
    kind = type(network).__name__
    if kind.startswith("SigLIP"):
        norm = next(layer for layer in network.layers if layer.name.endswith("post_layer_norm"))
        tokens = keras.Model(network.inputs, norm.output, name="siglip_tokens")
        return Tower(tokens, family, 0, head=network)
    if kind.startswith(("DINOV2", "DINOV3")):
        return Tower(network, family, 1 + int(network.num_register_tokens))
    if kind.startswith("ViT"):
        return Tower(network, family, int(bool(network.use_class_token)))
    if kind.startswith("CLIP"):
        return Tower(network, family, 1)
    raise ValueError(f"KerasHub backbone {family} is not a vision tower keras_dml knows: "
                     "DINOv2, DINOv3, ViT, CLIP or SigLIP.")


def backbone(name, input_shape, pooling=None, weights=None, drop_path_rate=None):
    """A "hub:PRESET" backbone from raw pixels in [0, 255] to one vector per image.

    Args:
        name: "hub:PRESET" (see the module docstring).
        input_shape: (height, width, 3) of the images the model takes; the preset's
            converter resizes them to the tower's own size. None: that size.
        pooling: One of `POOLINGS`. Defaults to "cls", or "head" for SigLIP (no
            class token).
        weights: None or "preset" (the preset's weights) or "none" (the preset's
            architecture, randomly initialised).
        drop_path_rate: Stochastic depth of DINOv2 / DINOv3 towers while training.
            Defaults to None (the preset's).

    Returns:
        A `keras.Model` named after the tower's family.

    Raises:
        HubPresetError: The preset cannot be downloaded or found.
        ValueError: A bad pooling, input shape or preset.
    """
    preset = preset_of(name)
    if input_shape is not None and (len(input_shape) != 3 or input_shape[-1] != 3):
        raise ValueError(f"hub:{preset} takes colour images (height, width, 3), got input "
                         f"shape {tuple(input_shape)}.")
    if weights not in (None, "preset", "none"):
        raise ValueError(f"weights of a hub: backbone must be 'preset' or 'none', got "
                         f"{weights!r} (fine-tune from a run with --weights RUN on the same "
                         "--backbone).")
    overrides = {} if drop_path_rate is None else {"drop_path_rate": float(drop_path_rate)}
    network, converter = _load_preset(preset, weights != "none", overrides)
    return from_network(network, converter, input_shape, pooling)


def from_network(network, converter, input_shape=None, pooling=None):
    """`backbone` of a KerasHub backbone and image converter already built.

    Args:
        network: A KerasHub DINOv2, DINOv3, ViT, CLIP or SigLIP backbone.
        converter: Its `keras_hub.layers.ImageConverter`.
        input_shape, pooling: As for `backbone`.
    """
    if input_shape is None:
        input_shape = (*(int(side) for side in converter.image_size), 3)
    found = tower(network)
    pooling = pooling or ("head" if found.prefix_tokens == 0 else DEFAULT_POOLING)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}.")
    if pooling == "head" and found.head is None:
        raise ValueError(f"pooling='head': {found.family} has no pooling head of its own; "
                         f"use one of {POOLINGS[:3]}.")
    _freeze_untrainable(found.network)
    _replace_drop_paths(found.network)
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    pixels = converter(inputs)
    if pooling == "head":
        vectors = _call(found.head, pixels)
    else:
        from keras_dml.layers import TokenPooling

        vectors = TokenPooling(pooling, found.prefix_tokens, name="token_pooling")(
            _call(found.network, pixels))
    return keras.Model(inputs, vectors, name=f"hub_{found.family.lower()}")


#: Variables of a tower that keras_dml does not train: DINO's masked-patch token (no
#: gradient from whole images), and DINOv2's position embeddings at the input size,
#: which KerasHub saves through a resize to the preset's size and back (or, when
#: their summed change is negative, not at all), so that a trained copy would not
#: be the one saved.
FROZEN_VARIABLES = ("mask_token", "interpolated_position_embeddings")


def _freeze_untrainable(network):
    for variable in network.weights:
        if variable.path.rsplit("/", 1)[-1] in FROZEN_VARIABLES:
            variable.trainable = False


def _replace_drop_paths(network):
    """Gives each block of a DINOv2 / DINOv3 tower keras_dml's `DropPath` at the rate
    of KerasHub's own drop-path layer, which cannot train: its noise shape is fixed
    when the block is built (without a batch size in a functional model), its draws
    are unseeded (refused in a compiled JAX step), and it scales each sample by its
    uniform draw plus the keep probability, never dropping the branch.

    The tower's config then records a rate of 0, so that a saved model reloads
    without KerasHub's layer (which fails when called without `training=False`):
    drop path acts only in training, a run's summary records its rate, and
    keras_dml trains only towers built from their preset, which get `DropPath` again.
    """
    from keras_dml.layers import DropPath

    replaced = False
    for layer in network._flatten_layers(include_self=False):  # noqa: SLF001 (no public walk)
        found = getattr(layer, "drop_path", None)
        if type(found).__name__.endswith("DropPath") and not isinstance(found, DropPath):
            layer._tracker.unlock()  # noqa: SLF001 (a built block takes no new sub-layer)
            try:
                layer.drop_path = DropPath(found.rate, name=found.name)
            finally:
                layer._tracker.lock()  # noqa: SLF001
            replaced = True
    if replaced:
        network.drop_path_rate = 0.0


def _call(network, pixels):
    """Calls a KerasHub model on images, as a dict where its input is one.

    The call records `training=False`, which a training step's `training=True`
    overrides: otherwise the image converter's resizing layer (whose `training`
    defaults to True) would run the tower in training mode (drop path, dropout)
    whenever the model is called without `training`.
    """
    if isinstance(network.input, dict):
        return network({next(iter(network.input)): pixels}, training=False)
    return network(pixels, training=False)


def embedder(name, pooling=None):
    """A "hub:PRESET" backbone as a zero-shot embedder: raw pixels in [0, 255] at the
    preset's own image size to its pooled features, L2-normalised (the preset's
    weights; `pooling` as for `backbone`)."""
    network = backbone(name, None, pooling=pooling)
    vectors = keras.layers.UnitNormalization(name="l2_normalize")(network.output)
    return keras.Model(network.input, vectors, name=f"{network.name}_zero_shot")


_BLOCK = re.compile(r"(?:layers|transformer_block|encoder_block)_(\d+)/")
_BELOW_BLOCKS = ("embedding", "cls_token", "class_token", "register_tokens", "pre_layer_norm")


def layer_decay_scales(variables, decay):
    """Layer-wise learning-rate decay, as the BEiT and MAE fine-tuning recipes use it:
    per variable of a KerasHub tower, `decay ** (depth from the top)`.

    The encoder blocks are numbered from the top: the last block's variables get
    `decay`, the one below `decay ** 2`, ...; the patch, position and class
    embeddings (below the first block) `decay ** (blocks + 1)`; whatever comes after
    the blocks (the final norm, a pooling head, keras_dml's pooling) 1.

    Raises:
        ValueError: No variable belongs to an encoder block.
    """
    decay = float(decay)
    blocks = [_BLOCK.search(variable.path) for variable in variables]
    numbers = sorted({int(found.group(1)) for found in blocks if found})
    if not numbers:
        raise ValueError("layer decay: no variable belongs to a transformer encoder block "
                         "(it applies to hub:PRESET towers).")
    depth = {number: len(numbers) - rank for rank, number in enumerate(numbers)}
    scales = []
    for variable, found in zip(variables, blocks):
        if found:
            scales.append(decay ** depth[int(found.group(1))])
        elif any(word in variable.path for word in _BELOW_BLOCKS):
            scales.append(decay ** (len(numbers) + 1))
        else:
            scales.append(1.0)
    return scales
