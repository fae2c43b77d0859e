"""Backend-neutral helpers of the layer tests (`test_batch_norm.py`, `test_convolution.py`,
`test_pooling.py`, `test_backbones.py`): a keras_dml layer beside the Keras layer it
re-computes, with the same weights, differentiated by the running backend's autodiff.
NumPy in, NumPy out."""

import keras
import numpy as np

from keras_dml.backend.gradients import value_and_gradient


def numpy(value):
    """A backend tensor (or variable) as a NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(value))


def keras_and_ours(keras_layer, our_layer, input_shape):
    """The two layers built for `input_shape` with the same seeded weights (variances
    positive), Keras' first."""
    rng = np.random.default_rng(1)
    for layer in (keras_layer, our_layer):
        layer.build(input_shape)
    weights = [rng.uniform(0.5, 2.0, size=w.shape).astype("float32") if "variance" in w.path
               else rng.normal(size=w.shape).astype("float32") for w in keras_layer.weights]
    for layer in (keras_layer, our_layer):
        layer.set_weights(weights)
    return keras_layer, our_layer


def stateless_gradients(layer, x, objective, **call_kwargs):
    """One stateless call of `layer` on `x`: (outputs, [gradient of sum(objective(y)) for x,
    then for each trainable weight], the new non-trainable values)."""
    trainable = [numpy(w) for w in layer.trainable_weights]
    moving = [w.value for w in layer.non_trainable_weights]
    shapes = [x.shape] + [w.shape for w in trainable]
    sizes = [int(np.prod(shape)) for shape in shapes]
    packed = np.concatenate([x.ravel()] + [w.ravel() for w in trainable])

    def function(flat):
        parts, start = [], 0
        for size, shape in zip(sizes, shapes):
            parts.append(keras.ops.reshape(flat[start:start + size], shape))
            start += size
        y, new_moving = layer.stateless_call(parts[1:], moving, parts[0], **call_kwargs)
        return objective(y), (y, new_moving)

    _, (y, new_moving), gradient = value_and_gradient(
        function, keras.ops.convert_to_tensor(packed))
    gradients = np.split(numpy(gradient), np.cumsum(sizes)[:-1])
    return numpy(y), [g.reshape(shape) for g, shape in zip(gradients, shapes)], \
        [numpy(m) for m in new_moving]


def assert_saves_and_loads(layer, input_shape, tmp_path):
    """A model of `layer` alone saved to a `.keras` file loads back with the same class
    and the same outputs."""
    inputs = keras.Input(input_shape)
    model = keras.Model(inputs, layer(inputs))
    path = str(tmp_path / "layer.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.get_layer(layer.name), type(layer))
    x = np.random.default_rng(2).normal(size=(2,) + tuple(input_shape)).astype("float32")
    np.testing.assert_array_equal(numpy(loaded(x)), numpy(model(x)))


def relu_then_pool(model, x, training):
    """`model`'s layers applied in order, except that each max pooling followed by a ReLU
    runs after it (the textbook order: conv, batch norm, ReLU, pool)."""
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    i = 0
    while i < len(layers):
        layer = layers[i]
        if (isinstance(layer, keras.layers.MaxPooling2D) and i + 1 < len(layers)
                and isinstance(layers[i + 1], keras.layers.ReLU)):
            x = layer(layers[i + 1](x, training=training), training=training)
            i += 2
        else:
            x = layer(x, training=training)
            i += 1
    return x
