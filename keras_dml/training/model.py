"""The run's model: the backbone with its embedding head, the loss, the optimizer and
its learning-rate schedule, compiled as `keras-dml train` does."""

import contextlib
import inspect

import keras

from keras_dml import backbones, backend, losses
from keras_dml.layers import EmbeddingHead, freeze_batch_norm
from keras_dml.models import DMLModel
from keras_dml.training.config import LR_SCHEDULES

__all__ = ["adam", "backbone_variables", "build_model", "compile_model", "dtype_policy",
           "learning_rate_schedule", "make_loss", "step_jit_compile"]


def make_loss(name, loss_args=None, num_classes=None):
    """A keras_dml loss from its class name ("MultiSimilarity") or registered name.

    `loss_args` are its constructor arguments. A loss that requires `num_classes`
    (the proxy losses) gets `num_classes` (the training split's class count)
    unless `loss_args` sets it.
    """
    kwargs = dict(loss_args or {})
    short = name.split(">")[-1]
    cls = keras.saving.get_registered_object(f"keras_dml>{short}")
    if short not in losses.LOSSES or cls is None:
        raise ValueError(f"Unknown loss {name!r}: expected one of {list(losses.LOSSES)}.")
    required = inspect.signature(cls).parameters.get("num_classes")
    if required is not None and required.default is inspect.Parameter.empty:
        kwargs.setdefault("num_classes", num_classes)
    try:
        return cls(**kwargs)
    except TypeError as error:  # an unknown or missing argument in --loss-args
        raise ValueError(f"{short}: {error}; pass its arguments with --loss-args JSON.") from None


def adam(learning_rate, weight_decay=0.0):
    """Adam at `learning_rate` (a rate or schedule), or AdamW when `weight_decay` > 0."""
    if weight_decay:
        return keras.optimizers.AdamW(learning_rate, weight_decay=weight_decay)
    return keras.optimizers.Adam(learning_rate)


def learning_rate_schedule(learning_rate, total_steps, warmup_steps=0, schedule="constant"):
    """Adam's learning rate: constant, or cosine decay to 0 at `total_steps`; either
    after a linear warm-up from 0 over `warmup_steps`."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"schedule must be one of {LR_SCHEDULES}, got {schedule!r}.")
    if schedule == "constant" and not warmup_steps:
        return learning_rate
    decay_steps = max(total_steps - warmup_steps, 1) if schedule == "cosine" else 10 ** 12
    if not warmup_steps:
        return keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps)
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps, warmup_target=learning_rate, warmup_steps=warmup_steps)


def build_model(config, input_shape, weights=None):
    """The run's `DMLModel`: `config.backbone` with `weights` (defaults to
    `config.weights`), BatchNorm frozen if `config.freeze_bn`, an `EmbeddingHead`.

    From a keras-dml run or `.keras` model (a warm start) the head's weights are
    also taken when their shapes match (same embedding size and features), so the
    run continues from the same embedding; the proxies are not (new classes).
    """
    keras.utils.set_random_seed(config.seed)
    weights = config.weights if weights is None else weights
    source = None if weights in ("none", "imagenet", "preset") else \
        backbones.load_source(weights)
    hub = {"pooling": config.token_pooling, "drop_path_rate": config.drop_path_rate} \
        if backbones.is_hub(config.backbone) else {}
    backbone = backbones.get(config.backbone, input_shape, weights=weights,
                             width=config.width, source=source, **hub)
    if config.freeze_bn:
        freeze_batch_norm(backbone)
    embeddings = EmbeddingHead(config.embedding_dim, name="embedding")(backbone.output)
    stem = backbone.name if hub else config.backbone  # a preset path is no model name
    model = DMLModel(backbone.input, embeddings, name=f"{stem}_embedder")
    if source is not None:
        _warm_start_head(model, source, weights)
    return model


def compile_model(model, config, num_classes, loss=None, jit_compile=None):
    """Compile `model` as `keras-dml train` does: `config`'s loss (or `loss`, a name,
    with its default arguments), wrapped in a `CrossBatchMemory` if `config` asks,
    Adam(W) on `config`'s learning-rate schedule, and the step compiled as
    `step_jit_compile(config.jit_compile)` says (or `jit_compile`)."""
    loss = make_loss(config.loss, config.loss_args, num_classes) if loss is None else \
        make_loss(loss, num_classes=num_classes)
    if config.memory_size:
        loss = losses.CrossBatchMemory(loss, config.memory_size, config.memory_warmup,
                                       include_batch_loss=config.memory_batch_loss,
                                       momentum=config.memory_momentum)
    rate = learning_rate_schedule(config.learning_rate, config.epochs * config.steps_per_epoch,
                                  config.warmup_steps, config.lr_schedule)
    jit_compile = step_jit_compile(config.jit_compile) if jit_compile is None else jit_compile
    model.compile(optimizer=adam(rate, config.weight_decay), loss=loss, jit_compile=jit_compile)


def step_jit_compile(requested):
    """The `jit_compile` of the run's training step: XLA on TensorFlow when `requested`
    (`--jit-compile`; its graph step is faster on a CPU without it); on JAX always, since
    Keras runs an un-jitted JAX step op by op, several times slower; on PyTorch when
    `requested` (`torch.compile`)."""
    return True if backend.name() == "jax" else bool(requested)


def _warm_start_head(model, source, origin):
    """Copies the `embedding` head of `source` into `model` when the shapes match."""
    head = model.get_layer("embedding")
    try:
        backbones.copy_layer_weights(source, model, [head.name], origin)
    except ValueError as error:
        print(f"warm start: the embedding head starts afresh ({error})", flush=True)


def backbone_variables(model):
    """The trainable variables of `model`'s network before its `embedding` head."""
    head = {id(v) for v in model.get_layer("embedding").weights}
    encoder = {id(v) for v in model.encoder_variables()}  # not the proxies
    return [v for v in model.trainable_weights if id(v) in encoder and id(v) not in head]


@contextlib.contextmanager
def dtype_policy(mixed_precision):
    """Keras' global dtype policy "mixed_float16" within (layers keep theirs)."""
    if not mixed_precision:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
