"""`Proxies`: the Keras layer that holds the learnable proxies of a proxy loss.

A `keras.losses.Loss` is not a layer, so weights it created would not be tracked by
a model. Proxy losses (`ProxyAnchor`, `ProxyNCA`, `SoftTriple`, `NormalizedSoftmax`)
therefore keep their proxies in this layer, exposed as `loss.trainable_layer`;
`keras_dml.models.DMLModel` attaches it to the model at compile time, so the proxies
are in `model.trainable_weights`, trained by the model's optimizer, and saved with
`model.save("x.keras")` and checkpoints.

The layer is built lazily from the embedding size: calling it on an embedding batch
(N, d) creates a (num_classes * proxies_per_class, d) weight and returns it.

Learning-rate multiplier. Proxy Anchor trains its proxies with a 100x larger
learning rate than the network. Keras optimizers have one learning rate, and
scaling the proxies' gradient only scales the step of plain SGD (Adam, AdamW and
RMSprop are invariant to the gradient's scale). The layer therefore scales the
optimizer's *step* instead, which is exactly a `multiplier` x larger learning rate
for every optimizer whose step is proportional to its learning rate (SGD with or
without momentum, Adam, AdamW including its decoupled weight decay, RMSprop,
Adagrad, Adamax, Nadam, Lion; not Ftrl or Adafactor's relative steps):

- each forward pass snapshots the proxies into a non-trainable `step_origin`
  variable (the value the optimizer is about to update);
- the proxies' variable constraint, which every Keras optimizer applies right
  after its update, replaces the updated value v by
  origin + multiplier * (v - origin).

The snapshot is taken in the forward pass of the same training step, so it is never
stale (also after `load_weights` or with gradient accumulation).
"""

import keras

from keras_dml import hyperparameters
from keras_dml.backend.primitives import as_tensor

__all__ = ["Proxies", "kaiming_normal"]


def kaiming_normal():
    """He / kaiming-normal initialisation of a (num_proxies, d) proxy matrix.

    The Proxy Anchor code initialises proxies with
    `torch.nn.init.kaiming_normal_(proxies, mode="fan_out")`: an untruncated normal
    with standard deviation sqrt(2 / num_proxies). Keras' fan-in of a (rows, d)
    weight is its row count, so this is `VarianceScaling(2, "fan_in",
    "untruncated_normal")`.
    """
    return keras.initializers.VarianceScaling(
        scale=2.0, mode="fan_in", distribution="untruncated_normal"
    )


class _StepMultiplier(keras.constraints.Constraint):
    """Variable constraint scaling the optimizer's last step by `multiplier`."""

    def __init__(self, origin, multiplier, constraint=None):
        self.origin = origin
        self.multiplier = multiplier
        self.constraint = constraint

    def __call__(self, w):
        origin = as_tensor(self.origin)
        w = origin + self.multiplier * (w - origin)
        return w if self.constraint is None else self.constraint(w)


@keras.saving.register_keras_serializable(package="keras_dml")
class Proxies(keras.layers.Layer):
    """Learnable proxies (class centres) of a proxy-based loss.

    Calling the layer on embeddings (N, d) builds it on first use with a
    (num_classes * proxies_per_class, d) weight `proxies` and returns that weight
    (float32, whatever the dtype policy of the embeddings). Proxy k of class c is
    row c * proxies_per_class + k.

    Args:
        num_classes: number of classes C. Must be >= 1.
        proxies_per_class: proxies (centres) per class K. Defaults to 1.
        learning_rate_multiplier: the proxies' learning rate relative to the
            optimizer's (see the module docstring for the mechanism). Defaults to
            1.0 (no change).
        initializer: initializer of the proxies. Defaults to kaiming-normal
            (`kaiming_normal()`), as in the Proxy Anchor code.
        constraint: optional constraint applied to the proxies after each update.
        **kwargs: `keras.layers.Layer` arguments (name, ...). The dtype is
            float32 unless given.

    Examples:

    >>> layer = keras_dml.layers.Proxies(num_classes=100)
    >>> proxies = layer(embeddings)  # (100, d), built from embeddings' size d
    """

    def __init__(self, num_classes, proxies_per_class=1, learning_rate_multiplier=1.0,
                 initializer=None, constraint=None, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_classes = hyperparameters.integer_at_least("num_classes", num_classes, 1)
        self.proxies_per_class = hyperparameters.integer_at_least(
            "proxies_per_class", proxies_per_class, 1)
        self.learning_rate_multiplier = hyperparameters.positive("learning_rate_multiplier",
                                                                 learning_rate_multiplier)
        self.initializer = keras.initializers.get(initializer or kaiming_normal())
        self.constraint = keras.constraints.get(constraint)
        self.proxies = None
        self.step_origin = None

    @property
    def num_proxies(self):
        return self.num_classes * self.proxies_per_class

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim is None:
            raise ValueError(
                "Proxies need a known embedding size: got input shape "
                f"{tuple(input_shape)} with an unknown last dimension."
            )
        shape = (self.num_proxies, int(dim))
        constraint = self.constraint
        if self.learning_rate_multiplier != 1.0:
            self.step_origin = self.add_weight(
                name="step_origin", shape=shape, initializer="zeros", trainable=False,
                aggregation="only_first_replica",
            )
            constraint = _StepMultiplier(
                self.step_origin, self.learning_rate_multiplier, self.constraint
            )
        self.proxies = self.add_weight(
            name="proxies", shape=shape, initializer=self.initializer, trainable=True,
            constraint=constraint,
        )

    def call(self, inputs):
        if inputs.shape[-1] is not None and inputs.shape[-1] != self.proxies.shape[-1]:
            raise ValueError(
                f"Embeddings of size {inputs.shape[-1]} do not match the proxies of size "
                f"{self.proxies.shape[-1]} (proxies have shape {tuple(self.proxies.shape)})."
            )
        proxies = as_tensor(self.proxies)
        if self.step_origin is not None:
            self.step_origin.assign(proxies)
        return proxies

    def compute_output_shape(self, input_shape):
        return (self.num_proxies, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            proxies_per_class=self.proxies_per_class,
            learning_rate_multiplier=self.learning_rate_multiplier,
            initializer=keras.initializers.serialize(self.initializer),
            constraint=keras.constraints.serialize(self.constraint),
        )
        return config
