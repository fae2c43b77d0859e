"""A faster inference pass on PyTorch for models that are a chain of layers.

PyTorch runs each layer as its own kernel, so an inference pass of a convolution,
batch norm, ReLU and max pooling reads and writes the activations four times (on a
CPU the three element-wise layers took as long as the convolution: profile in
benchmarks/README.md). TensorFlow's graph rewrites fuse them; here the same two
rewrites are made on the chain of layers, for inference only:

- a `Conv2D` followed by a `BatchNormalization` (moving statistics) is one
  convolution, the normalisation folded into its kernel and bias (`fold`);
- a ReLU and a `MaxPooling2D` next to each other, in either order, are pooling
  then ReLU in place: the same values (ReLU is monotone, so the max of the ReLUs is the
  ReLU of the max) on a quarter of the pixels.

Every other layer is called as Keras calls it (`training=False`). The weights are read
at each call, so a pass after more training uses the new weights. The outputs equal
`model(x, training=False)` up to float rounding (the folded kernel rounds once more).
"""

import keras
import torch

from keras_dml.backend.torch.layers import (conv_channels_last, max_pool_channels_last,
                                            torch_pads_like_keras)

__all__ = ["chain_layers", "fused_inference", "fused_steps"]

_CHAIN_CALLS = ("Functional.call", "Sequential.call")


def chain_layers(model):
    """The layers of `model` in call order when it is a chain, else None: a Functional
    or Sequential model (not a subclass with its own `call`) of one input and one
    output, in which each layer takes the previous layer's output alone."""
    if type(model).call.__qualname__ not in _CHAIN_CALLS:
        return None
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return None
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    previous = model.inputs[0]
    for layer in layers:
        try:
            if layer.input is not previous or len(layer._inbound_nodes) != 1:
                return None
        except (AttributeError, ValueError):  # a layer called more than once
            return None
        previous = layer.output
    return layers if layers and previous is model.outputs[0] else None


def _float32(layer):
    return layer.compute_dtype == "float32" and layer.variable_dtype == "float32"


def _is_conv(layer):
    return (type(layer).__name__ in ("Conv2D", "ShiftedConv2D")
            and isinstance(layer, keras.layers.Conv2D) and _float32(layer)
            and layer.data_format == "channels_last"
            and layer.activation is keras.activations.linear
            and not getattr(layer, "lora_enabled", False)  # a kernel that is a sum
            and getattr(layer, "quantization_mode", None) is None
            and torch_pads_like_keras(layer.kernel_size, layer.strides, layer.dilation_rate,
                                      layer.padding))


def _is_batch_norm(layer):
    return (isinstance(layer, keras.layers.BatchNormalization) and _float32(layer)
            and layer.axis in (-1, 3) and not getattr(layer, "renorm", False))


def _is_relu(layer):
    if isinstance(layer, keras.layers.ReLU):
        return (layer.max_value is None and not layer.negative_slope and not layer.threshold)
    return (isinstance(layer, keras.layers.Activation)
            and layer.activation is keras.activations.relu)


def _is_max_pool(layer):
    return (isinstance(layer, keras.layers.MaxPooling2D) and layer.padding == "valid"
            and layer.data_format == "channels_last")


def fused_steps(layers):
    """The chain `layers` as steps `(kind, layers)`: "conv" (a convolution and the batch
    norm folded into it, if one follows), "pool_relu" (a ReLU and a max pooling next to
    it, in either order, pooled first), or "layer" (one layer, called as Keras calls
    it)."""
    steps, i = [], 0
    while i < len(layers):
        layer, following = layers[i], layers[i + 1] if i + 1 < len(layers) else None
        if _is_conv(layer):
            folded = following is not None and _is_batch_norm(following)
            steps.append(("conv", (layer, following) if folded else (layer,)))
            i += 2 if folded else 1
        elif following is not None and ((_is_relu(layer) and _is_max_pool(following))
                                        or (_is_max_pool(layer) and _is_relu(following))):
            pool = layer if _is_max_pool(layer) else following
            steps.append(("pool_relu", (pool,)))
            i += 2
        else:
            steps.append(("layer", (layer,)))
            i += 1
    return steps


def fold(conv, norm=None):
    """`(kernel, bias)` of `conv` (Keras' HWIO kernel) with `norm`'s inference transform
    `gamma * (x - mean) / sqrt(variance + epsilon) + beta` folded in; bias None when
    there is neither a bias nor a norm."""
    kernel = conv.kernel.value
    bias = conv.bias.value if conv.use_bias else None
    if norm is None:
        return kernel, bias
    scale = torch.rsqrt(norm.moving_variance.value + norm.epsilon)
    if norm.scale:
        scale = scale * norm.gamma.value
    shift = -norm.moving_mean.value * scale
    if bias is not None:
        shift = shift + bias * scale
    if norm.center:
        shift = shift + norm.beta.value
    return kernel * scale, shift


def _run(steps, x):
    for kind, layers in steps:
        if kind == "conv":
            conv = layers[0]
            kernel, bias = fold(*layers)
            x = conv_channels_last(x, kernel, bias, conv.strides, conv.padding,
                                   conv.dilation_rate, conv.groups)
        elif kind == "pool_relu":
            pool = layers[0]
            x = torch.relu_(max_pool_channels_last(x, pool.pool_size, pool.strides))
        else:
            x = layers[0](x, training=False)
    return x


def fused_inference(model):
    """`f(x) -> model(x, training=False)` with the rewrites of the module, for a chain
    model with at least one of them (x: a PyTorch tensor, no gradient recorded), else
    None."""
    layers = chain_layers(model)
    if layers is None:
        return None
    steps = fused_steps(layers)
    if all(kind == "layer" for kind, _ in steps):
        return None

    def forward(x):
        return _run(steps, x)

    forward.steps = steps
    return forward

