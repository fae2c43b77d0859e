"""Shipped training recipes: a name -> `keras-dml train` flag values, each measured.

`keras-dml train --recipe NAME` starts from the recipe's values; any flag given on
the command line overrides them. `keras-dml train --list-recipes` prints them.
Keys are the `train` command's argument names (`--learning-rate` ->
"learning_rate"); "measured" says what the recipe reached and how.
"""

__all__ = ["RECIPES", "describe", "get"]

# The Omniglot protocol (examples/omniglot_protocol.py): 964 background characters
# train, 659 evaluation characters test, 28 x 28, the 3-block CNN (`cnn3`), 128-d,
# 2,000 steps of 32 classes x 4 drawings.
_OMNIGLOT = {
    "dataset": "omniglot",
    "image_size": 28,
    "classes_per_batch": 32,
    "samples_per_class": 4,
    "backbone": "cnn3",
    "width": 64,
    "embedding_dim": 128,
    "epochs": 4,
    "steps_per_epoch": 500,
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "augment_shift": 0.0,
    "augment_rotation": 0.0,
    "augment_scale": 0.0,
    "rotated_classes": False,
    "weight_decay": 0.0,
}

# The real-image protocols with an ImageNet ResNet-50 and Proxy Anchor, as the
# Proxy Anchor code's README runs them (github.com/tjddus9597/Proxy-Anchor-CVPR2020:
# 512-d, AdamW with weight decay 1e-4, proxies at 100x the learning rate, alpha 32,
# delta 0.1, BatchNorm frozen, the backbone frozen for the first --warm epochs, 224 px
# random resized crops + flips, evaluation resized to 256 and centre-cropped to 224,
# 60 epochs). Differences: batches are C x k class-balanced (the code samples at
# random), a cosine decay replaces its step decay (halving every 5-20 epochs), the
# head average-pools (the code adds average and max pooling) and gradients are not
# clipped at 10. An epoch is the training split's size / batch size (steps).
_PROXY_ANCHOR_RESNET50 = {
    "image_size": 224,
    "backbone": "ResNet50",
    "weights": "imagenet",
    "freeze_bn": True,
    "embedding_dim": 512,
    "loss": "ProxyAnchor",
    "loss_args": '{"alpha": 32, "delta": 0.1, "proxy_lr_multiplier": 100}',
    "classes_per_batch": 30,
    "samples_per_class": 4,
    "learning_rate": 1e-4,
    "weight_decay": 1e-4,
    "lr_schedule": "cosine",
    "warmup_steps": 0,
    "backbone_lr_multiplier": 1.0,
    "augment_crop": "random_resized",
    "epochs": 60,
}
_NOT_MEASURED = "not measured here (a 224 px ResNet-50 step takes ~43 s on 2 CPU cores)"

