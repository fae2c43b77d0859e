"""A tiny `DMLModel` set-up in `keras.ops` only, for the backend-neutral model tests.

Run as a script it trains a proxy model a few steps under its process's Keras
backend and saves it: `python tests/model_checks.py save model.keras embeddings.npy`
(the cross-backend load test runs it under another backend), or compares
`keras.distribution.DataParallel` with one device on JAX: `... data_parallel out.npz`.
"""

import sys

import keras
import numpy as np

from keras_dml.models import DMLModel

DIM = 8
CLASSES = 4


@keras.saving.register_keras_serializable(package="keras_dml_tests")
class OpsContrastive(keras.losses.Loss):
    """Mean of (1 - cos) over positive pairs plus relu(cos - margin) over negative pairs."""

    def __init__(self, margin=0.2, **kwargs):
        super().__init__(**kwargs)
        self.margin = margin

    def call(self, y_true, y_pred):
        labels = keras.ops.reshape(keras.ops.cast(y_true, "int32"), (-1,))
        unit = keras.ops.normalize(y_pred, axis=1)
        cos = keras.ops.matmul(unit, keras.ops.transpose(unit))
        same = keras.ops.cast(labels[:, None] == labels[None, :], "float32")
        off_diagonal = 1.0 - keras.ops.eye(keras.ops.shape(labels)[0], dtype="float32")
        positive, negative = same * off_diagonal, 1.0 - same
        terms = positive * (1.0 - cos) + negative * keras.ops.relu(cos - self.margin)
        return keras.ops.sum(terms, axis=1) / keras.ops.cast(keras.ops.shape(labels)[0] - 1,
                                                             "float32")

    def get_config(self):
        return {**super().get_config(), "margin": self.margin}


@keras.saving.register_keras_serializable(package="keras_dml_tests")
class OpsProxies(keras.layers.Layer):
    """`num_classes` learnable proxies of the embedding dimension."""

    def __init__(self, num_classes, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes

    def build(self, input_shape):
        self.proxies = self.add_weight(shape=(self.num_classes, input_shape[-1]),
                                       initializer="random_normal", name="proxies")

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@keras.saving.register_keras_serializable(package="keras_dml_tests")
class OpsProxyLoss(keras.losses.Loss):
    """Softmax cross-entropy over scaled cosines to learnable proxies (NormSoftmax-like):
    a loss that owns trainable weights, exposed as `trainable_layer`."""

    def __init__(self, num_classes=CLASSES, scale=8.0, **kwargs):
        super().__init__(**kwargs)
        self.num_classes, self.scale = num_classes, scale
        self.trainable_layer = OpsProxies(num_classes)

    def call(self, y_true, y_pred):
        labels = keras.ops.reshape(keras.ops.cast(y_true, "int32"), (-1,))
        proxies = keras.ops.normalize(self.trainable_layer.proxies, axis=1)
        logits = self.scale * keras.ops.matmul(keras.ops.normalize(y_pred, axis=1),
                                               keras.ops.transpose(proxies))
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "scale": self.scale}


def data(n=64, d=6, seed=0):
    """`n` samples of `CLASSES` Gaussian clusters, classes interleaved (every batch of
    16 holds each class four times)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % CLASSES
    centres = rng.normal(size=(CLASSES, d)) * 1.5
    x = (centres[labels] + rng.normal(size=(n, d))).astype("float32")
    return x, labels.astype("int32")


def model(d=6, seed=0):
    """A two-layer embedder wrapped in a `DMLModel`."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((d,))
    hidden = keras.layers.Dense(16, activation="tanh")(inputs)
    return DMLModel(inputs, keras.layers.Dense(DIM)(hidden))


def trained_proxy_model(epochs=2, loss="proxy_anchor"):
    """The `model()` trained on `data()` with keras_dml's `ProxyAnchor` (`loss=
    "proxy_anchor"`) or this module's `OpsProxyLoss` (`"ops"`)."""
    from keras_dml import losses

    x, y = data()
    dml = model()
    dml.compile(optimizer=keras.optimizers.Adam(1e-2),
                loss=losses.ProxyAnchor(num_classes=CLASSES) if loss == "proxy_anchor"
                else OpsProxyLoss())
    dml.fit(x, y, batch_size=16, shuffle=False, epochs=epochs, verbose=0)
    return dml


def data_parallel_run(parallel, loss):
    """On JAX: `{"devices", "loss", "halves_loss", "weights"}` of `model()` evaluated on
    one global batch of 32 (and the mean of its halves' losses), then trained one step,
    under `keras.distribution.DataParallel` over
    every CPU device when `parallel`, else on one device."""
    import jax

    devices = jax.devices("cpu")
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices) if parallel else None)
    x, y = data(32)
    dml = model()
    dml.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    value = dml.evaluate(x, y, batch_size=32, verbose=0)
    halves = np.mean([dml.evaluate(x[i:i + 16], y[i:i + 16], verbose=0) for i in (0, 16)])
    dml.fit(x, y, batch_size=32, shuffle=False, epochs=1, verbose=0)
    keras.distribution.set_distribution(None)
    return {"devices": len(devices), "loss": value, "halves_loss": halves,
            "weights": dml.get_weights()}


if __name__ == "__main__":
    command, *paths = sys.argv[1:]
    if command == "save":  # save MODEL.keras EMBEDDINGS.npy [LOSS]
        trained = trained_proxy_model(loss=(paths[2:] or ["proxy_anchor"])[0])
        trained.save(paths[0])
        np.save(paths[1], keras.ops.convert_to_numpy(trained.predict(data()[0], verbose=0)))
    elif command == "data_parallel":  # data_parallel RESULTS.npz (JAX, 2 CPU devices)
        results = {}
        for name, loss in (("contrastive", OpsContrastive), ("proxy", OpsProxyLoss)):
            for parallel in (False, True):
                run = data_parallel_run(parallel, loss())
                key = f"{name}_{'parallel' if parallel else 'single'}"
                results[f"{key}_devices"] = run["devices"]
                results[f"{key}_loss"] = run["loss"]
                results[f"{key}_halves_loss"] = run["halves_loss"]
                for i, weight in enumerate(run["weights"]):
                    results[f"{key}_weight{i}"] = weight
        np.savez(paths[0], **results)
    else:
        raise SystemExit(f"unknown command {command!r}")
