"""An empty batch (N = 0) has no pair: every loss gives 0 and a zero gradient."""

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import losses
from keras_dml.losses.registry import ENTRIES


@pytest.mark.parametrize("name", losses.LOSSES)
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_empty_batch_gives_zero_loss_and_zero_gradient(name, mode):
    entry = ENTRIES[name]
    loss = entry.cls(**entry.example)
    labels = (np.zeros((0, 2), "float32") if entry.labels == "continuous"
              else np.zeros(0, "int32"))
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
