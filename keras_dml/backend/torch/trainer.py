"""`DMLModel`'s train step on PyTorch: Keras' eager step with the NaN guard.

The loss is `DMLModel.compute_loss`; `loss.backward()` reaches the loss-owned
weights (proxies, margins) like any trainable weight of the model.
"""

import keras
import torch

from keras_dml.backend.torch.inference import fused_inference
from keras_dml.backend.trainer import backend_inputs

__all__ = ["all_finite", "inference_function", "train_step"]


def all_finite(tensors):
    """Whether every value of every tensor is finite (a Python bool: one device sync)."""
    return bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all())


def train_step(model, data):
    """One update of `model` (a `DMLModel`) on `data`; the update of a batch with NaN or
    Inf embeddings (or gradients) is skipped and its loss reported as NaN."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    embeddings = model(x, training=True)
    model.zero_grad()
    loss = model._compute_loss(x=x, y=y, y_pred=embeddings, sample_weight=sample_weight,
                               training=True)
    variables = model.trainable_weights[:]
    model.optimizer.scale_loss(loss).backward()
    gradients = [v.value.grad for v in variables]
    # As on TensorFlow: a LossScaleOptimizer skips overflowing gradients itself.
    checked = [embeddings] if isinstance(
        model.optimizer, keras.optimizers.LossScaleOptimizer) else [embeddings] + gradients
    finite = all_finite([t.detach() for t in checked if t is not None])
    if finite:
        with torch.no_grad():
            model.optimizer.apply(gradients, variables)
    else:
        loss = torch.full_like(loss, float("nan"))
    model._loss_tracker.update_state(loss.detach(), sample_weight=embeddings.shape[0])
    return model.compute_metrics(x, y, embeddings, sample_weight=sample_weight)


def inference_function(model):
    """`model(x, training=False)` without recording gradients, a chain model's
    convolutions, batch norms, ReLUs and max pooling fused
    (`keras_dml.backend.torch.inference`); TensorFlow tensors (a tf.data stream's batches)
    are fed as NumPy arrays."""
    fused = fused_inference(model)

    def embed(x):
        with torch.no_grad():
            if fused is None:
                return model(backend_inputs(x), training=False)
            return fused(keras.ops.convert_to_tensor(backend_inputs(x)))

    return embed
