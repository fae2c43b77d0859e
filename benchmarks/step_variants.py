"""The main job's training step with one of its layer forms swapped, for the worker.

`main_job_variant(layers=...)` is `benchmarks.keras_systems.main_job_step` (the default
`keras-dml train` model, MultiSimilarity, `fit` on the C x k NumPy stream) with `cnn3`
built from other layers than keras_dml's per-backend forms, so one run can time each
form against the default on one machine:

- "keras_dml": the package's cnn3 (`ShiftedConv2D`, `FusedBatchNormalization`,
  `TiledMaxPooling2D`, pooling before ReLU);
- "stock_conv", "stock_bn", "stock_pool": Keras' `Conv2D`, `BatchNormalization` or
  `MaxPooling2D` in place of that one form; "relu_first": ReLU before pooling;
- "stock": all of Keras' layers, ReLU before pooling (the plain-Keras network);
- "channels_first": the stock network computed on channels-first tensors (the images
  transposed once at the input).

The Keras backend is the worker's (`KERAS_BACKEND` in its environment).
"""

import functools

import keras

from keras_dml import backbones, layers

__all__ = ["LAYER_FORMS", "main_job_variant"]

#: (convolution, batch norm, pooling, pool before ReLU, channels-first) of each form
LAYER_FORMS = {
    "keras_dml": (layers.ShiftedConv2D, layers.FusedBatchNormalization,
                  layers.TiledMaxPooling2D, True, False),
    "stock_conv": (keras.layers.Conv2D, layers.FusedBatchNormalization,
                   layers.TiledMaxPooling2D, True, False),
    "stock_bn": (layers.ShiftedConv2D, keras.layers.BatchNormalization,
                 layers.TiledMaxPooling2D, True, False),
    "stock_pool": (layers.ShiftedConv2D, layers.FusedBatchNormalization,
                   keras.layers.MaxPooling2D, True, False),
    "relu_first": (layers.ShiftedConv2D, layers.FusedBatchNormalization,
                   layers.TiledMaxPooling2D, False, False),
    "stock": (keras.layers.Conv2D, keras.layers.BatchNormalization, keras.layers.MaxPooling2D,
              False, False),
    "channels_first": (keras.layers.Conv2D, keras.layers.BatchNormalization,
                       keras.layers.MaxPooling2D, False, True),
}


def _cnn3(input_shape, filters=64, blocks=3, name="cnn3", form="keras_dml"):
    """`backbones.cnn3` built from the layers of `LAYER_FORMS[form]`."""
    conv, norm, pool, pool_first, channels_first = LAYER_FORMS[form]
    image_format = "channels_first" if channels_first else "channels_last"
    inputs = keras.Input(shape=input_shape, name="images")
    x = keras.layers.Permute((3, 1, 2))(inputs) if channels_first else inputs
    for block in range(blocks):
        x = conv(filters, 3, padding="same", data_format=image_format, name=f"conv{block}")(x)
        x = norm(axis=1 if channels_first else -1, name=f"bn{block}")(x)
        pooling = pool(data_format=image_format, name=f"pool{block}")
        relu = keras.layers.ReLU(name=f"relu{block}")
        x = relu(pooling(x)) if pool_first else pooling(relu(x))
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name=name)


def main_job_variant(layers="keras_dml", loss="MultiSimilarity", steps=20, jit_compile=None):
    """`keras_systems.main_job_step` with cnn3 of the `layers` form (`LAYER_FORMS`);
    `jit_compile` None: `keras-dml train`'s choice.

    Raises:
        ValueError: an unknown `layers` form.
    """
    from benchmarks.keras_systems import main_job_step

    if layers not in LAYER_FORMS:
        raise ValueError(f"layers must be one of {sorted(LAYER_FORMS)}, got {layers!r}.")
    backbones.cnn3 = functools.partial(_cnn3, form=layers)  # this worker's process only
    step, facts = main_job_step(loss=loss, steps=steps, jit_compile=jit_compile)
    return step, {**facts, "layers": layers}
