"""`AffineJitter`: the random shift, rotation and zoom of training batches, drawn per
image from the seed and the batch's step alone, in tf.data or on NumPy batches."""

import dataclasses
import functools
import math

import keras
import numpy as np

from keras_dml import backend
from keras_dml.backend.lazy_tensorflow import LazyTensorFlow
from keras_dml.hyperparameters import below_one, integer_at_least, non_negative

__all__ = ["AffineJitter"]

tf = LazyTensorFlow("keras_dml.data.AffineJitter on tf.data batches")

# Mixed into the seed so the jitter's draws are not the crops' or the sampler's.
_STREAM_TAG = 0x6A177E5


@dataclasses.dataclass(frozen=True)
class AffineJitter:
    """A random affine jitter of each image of a batch: one resampling (bilinear,
    empty space filled with 0) by a shift, a rotation and a zoom about the centre.

    Each image draws its own shift (each axis uniform in `[-shift, shift]` pixels),
    angle (uniform in `[-rotation, rotation]` degrees) and zoom (the sampled area
    scaled by a factor uniform in `[1 - scale, 1 + scale]`). The draws of a batch
    depend on `seed` and the batch's `step` alone: the same seed gives the same
    batches run after run, a resumed run the uninterrupted one's, whatever order
    tf.data's parallel map runs batches in. Called on a `tf.Tensor` (inside tf.data,
    on any Keras backend) it runs TensorFlow's stateless ops; on a NumPy batch, Keras'
    `affine_transform` of the running backend (one compiled program on JAX), with
    NumPy's draws: the two roads draw differently, each reproducibly.

    Args:
        shift: Largest translation, in pixels. Defaults to 0.
        rotation: Largest rotation, in degrees. Defaults to 0.
        scale: Largest zoom, a fraction in [0, 1). Defaults to 0.
        seed: Integer seed >= 0. Defaults to 0.

    Examples:

    >>> jitter = AffineJitter(shift=2.0, rotation=10.0, seed=0)
    >>> x = np.ones((4, 16, 16, 1), "float32")
    >>> jitter(x, step=0).shape
    (4, 16, 16, 1)
    >>> bool(np.array_equal(jitter(x, step=0), jitter(x, step=0)))
    True

    In a tf.data stream (image files, on any backend), as a `map_fn` with a step:

    >>> batches = keras_dml.data.class_balanced_batches(  # doctest: +SKIP
    ...     files, 8, 4, seed=0, map_fn=lambda x, y, step: (jitter(x, step), y))
    """

    shift: float = 0.0
    rotation: float = 0.0
    scale: float = 0.0
    seed: int = 0

    def __post_init__(self):
        non_negative("AffineJitter: shift", self.shift)
        non_negative("AffineJitter: rotation", self.rotation)
        below_one("AffineJitter: scale", self.scale)
        integer_at_least("AffineJitter: seed", self.seed, 0, strict=True)

    @property
    def active(self):
        """Whether any of shift, rotation and scale is above 0."""
        return bool(self.shift or self.rotation or self.scale)

    def __call__(self, images, step):
        """The batch `images` `(B, H, W, C)` jittered, float32, of the same type (a
        `tf.Tensor` or a NumPy array); `step` (the batch's index in its stream) keys
        the draws."""
        if len(images.shape) != 4:
            raise ValueError(f"AffineJitter takes a batch of images (B, H, W, C), got shape "
                             f"{tuple(images.shape)}.")
        if isinstance(images, np.ndarray):
            return self.numpy_batch(images, step)
        return self.tensorflow_batch(images, step)

    def tensorflow_batch(self, images, step):
        """`__call__` in TensorFlow ops (graph-safe: a tf.data map on any backend)."""
        images = tf.cast(tf.convert_to_tensor(images), tf.float32)
        shape = tf.shape(images)
        key = tf.stack([tf.constant(self._stream_seed, tf.int64), tf.cast(step, tf.int64)])
        draws = tf.random.stateless_uniform(tf.stack([shape[0], 4]), seed=key,
                                            minval=-1.0, maxval=1.0)
        rows = self.transforms(draws, tf.cast(shape[1], tf.float32),
                               tf.cast(shape[2], tf.float32), tf.experimental.numpy)
        return tf.raw_ops.ImageProjectiveTransformV3(
            images=images, transforms=tf.cast(rows, tf.float32), output_shape=shape[1:3],
            fill_value=0.0, interpolation="BILINEAR", fill_mode="CONSTANT")

    def numpy_batch(self, images, step):
        """`__call__` on a NumPy batch, through Keras' ops of the running backend."""
        images = np.asarray(images, np.float32)
        draws = np.random.default_rng([self._stream_seed, int(step)]).uniform(
            -1.0, 1.0, (len(images), 4))
        rows = self.transforms(draws, images.shape[1], images.shape[2], np)
        transform = _keras_affine_transform(backend.name())
        return keras.ops.convert_to_numpy(transform(images, rows.astype(np.float32)))

    def transforms(self, draws, height, width, xp):
        """The projective transforms `(B, 8)` (TensorFlow's convention: output pixel
        `(x, y)` samples input `(a0 x + a1 y + a2, b0 x + b1 y + b2)`) of the draws
        `(B, 4)` in [-1, 1] (angle, zoom, x and y shift), in the array module `xp`
        (NumPy or `tf.experimental.numpy`)."""
        angle = draws[:, 0] * (self.rotation * math.pi / 180.0)
        zoom = 1.0 + draws[:, 1] * self.scale
        shift_x, shift_y = draws[:, 2] * self.shift, draws[:, 3] * self.shift
        cos, sin = zoom * xp.cos(angle), zoom * xp.sin(angle)
        centre_x, centre_y = (width - 1.0) / 2.0, (height - 1.0) / 2.0
        offset_x = centre_x - cos * centre_x + sin * centre_y - shift_x
        offset_y = centre_y - sin * centre_x - cos * centre_y - shift_y
        zero = xp.zeros_like(angle)
        return xp.stack([cos, -sin, offset_x, sin, cos, offset_y, zero, zero], axis=1)

    @functools.cached_property
    def _stream_seed(self):
        return int(np.random.SeedSequence([int(self.seed), _STREAM_TAG]).generate_state(1)[0])


@functools.cache
def _keras_affine_transform(backend_name):
    """Keras' `affine_transform` (bilinear, filled with 0) of the running backend, as one
    program compiled per input shape on JAX (op by op it is many times slower)."""

    def transform(images, rows):
        return keras.ops.image.affine_transform(images, rows, interpolation="bilinear",
                                                fill_mode="constant", fill_value=0.0)

    if backend_name != "jax":
        return transform
    import jax

    return jax.jit(transform)
