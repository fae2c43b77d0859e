"""An empty batch (N = 0) has no pair: every loss gives 0 and a zero gradient."""

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import losses

ARGUMENTS = {
    "ProxyAnchor": {"num_classes": 3}, "ProxyNCA": {"num_classes": 3},
    "SoftTriple": {"num_classes": 3, "centers_per_class": 2},
    "NormalizedSoftmax": {"num_classes": 3}, "ArcFace": {"num_classes": 3},
    "CosFace": {"num_classes": 3}, "SubCenterArcFace": {"num_classes": 3},
}


@pytest.mark.parametrize("name", losses.LOSSES)
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_empty_batch_gives_zero_loss_and_zero_gradient(name, mode):
    loss = getattr(losses, name)(**ARGUMENTS.get(name, {}))
    labels = np.zeros((0, 2), "float32") if name == "LogRatio" else np.zeros(0, "int32")
    embeddings = tf.zeros((0, 4))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(labels, x)
        return value, tape.gradient(value, x)

    if mode == "function":
        step = tf.function(step)
    value, gradient = step(embeddings)
    assert value.shape == () and float(value) == 0.0
    assert gradient is not None and tuple(gradient.shape) == (0, 4)
