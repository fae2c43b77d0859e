"""Image decoding and the papers' train / test preprocessing, in pure TensorFlow ops.

The module imports without TensorFlow (a `Preprocessing` is also a saved model's
config); its image operations then raise `keras_dml.backend.TensorFlowRequiredError`.

Everything here is graph-safe (no `py_function`), so `Preprocessing.eval` can
run inside a SavedModel and reproduce evaluation exactly.

Reference: Wang et al., "Instance Cross Entropy for Deep Metric Learning"
(section 4.1: resize to 256x256, random crop 227 + horizontal mirror for
training, centre crop for testing).
"""

import dataclasses

import keras
import numpy as np

from keras_dml.backend.lazy_tensorflow import LazyTensorFlow
from keras_dml.hyperparameters import integer_at_least

__all__ = ["Preprocessing", "decode_image", "default_preprocessing", "register_normalization"]

# A `Preprocessing` is plain data on every backend (a saved model's config holds one);
# decoding and transforming images are TensorFlow ops.
tf = LazyTensorFlow("keras_dml.data.Preprocessing's image ops (TensorFlow's decoders)")

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_CAFFE_BGR_MEAN = (103.939, 116.779, 123.68)
CROPS = ("random", "random_resized")
# torchvision's RandomResizedCrop defaults: the crop's share of the image area and
# its aspect ratio (width / height).
RESIZED_CROP_AREA = (0.08, 1.0)
RESIZED_CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)


# Each normalisation is x * scale + offset with float32 constants computed
# here: graph rewrites (division -> reciprocal multiply) then cannot make a
# SavedModel's output differ from eager evaluation by an ulp.
def _affine(scale, offset):
    scale = np.asarray(scale, np.float32)
    offset = np.asarray(offset, np.float32)
    return lambda x: x * scale + offset


_unit = _affine(1.0 / 255.0, 0.0)
_symmetric = _affine(1.0 / 127.5, -1.0)
_imagenet = _affine(
    1.0 / (255.0 * np.asarray(_IMAGENET_STD)),
    -np.asarray(_IMAGENET_MEAN) / np.asarray(_IMAGENET_STD),
)


def _caffe(x):
    return tf.reverse(x, axis=[-1]) - np.asarray(_CAFFE_BGR_MEAN, np.float32)


def _identity(x):
    return x


_NORMALIZATIONS = {
    "unit": _unit,
    "symmetric": _symmetric,
    "imagenet": _imagenet,
    "caffe": _caffe,
    "none": _identity,
}


