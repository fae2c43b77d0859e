"""`BackboneStepScale`: the papers' fine-tuning schedule of a pretrained backbone, a
warm-up in which only the head and the proxies train, then a backbone learning-rate
multiplier (frozen BatchNorm statistics: `keras_dml.layers.freeze_batch_norm`).

Proxy Anchor's code (github.com/tjddus9597/Proxy-Anchor-CVPR2020, `net/resnet.py`
and `train.py`) puts every BatchNorm of the backbone in eval mode with its weight
and bias frozen (`bn_freeze`), and trains only the embedding layer and the proxies
for the first `--warm` epochs (1 for BN-Inception, 5 for ResNet-50). ICE (section
4.1) trains the new layers at 10x the backbone's learning rate.
"""

import keras

from keras_dml import hyperparameters
from keras_dml.layers.batch_norm import freeze_batch_norm  # noqa: F401 (its old home)

__all__ = ["BackboneStepScale"]


class BackboneStepScale(keras.callbacks.Callback):
    """Scales every training step of the backbone's weights by a factor.

    The factor is 0 during the first `warmup_steps` steps (the backbone stays as it
    is while the head and any proxies train: Proxy Anchor's warm-up) and
    `multiplier` after (a backbone learning rate `multiplier` x the optimizer's).
    As for the proxies' multiplier (`keras_dml.layers.proxies`), the optimizer's step
    is scaled rather than the gradient, so it is exactly a `multiplier` x learning
    rate for every optimizer whose step is proportional to its learning rate (SGD,
    Adam, AdamW including its weight decay, RMSprop, ...): before each step the
    callback keeps the backbone's weights w0, after it sets w0 + factor * (w - w0).
    The step number is the optimizer's `iterations`, so a resumed run continues
    the schedule. The backbone's gradients are still computed during the warm-up,
    and the optimizer's moments see them.

    `scales` gives each variable a scale of its own on top of the factor: layer-wise
    learning-rate decay (`keras_dml.hub_backbones.layer_decay_scales`), the top
    block at 1, each one below it times the decay.

    Args:
        variables: the backbone's trainable variables.
        multiplier: the backbone's learning rate relative to the optimizer's, >= 0.
            Defaults to 1.0.
        warmup_steps: steps with a frozen backbone first. Defaults to 0.
        scales: one scale >= 0 per variable, or None (all 1). Defaults to None.
    """

    def __init__(self, variables, multiplier=1.0, warmup_steps=0, scales=None):
        super().__init__()
        self.variables = list(variables)
        self.multiplier = hyperparameters.non_negative("multiplier", multiplier)
        self.warmup_steps = hyperparameters.integer_at_least("warmup_steps", warmup_steps, 0)
        if scales is not None:
            scales = [hyperparameters.non_negative("scales", scale) for scale in scales]
            if len(scales) != len(self.variables):
                raise ValueError(f"scales: {len(scales)} for {len(self.variables)} "
                                 "variables; give one per variable.")
        self.scales = scales
        self._origin = None
        self._factor = 1.0

    def factor(self, step):
        """The step's scale: 0 in the warm-up, `multiplier` after."""
        return 0.0 if step < self.warmup_steps else self.multiplier

    def on_train_begin(self, logs=None):
        steps = getattr(self.model, "steps_per_execution", 1)
        if int(steps) != 1:
            raise ValueError(f"BackboneStepScale scales each step: compile with "
                             f"steps_per_execution=1, not {steps}.")

    def _synced(self):
        """On JAX the trainer holds the variables' values between steps: puts them back
        into the model's variables (the trainer reads them again before its next step)."""
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:
            sync()

    def on_train_batch_begin(self, batch, logs=None):
        self._synced()
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        self._factor = self.factor(step)
        self._origin = None if self._factor == 1.0 and self.scales is None else [
            keras.ops.copy(keras.ops.convert_to_tensor(v)) for v in self.variables]

    def on_train_batch_end(self, batch, logs=None):
        if self._origin is None:
            return
        self._synced()
        scales = self.scales or [1.0] * len(self.variables)
        for variable, origin, scale in zip(self.variables, self._origin, scales):
            factor = self._factor * scale
            if factor == 0.0:
                variable.assign(origin)
            elif factor != 1.0:
                variable.assign(origin + factor * (keras.ops.convert_to_tensor(variable)
                                                   - origin))
        self._origin = None
