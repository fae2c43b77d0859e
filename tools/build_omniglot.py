"""Builds keras_dml/datasets/omniglot_28x28.npz, the Omniglot copy shipped in the package.

Source: the Omniglot dataset of Lake, Salakhutdinov and Tenenbaum, "Human-level
concept learning through probabilistic program induction", Science 350 (2015),
https://github.com/brendenlake/omniglot (MIT licence). The input is the pair of
npz files `images_background.npz` and `images_evaluation.npz` (arrays `images`,
bool `(characters, 20, 105, 105)` with True = white background, and `labels`,
int `(characters, 20)`), which hold the official `images_background.zip` and
`images_evaluation.zip` PNGs pixel for pixel, characters in the official order
(alphabets sorted, then characters, then drawings).

Output: one compressed npz (about 4.1 MB) with
    background  uint8 (964, 20, 28, 28)   the 964 training characters
    evaluation  uint8 (659, 20, 28, 28)   the 659 held-out characters
Each 105 x 105 drawing is inverted (ink = 255 on a dark background) and
area-resized to 28 x 28 (every output pixel is the mean of the 3.75 x 3.75 input
pixels it covers, exact area weights), then rounded to uint8.

    python tools/build_omniglot.py --source ../shared/datasets/omniglot
"""

import argparse
import os

import numpy as np

SIZE = 28
OUTPUT = os.path.join(os.path.dirname(__file__), os.pardir, "keras_dml", "datasets",
                      "omniglot_28x28.npz")
EXPECTED = {"background": 964, "evaluation": 659}


def area_weights(n_in, n_out):
    """(n_out, n_in) matrix: row i averages the input interval [i, i + 1) * n_in / n_out."""
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        low, high = i * scale, (i + 1) * scale
        for j in range(int(np.floor(low)), int(np.ceil(high))):
            weights[i, j] = max(0.0, min(high, j + 1) - max(low, j))
    return weights / scale


def ink_28x28(white_background):
    """bool (C, S, 105, 105), True = background -> uint8 (C, S, 28, 28), ink = 255."""
    ink = (~white_background).astype(np.float64)
    rows = area_weights(ink.shape[-2], SIZE)
    cols = area_weights(ink.shape[-1], SIZE)
    resized = rows @ ink @ cols.T  # (28, 105) @ (..., 105, 105) @ (105, 28)
    return np.round(resized * 255).astype(np.uint8)


def build(source, output=OUTPUT):
    arrays = {}
    for part, characters in EXPECTED.items():
        with np.load(os.path.join(source, f"images_{part}.npz"), allow_pickle=False) as raw:
            images, labels = raw["images"], raw["labels"]
        if images.shape != (characters, 20, 105, 105) or images.dtype != bool:
            raise ValueError(f"images_{part}.npz: expected bool ({characters}, 20, 105, 105), "
                             f"got {images.dtype} {images.shape}.")
        if not (labels == np.arange(characters)[:, None]).all():
            raise ValueError(f"images_{part}.npz: labels must be the row index (character id).")
        arrays[part] = ink_28x28(images)
    np.savez_compressed(output, **arrays)
    return os.path.normpath(output)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=os.path.join("..", "shared", "datasets", "omniglot"),
                        help="folder holding images_background.npz and images_evaluation.npz")
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args()
    path = build(args.source, args.output)
    print(f"{path}: {os.path.getsize(path) / 1e6:.2f} MB")
