"""A momentum (MoCo-style) key encoder: a slowly updated copy of the embedder.

`MomentumEncoder` holds an exponential moving average of the model's weights,

    theta_k <- m theta_k + (1 - m) theta_q         (MoCo, He et al. CVPR 2020, eq. 2)

and computes keys by running the model with those weights (`Model.stateless_call`),
in inference mode, without gradient. `DMLModel` attaches one when its loss asks for
it (`CrossBatchMemory(..., momentum=0.999)`): the memory then holds keys, which
drift slowly, instead of the query embeddings of past steps.
"""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.backend.primitives import as_tensor

__all__ = ["MomentumEncoder"]


@keras.saving.register_keras_serializable(package="keras_dml")
class MomentumEncoder(keras.layers.Layer):
    """EMA copies of a model's embedding weights (non-trainable, saved with the model).

    Args:
        momentum: m in [0, 1). Defaults to 0.999 (MoCo's).
    """

    def __init__(self, momentum=0.999, **kwargs):
        super().__init__(**kwargs)
        self.momentum = _hyper.below_one("momentum", momentum)
        self.shadows = []

    def track(self, variables):
        """Create one shadow per variable of `variables` (the embedder's weights)."""
        add = dict(trainable=False, aggregation="only_first_replica", initializer="zeros")
        self.shadows = [self.add_weight(shape=v.shape, dtype=v.dtype, name=f"shadow_{i}", **add)
                        for i, v in enumerate(variables)]
        self.started = self.add_weight(shape=(), dtype="int32", name="started", **add)
        self.built = True

    def update(self, variables):
        """theta_k <- m theta_k + (1 - m) theta_q; a plain copy at the first update."""
        m = keras.ops.where(self.started > 0, self.momentum, 0.0)
        for shadow, variable in zip(self.shadows, variables):
            value = as_tensor(variable)
            if keras.backend.is_float_dtype(value.dtype):
                m_value = keras.ops.cast(m, value.dtype)
                shadow.assign(m_value * shadow + (1 - m_value) * value)
            else:
                shadow.assign(value)
        self.started.assign(1)

    def keys(self, model, x):
        """`model(x)` in inference mode with the shadow weights, without gradient."""
        shadow_of = {id(v): s for v, s in zip(model.encoder_variables(), self.shadows)}

        def values(variables):
            return [as_tensor(shadow_of.get(id(v), v)) for v in variables]

        outputs, _ = model.stateless_call(values(model.trainable_variables),
                                          values(model.non_trainable_variables), x,
                                          training=False)
        return keras.ops.stop_gradient(outputs)

    def get_config(self):
        config = super().get_config()
        config.update(momentum=self.momentum)
        return config
