"""keras_dml's loss step on the Keras backend of the worker process, for the backend column.

Backend-neutral: the step is built with the running backend's autodiff, as its Keras
trainer runs it: `jax.jit(jax.value_and_grad(...))` on JAX (Keras jit-compiles every
JAX train step), eager `torch.autograd` on PyTorch (Keras' default there), and the
`tf.function` of `benchmarks.tf_systems` on TensorFlow. The worker imports it through
`benchmarks.on_jax` or `benchmarks.on_torch`, which set KERAS_BACKEND first.
"""

import os

import numpy as np

from benchmarks import data

import keras  # noqa: E402  (after the entry module has set KERAS_BACKEND)

import keras_dml  # noqa: E402

_threads = int(os.environ.get("BENCH_THREADS", "0"))
BACKEND = keras.backend.backend()


def _loss(loss, config, miner, miner_config):
    config = dict(config or {})
    if miner:
        config["miner"] = getattr(keras_dml.mining, miner)(**(miner_config or {}))
    return getattr(keras_dml.losses, loss)(**config)


def _weights(loss, x):
    """The loss's own trainable weights (proxies, a learnable margin), built."""
    layer = getattr(loss, "trainable_layer", None)
    if layer is None:
        return []
    layer.attached_to_model = True  # its weights are differentiated here (no warning)
    if not layer.built:
        layer.build((None, x.shape[-1]))
    return list(layer.trainable_weights)


def _jax_step(loss, x, y, weights):
    import jax

    variables = weights

    def value(x, values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return loss(y, x)

    compiled = jax.jit(jax.value_and_grad(value, argnums=(0, 1)))
    x, values = jax.numpy.asarray(x), [v.value for v in variables]

    def run():
        return jax.block_until_ready(compiled(x, values))

    def step():
        return float(run()[0])

    step.gradients = lambda: jax.tree_util.tree_leaves(run()[1])
    return step


def _torch_step(loss, x, y, weights):
    import torch

    if _threads:
        torch.set_num_threads(_threads)
    x = torch.tensor(x, requires_grad=True)
    y = torch.tensor(y)
    sources = [x] + [w.value for w in weights]

    def run():
        value = loss(y, x)
        return value, torch.autograd.grad(value, sources)

    def step():
        return run()[0].item()

    step.gradients = lambda: [g.detach() for g in run()[1]]
    return step


def loss_step(loss, config=None, miner=None, miner_config=None, n=1024, d=512,
              samples_per_class=4, classes=None, jit_compile=None, measure_memory=False):
    """Forward + backward of `keras_dml.losses.<loss>(**config)` w.r.t. (n, d) embeddings
    and the loss's own weights, on JAX or PyTorch (the arguments of
    `tf_systems.loss_step`; `jit_compile` is TensorFlow's choice and ignored here: JAX
    always compiles, PyTorch runs eagerly)."""
    x_np, y_np = data.batch(n, d, samples_per_class, classes=classes)
    built = _loss(loss, config, miner, miner_config)
    weights = _weights(built, x_np)
    make = {"jax": _jax_step, "torch": _torch_step}.get(BACKEND)
    if make is None:
        raise ValueError(f"benchmarks.keras_systems runs on JAX or PyTorch, not {BACKEND!r}.")
    step = make(built, x_np, y_np, weights)
    if measure_memory:
        return step
    value = step()
    finite = np.isfinite(value) and all(
        np.isfinite(keras.ops.convert_to_numpy(g)).all() for g in step.gradients())
    return step, {"value": value, "finite": bool(finite), "backend": BACKEND}
