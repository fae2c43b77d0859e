"""keras_dml's systems on the Keras backend of the worker process (`--backends`).

Backend-neutral: the worker imports this module through `benchmarks.on_jax`,
`benchmarks.on_torch` or `benchmarks.on_tensorflow`, which set KERAS_BACKEND first.
Nothing here imports TensorFlow: on JAX and PyTorch it runs where TensorFlow is not
installed.

- `loss_step`: a loss's forward + backward with the running backend's autodiff, as its
  Keras trainer runs it: `jax.jit(jax.value_and_grad(...))` on JAX (Keras jit-compiles
  every JAX train step), `torch.autograd` on PyTorch, eager (Keras' default there) or
  under `torch.compile` (`jit_compile=True`, as `compile(jit_compile=True)` does). On
  TensorFlow the step is `benchmarks.tf_systems.loss_step`'s `tf.function`.
- `main_job_step`: `fit` steps of the main job (`keras-dml train`'s model and loss).
- `nearest_neighbors`: `keras_dml.evaluation.nearest_neighbors`, the kernel it picks
  on this backend.

On `--device gpu` the tensors go where Keras puts them (its backend's GPU); on
`--device cpu` the parent hides every GPU.
"""

import os

import numpy as np

from benchmarks import data

import keras  # noqa: E402  (after the entry module has set KERAS_BACKEND)

import keras_dml  # noqa: E402

_threads = int(os.environ.get("BENCH_THREADS", "0"))
BACKEND = keras.backend.backend()
if BACKEND == "torch" and _threads:
    import torch

    torch.set_num_threads(_threads)


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


def _torch_step(loss, x, y, weights, jit_compile=False):
    import torch

    x = keras.ops.convert_to_tensor(x).requires_grad_()  # on Keras' device
    y = keras.ops.convert_to_tensor(y)
    sources = [x] + [w.value for w in weights]

    def gradients():
        value = loss(y, x)
        return value, torch.autograd.grad(value, sources)

    compiled = torch.compile(gradients) if jit_compile else gradients

    def run():
        value, grads = compiled()
        if x.is_cuda:
            torch.cuda.synchronize()
        return value, grads

    def step():
        return run()[0].item()

    step.gradients = lambda: [g.detach() for g in run()[1]]
    return step


def loss_step(loss, config=None, miner=None, miner_config=None, n=1024, d=512,
              samples_per_class=4, classes=None, jit_compile=None, measure_memory=False):
    """Forward + backward of `keras_dml.losses.<loss>(**config)` w.r.t. (n, d) embeddings
    and the loss's own weights, on JAX or PyTorch (the arguments of
    `tf_systems.loss_step`). `jit_compile`: on PyTorch, True runs the step under
    `torch.compile` (default: eager, as Keras' trainer); JAX always compiles."""
    x_np, y_np = data.batch(n, d, samples_per_class, classes=classes)
    built = _loss(loss, config, miner, miner_config)
    weights = _weights(built, x_np)
    if BACKEND == "jax":
        step = _jax_step(built, x_np, y_np, weights)
    elif BACKEND == "torch":
        step = _torch_step(built, x_np, y_np, weights, jit_compile=bool(jit_compile))
    else:
        raise ValueError(f"benchmarks.keras_systems.loss_step runs on JAX or PyTorch, not "
                         f"{BACKEND!r} (TensorFlow's is benchmarks.tf_systems.loss_step).")
    if measure_memory:
        return step
    value = step()
    finite = np.isfinite(value) and all(
        np.isfinite(keras.ops.convert_to_numpy(g)).all() for g in step.gradients())
    return step, {"value": value, "finite": bool(finite), "backend": BACKEND,
                  "compiled": "jax.jit" if BACKEND == "jax"
                  else "torch.compile" if jit_compile else "eager"}


def _synchronised(history):
    """The last loss of a `fit` as a float: the step's work is done when it returns."""
    return float(history.history["loss"][-1])


def main_job_step(loss="InstanceCrossEntropy", steps=20, seed=0, limit=None, jit_compile=None):
    """`steps` training steps of the main job: the default `keras-dml train` model
    (`training.build_model`: `cnn3` of width 32, a 128-d `EmbeddingHead`) compiled as
    the command compiles it (`training.compile_model`, `loss` by name; `jit_compile`
    None: the command's choice), one `fit` on the C x k NumPy stream of the bundled
    Omniglot (`data.ClassBalancedPyDataset`, 32 x 4, the command's stream off
    TensorFlow; the first `limit` images). The data feeding and
    `fit`'s own start are in the figure, the first call's compilation is not."""
    from keras_dml import datasets, training
    from keras_dml.training import inputs as training_inputs
    from keras_dml.training.config import TrainConfig

    config = TrainConfig(seed=seed)
    train = datasets.load("omniglot").train
    images, labels = train.images[:limit], train.labels[:limit]
    input_shape, _ = training_inputs.input_spec(train, config.image_size)
    stream = keras_dml.data.ClassBalancedPyDataset(
        images, labels, config.classes_per_batch, config.samples_per_class, seed=seed,
        map_fn=training.array_transform(train, input_shape))
    model = training.build_model(config, input_shape)
    training.compile_model(model, config, train.num_classes, loss=loss, jit_compile=jit_compile)

    def step():
        return _synchronised(model.fit(stream, epochs=1, steps_per_epoch=steps, verbose=0,
                                       shuffle=False))

    value = step()
    return step, {"loss": value, "steps": steps, "backend": BACKEND,
                  "jit_compile": model.jit_compile,
                  "batch": config.classes_per_batch * config.samples_per_class}


def nearest_neighbors(n=20000, d=512, k=101, classes=5000, kernel="auto"):
    """`keras_dml.evaluation.nearest_neighbors` of every row against all rows (inner
    product) with the kernel `kernel` names on this backend (facts: which)."""
    from keras_dml.evaluation.knn_faiss import resolve_kernel

    x, _ = data.clustered(n, d, classes)

    def step():
        return keras_dml.evaluation.nearest_neighbors(x, x, k=k, metric="dot", kernel=kernel)

    indices, _ = step()
    return step, {"first_neighbours": indices[:20, :10].tolist(), "backend": BACKEND,
                  "kernel": resolve_kernel(kernel)}
