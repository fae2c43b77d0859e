"""Cost of each backbone family on this machine's CPU, with random weights (no download).

    python -m benchmarks.backbone_costs [--batch 8] [NAME ...]

For each backbone (the Keras Applications at 224 x 224, and the KerasHub towers built
from the configurations of their published presets), in a process of its own on the
TensorFlow backend: the parameters, one forward pass and one training step (the
backbone, a 128-d dense head, mean squared error, Adam) at `--batch` images of 224 x 224,
both compiled as `fit` and `predict` compile them, each timed after a first untimed
call (the compile), and the process's peak resident
memory. Prints one JSON line per backbone. The figures of docs/guide/backbones.md.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

__all__ = ["HUB_CONFIGS", "measure"]

#: The KerasHub towers as their presets configure them (KerasHub's preset configs:
#: dinov2_small, dinov3_vit_small_lvd1689m, vit_base_patch16_224_imagenet,
#: clip_vit_base_patch32, siglip_base_patch16_224), at 224 x 224.
HUB_CONFIGS = {
    "DINOv2 ViT-S/14": ("DINOV2Backbone", dict(
        patch_size=14, num_layers=12, hidden_dim=384, num_heads=6, intermediate_dim=1536,
        image_shape=(224, 224, 3), position_embedding_shape=(518, 518, 3))),
    "DINOv3 ViT-S/16": ("DINOV3Backbone", dict(
        patch_size=16, num_layers=12, hidden_dim=384, num_heads=6, intermediate_dim=1536,
        num_register_tokens=4, image_shape=(224, 224, 3))),
    "ViT-B/16": ("ViTBackbone", dict(
        patch_size=16, num_layers=12, hidden_dim=768, num_heads=12, mlp_dim=3072,
        image_shape=(224, 224, 3))),
    "CLIP ViT-B/32": ("CLIPVisionEncoder", dict(
        patch_size=32, num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072,
        image_shape=(224, 224, 3))),
    "SigLIP B/16": ("SigLIPVisionEncoder", dict(
        patch_size=16, num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072,
        image_shape=(224, 224, 3))),
}
APPLICATIONS = ("ResNet50", "EfficientNetV2B0", "MobileNetV3Small", "ConvNeXtTiny")


def _backbone(name):
    """The keras_dml backbone `name` builds: raw pixels to features, random weights."""
    import keras

    from keras_dml import backbones, hub_backbones

    if name in APPLICATIONS:
        network = backbones.get(name, (224, 224, 3))
        return keras.Model(network.input, keras.layers.GlobalAveragePooling2D()(
            network.output)), network.count_params()
    import keras_hub

    kind, config = HUB_CONFIGS[name]
    tower = getattr(keras_hub.models, kind)(**config)
    converter = keras_hub.layers.ImageConverter(image_size=(224, 224), scale=1 / 127.5,
                                                offset=-1)
    model = hub_backbones.from_network(tower, converter, (224, 224, 3))
    return model, tower.count_params()


def measure(name, batch=8):
    """{"backbone", "parameters", "forward_s", "train_step_s", "peak_rss_mb"} of `name`."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    backbone, parameters = _backbone(name)
    model = keras.Model(backbone.input, keras.layers.Dense(128)(backbone.output))
    model.compile(keras.optimizers.Adam(1e-4), "mse")
    x = np.random.default_rng(0).uniform(0, 255, (batch, 224, 224, 3)).astype("float32")
    y = np.zeros((batch, 128), "float32")
    model.predict_on_batch(x)
    started = time.perf_counter()
    model.predict_on_batch(x)
    forward_s = time.perf_counter() - started
    model.train_on_batch(x, y)
    started = time.perf_counter()
    model.train_on_batch(x, y)
    step_s = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"backbone": name, "parameters": int(parameters), "batch": batch,
            "forward_s": round(forward_s, 2), "train_step_s": round(step_s, 2),
            "peak_rss_mb": round(peak)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(APPLICATIONS) + list(HUB_CONFIGS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.names[0], args.batch)), flush=True)
        return 0
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for name in args.names:
        done = subprocess.run([sys.executable, "-m", "benchmarks.backbone_costs", "--one",
                               "--batch", str(args.batch), name], env=environment,
                              capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        print(lines[-1] if lines else json.dumps(
            {"backbone": name, "error": done.stderr.strip().splitlines()[-1:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