RECIPES = {
    "omniglot-best": {
        "description": "Omniglot protocol's budget (the same CNN, 2,000 steps of 128 images), "
                       "best measured so far: InstanceCrossEntropy at scale 32, 64 classes x "
                       "2, 512-d, the training characters also turned by 90/180/270 degrees "
                       "as new classes, AdamW (weight decay 0.4) at 3e-3 with 100 warm-up "
                       "steps and cosine decay, and a cross-batch memory of 8,192 embeddings "
                       "from step 1,000 on (the batch loss plus the memory loss)",
        "measured": "R@1 87.0, 87.4 and 87.3 (mean 87.2), MAP@R 56.2, 56.1 and 56.2 (seeds "
                    "0, 1 and 2, `keras-dml train --recipe omniglot-best --no-export "
                    "--no-plots --seed S`); the protocol script with these settings: 86.8, "
                    "87.3, 86.7 (mean 86.9); memory from step 500: 86.8, 87.1, 87.1; "
                    "without the memory: 86.9, 86.7, 86.3 (mean 86.6); PML's best on the "
                    "protocol: 81.3",
        "flags": {**_OMNIGLOT, "loss": "InstanceCrossEntropy", "loss_args": '{"scale": 32}',
                  "classes_per_batch": 64, "samples_per_class": 2, "embedding_dim": 512,
                  "rotated_classes": True, "weight_decay": 0.4, "learning_rate": 3e-3,
                  "lr_schedule": "cosine", "warmup_steps": 100, "memory_size": 8192,
                  "memory_warmup": 1000, "memory_batch_loss": True},
    },
    "omniglot-ice": {
        "description": "Omniglot protocol with InstanceCrossEntropy defaults (scale 64), "
                       "Adam 1e-3 constant",
        "measured": "R@1 83.9 and 84.4, MAP@R 51.3 and 51.3 (seeds 0 and 1, `keras-dml "
                    "train --recipe omniglot-ice`; PML's best there: 81.3)",
        "flags": {**_OMNIGLOT, "loss": "InstanceCrossEntropy"},
    },
    "omniglot-ice-tuned": {
        "description": "candidate for the R@1 >= 87 target: InstanceCrossEntropy, Adam 2e-3 "
                       "with 100 warm-up steps and cosine decay, random shifts (2 px), "
                       "rotations (10 degrees) and zooms (10 %)",
        "measured": "R@1 83.5 and 83.4, MAP@R 50.9 and 50.0 (seeds 0 and 1): 0.7 below "
                    "omniglot-ice on average, with Keras' random layers as the "
                    "augmentation (AffineJitter draws differently)",
        "flags": {**_OMNIGLOT, "loss": "InstanceCrossEntropy", "learning_rate": 2e-3,
                  "lr_schedule": "cosine", "warmup_steps": 100, "augment_shift": 2.0,
                  "augment_rotation": 10.0, "augment_scale": 0.1},
    },
    "omniglot-ms": {
        "description": "Omniglot protocol with MultiSimilarity defaults (alpha 2, beta 50, "
                       "base 0.5, epsilon 0.1), Adam 1e-3 constant",
        "measured": "R@1 80.7 (seed 0, the Omniglot protocol's 2,000 steps: `python "
                    "examples/omniglot_protocol.py --loss MultiSimilarity`)",
        "flags": {**_OMNIGLOT, "loss": "MultiSimilarity"},
    },
    "omniglot-raw": {
        "description": "Omniglot protocol with MultiSimilarity's pair weighting (RAW, alpha 2, "
                       "beta 50, base 0.5) without its VTHM miner, Adam 1e-3 constant",
        "measured": "R@1 83.6, MAP@R 49.8 (seed 0, `keras-dml train --recipe omniglot-raw`); "
                    "the protocol script gave 83.4 and 83.2 "
                    "(seeds 0 and 1) against MultiSimilarity's 81.3 and 80.8",
        "flags": {**_OMNIGLOT, "loss": "RelativeAbsoluteWeighting",
                  "loss_args": '{"mining": false}'},
    },
    "omniglot-proxy-anchor": {
        "description": "Omniglot protocol with ProxyAnchor (alpha 32, delta 0.1) and the "
                       "paper's 100x proxy learning rate, Adam 1e-3 constant",
        "measured": "R@1 80.1 (seed 0, the Omniglot protocol's 2,000 steps: `python "
                    "examples/omniglot_protocol.py --loss ProxyAnchor --loss-args "
                    "'{\"proxy_lr_multiplier\": 100}'`)",
        "flags": {**_OMNIGLOT, "loss": "ProxyAnchor",
                  "loss_args": '{"proxy_lr_multiplier": 100}'},
    },
    "cub200-resnet50": {
        "description": "CUB-200-2011 (100 species train, 100 test) with ImageNet ResNet-50 "
                       "and Proxy Anchor as the Proxy Anchor code's README: batch 120, "
                       "lr 1e-4, warm-up 5 epochs (245 steps), BatchNorm frozen; the "
                       "papers report R@1 69.9 (that README, ResNet-50, 512-d), 68.4 "
                       "(Proxy Anchor paper, BN-Inception, 512-d) and 65.7 (MS paper, "
                       "BN-Inception, 512-d, Adam 1e-5, batch 80 = 16 x 5)",
        "measured": _NOT_MEASURED,
        "flags": {**_PROXY_ANCHOR_RESNET50, "dataset": "cub200", "steps_per_epoch": 49,
                  "head_warmup_steps": 245},
    },
    "cars196-resnet50": {
        "description": "Cars-196 (98 models train, 98 test) with ImageNet ResNet-50 and "
                       "Proxy Anchor as the Proxy Anchor code's README: batch 120, lr 1e-4, "
                       "warm-up 5 epochs (335 steps), BatchNorm frozen; the papers report "
                       "R@1 87.7 (that README, ResNet-50, 512-d), 86.1 (Proxy Anchor "
                       "paper, BN-Inception, 512-d) and 84.1 (MS paper, BN-Inception)",
        "measured": _NOT_MEASURED,
        "flags": {**_PROXY_ANCHOR_RESNET50, "dataset": "cars196", "steps_per_epoch": 67,
                  "head_warmup_steps": 335},
    },
    "sop-resnet50": {
        "description": "Stanford Online Products (11,318 products train, 11,316 test) with "
                       "ImageNet ResNet-50 and Proxy Anchor, the settings of the Proxy "
                       "Anchor code's README for SOP (given for BN-Inception): batch 180 = "
                       "90 x 2, lr 6e-4, warm-up 1 epoch (331 steps), BatchNorm not frozen; "
                       "the papers report R@1 79.1 (Proxy Anchor paper, BN-Inception, "
                       "512-d; 79.2 in its README) and 78.2 (MS paper, BN-Inception, 512-d)",
        "measured": _NOT_MEASURED,
        "flags": {**_PROXY_ANCHOR_RESNET50, "dataset": "sop", "classes_per_batch": 90,
                  "samples_per_class": 2, "learning_rate": 6e-4, "freeze_bn": False,
                  "steps_per_epoch": 331, "head_warmup_steps": 331},
    },
    "inshop-resnet50": {
        "description": "In-Shop Clothes Retrieval (3,997 items train; 14,218 queries "
                       "against a 12,612-image gallery) with ImageNet ResNet-50 and Proxy "
                       "Anchor, the settings of the Proxy Anchor code's README for In-Shop "
                       "(given for BN-Inception): batch 180 = 90 x 2, lr 6e-4, warm-up 1 "
                       "epoch (144 steps), BatchNorm not frozen; the papers report R@1 "
                       "91.5 (Proxy Anchor paper, BN-Inception, 512-d; 91.9 in its "
                       "README) and 89.7 (MS paper, BN-Inception, 512-d)",
        "measured": _NOT_MEASURED,
        "flags": {**_PROXY_ANCHOR_RESNET50, "dataset": "inshop", "classes_per_batch": 90,
                  "samples_per_class": 2, "learning_rate": 6e-4, "freeze_bn": False,
                  "steps_per_epoch": 144, "head_warmup_steps": 144},
    },
}


def get(name):
    """The flag values of recipe `name`; a ValueError lists the known ones."""
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r} is not a shipped recipe: expected one of "
                         f"{sorted(RECIPES)} (see --list-recipes).")
    return dict(RECIPES[name]["flags"])


def _flag(key, value):
    """`key = value` as the command line writes it."""
    option = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return option if value else "--no-" + option[2:]
    if isinstance(value, str) and " " in value:
        return f"{option} '{value}'"
    return f"{option} {value}"


def describe():
    """One block of text per recipe: name, description, measured result, flags."""
    blocks = []
    for name, recipe in RECIPES.items():
        flags = " ".join(_flag(key, value) for key, value in recipe["flags"].items())
        blocks.append(f"{name}\n  {recipe['description']}\n  measured: {recipe['measured']}"
                      f"\n  flags: {flags}")
    return "\n".join(blocks)