def register_normalization(name, fn):
    """Adds a backbone-specific normalisation usable as `Preprocessing(normalization=name)`.

    Args:
        name: The name stored in the config.
        fn: Pure-TF function mapping float32 pixels in [0, 255] `(..., C)` to
            the backbone's input range.

    Examples:

    >>> register_normalization("halves", lambda x: x / 510.0)
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}.")
    _NORMALIZATIONS[str(name)] = fn


def default_preprocessing(image_size, channels=3, normalization="unit", crop="random"):
    """The `Preprocessing` `keras-dml train` gives image files for a model input of
    `image_size`: resize to `image_size * 256 / 224` (the papers' 256 for 224), crop
    `image_size`; `normalization="none"` for a model that rescales inside (Keras
    Applications), else `"unit"` ([0, 1])."""
    return Preprocessing(image_size=image_size, resize_size=round(image_size * 256 / 224),
                         channels=channels, normalization=normalization, crop=crop)


def decode_image(encoded_bytes, channels=3):
    """Decodes JPEG / PNG / GIF / BMP bytes to a uint8 `(H, W, channels)` image.

    Graph-safe: `tf.io.decode_image` with `expand_animations=False` (a GIF
    gives its first frame) and a fixed channel count (grey images are
    expanded to RGB when `channels=3`).

    Args:
        encoded_bytes: Scalar string tensor.
        channels: 1 or 3. Defaults to 3.

    Returns:
        uint8 tensor `(H, W, channels)` with a static channel dimension.
    """
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3; got {channels}.")
    image = tf.io.decode_image(
        encoded_bytes, channels=channels, expand_animations=False, dtype=tf.uint8
    )
    image.set_shape([None, None, channels])
    return image


@keras.saving.register_keras_serializable(package="keras_dml")
@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """Train and evaluation transforms of the metric learning papers.

    Evaluation: resize to `resize_size x resize_size`, centre crop
    `image_size`, normalise. Training: resize, random crop `image_size`,
    random horizontal flip, normalise. Inputs are uint8 (or float in
    [0, 255]) images `(H, W, C)` or batches `(B, H, W, C)`; outputs float32.

    Args:
        image_size: Crop size. Defaults to 224 (ICE uses 227).
        resize_size: Side after resizing. Defaults to 256.
        channels: Output channels, 1 or 3. Defaults to 3.
        normalization: `"unit"` ([0, 1]), `"symmetric"` ([-1, 1]),
            `"imagenet"` (torchvision mean / std), `"caffe"` (BGR mean
            subtraction), `"none"` ([0, 255]) or a name registered with
            `register_normalization`. Defaults to `"unit"`.
        resize_mode: `"stretch"` (ICE: resize to a square) or `"pad"`
            (weighted contrastive paper: keep the aspect ratio and zero-pad).
            Defaults to `"stretch"`.
        flip: Random horizontal flip in `train`. Defaults to `True`.
        crop: The training crop: `"random"` (an `image_size` square of the
            resized image, ICE) or `"random_resized"` (a random part of the
            image as given, 8-100 % of its area with aspect ratio 3/4-4/3,
            resized to `image_size`: torchvision's `RandomResizedCrop`, as in
            the Proxy Anchor code). Defaults to `"random"`.

    Examples:

    >>> prep = Preprocessing(image_size=227)
    >>> prep.eval(tf.zeros([300, 400, 3], tf.uint8)).shape
    TensorShape([227, 227, 3])
    """

    image_size: int = 224
    resize_size: int = 256
    channels: int = 3
    normalization: str = "unit"
    resize_mode: str = "stretch"
    flip: bool = True
    crop: str = "random"

    def __post_init__(self):
        for field in ("image_size", "resize_size"):
            integer_at_least(field, getattr(self, field), 1, strict=True)
        if self.image_size > self.resize_size:
            raise ValueError(
                f"image_size ({self.image_size}) must not exceed resize_size "
                f"({self.resize_size})."
            )
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3; got {self.channels!r}.")
        if self.normalization not in _NORMALIZATIONS:
            raise ValueError(
                f"Unknown normalization {self.normalization!r}; expected one of "
                f"{sorted(_NORMALIZATIONS)} (add one with register_normalization)."
            )
        if self.crop not in CROPS:
            raise ValueError(f"crop must be one of {CROPS}; got {self.crop!r}.")
        if self.resize_mode not in ("stretch", "pad"):
            raise ValueError(
                f"resize_mode must be 'stretch' or 'pad'; got {self.resize_mode!r}."
            )

    def to_dict(self):
        """The constructor arguments as a JSON-friendly dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, config):
        """Inverse of `to_dict`."""
        unknown = set(config) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown Preprocessing keys: {sorted(unknown)}.")
        return cls(**config)

    get_config = to_dict
    from_config = from_dict

    def evaluation_dict(self):
        """The fields the evaluation transform (`eval`) reads, as a JSON-friendly dict:
        `to_dict` without the training augmentation (`flip`, `crop`)."""
        return {key: value for key, value in self.to_dict().items()
                if key not in ("flip", "crop")}

    def describe(self):
        """The evaluation transform in words: "resize 73 x 73, centre crop 64, ..."."""
        resize = "resize and zero-pad" if self.resize_mode == "pad" else "resize"
        return (f"{resize} to {self.resize_size} x {self.resize_size}, centre crop "
                f"{self.image_size}, {self.channels} channel(s), normalization="
                f"{self.normalization!r}")

    @property
    def output_shape(self):
        """`(image_size, image_size, channels)`."""
        return (self.image_size, self.image_size, self.channels)

    def eval(self, image):
        """Resize, centre crop and normalise (deterministic)."""
        image = self._resize(self._as_float(image))
        offset = (self.resize_size - self.image_size) // 2
        end = offset + self.image_size
        return self.normalize(image[..., offset:end, offset:end, :])

    def train(self, image, seed=None):
        """Resize, random crop, random horizontal flip and normalise (with
        `crop="random_resized"`: a random resized crop of the image as given,
        then the flip).

        Args:
            image: uint8 `(H, W, C)` or `(B, H, W, C)`; each image of a batch
                gets its own crop and flip.
            seed: Optional stateless seed, int tensor of shape `(2,)`; the
                same seed gives the same augmentation. Defaults to `None`
                (TensorFlow's global random state).

        Returns:
            float32 `(..., image_size, image_size, channels)`.
        """
        image = self._as_float(image)
        if self.crop == "random":
            image = self._resize(image)
        if image.shape.rank == 4:
            if seed is None:
                image = tf.map_fn(self._augment, image)
            else:
                seeds = tf.random.experimental.stateless_split(
                    tf.cast(seed, tf.int64), tf.shape(image, tf.int64)[0]
                )
                image = tf.map_fn(
                    lambda args: self._augment(args[0], args[1]),
                    (image, seeds),
                    fn_output_signature=tf.float32,
                )
        else:
            image = self._augment(image, seed)
        return self.normalize(image)

    def resized(self, image):
        """The deterministic first half of `train` with `crop="random"`: one uint8 (or
        float) image `(H, W, C)` as float32 `(resize_size, resize_size, channels)`,
        which `train_from_resized` completes (together equal to `train`)."""
        return self._resize(self._as_float(image))

    def train_from_resized(self, image, seed=None):
        """`train`'s random crop, flip and normalisation of one `resized` image."""
        if self.crop != "random":
            raise ValueError("train_from_resized applies to crop='random' only; "
                             f"this Preprocessing crops {self.crop!r}.")
        return self.normalize(self._augment(image, seed))

    def _augment(self, image, seed=None):
        size = [self.image_size, self.image_size, self.channels]
        if seed is None and self.crop == "random":
            image = tf.image.random_crop(image, size)
            return tf.image.random_flip_left_right(image) if self.flip else image
        if seed is None:
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int64)
        seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
        if self.crop == "random_resized":
            image = self._random_resized_crop(image, seeds[0])
        else:
            image = tf.image.stateless_random_crop(image, size, seed=seeds[0])
        if self.flip:
            image = tf.image.stateless_random_flip_left_right(image, seed=seeds[1])
        return image

    def _random_resized_crop(self, image, seed):
        """A random box (area and aspect ratio as torchvision's, the whole image
        when 10 draws fail) resized to `image_size`."""
        begin, box_size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            seed=seed, min_object_covered=0.0, aspect_ratio_range=RESIZED_CROP_RATIO,
            area_range=RESIZED_CROP_AREA, max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        crop = tf.slice(image, begin, box_size)
        return tf.image.resize(crop, [self.image_size, self.image_size])

    def _as_float(self, image):
        image = tf.convert_to_tensor(image)
        if image.shape.rank not in (3, 4):
            raise ValueError(
                "Preprocessing expects an image (H, W, C) or a batch "
                f"(B, H, W, C); got shape {image.shape}."
            )
        channels = image.shape[-1]
        image = tf.cast(image, tf.float32)
        if channels == self.channels:
            return image
        if channels == 1 and self.channels == 3:
            return tf.image.grayscale_to_rgb(image)
        if channels == 3 and self.channels == 1:
            return tf.image.rgb_to_grayscale(image)
        raise ValueError(
            f"Images have {channels} channels but Preprocessing(channels="
            f"{self.channels}) expects 1 or 3 (got shape {image.shape})."
        )

    def _resize(self, image):
        size = [self.resize_size, self.resize_size]
        if self.resize_mode == "pad":
            return tf.image.resize_with_pad(image, *size)
        return tf.image.resize(image, size)

    def normalize(self, image):
        """The normalisation alone: float pixels in [0, 255] to the model's range."""
        return tf.cast(_NORMALIZATIONS[self.normalization](image), tf.float32)
