"""Validation classes for choosing the re-ranking defaults, disjoint from the test classes.

Usage: python -m benchmarks.rerank_validation OUT [--omniglot DIR] [--cub DIR]

Writes
* OUT/omniglot/images_background.npz (background characters 0-699, to train on) and
  OUT/omniglot/images_evaluation.npz (background characters 700-963: the validation
  classes), from the official Omniglot npz files in `--omniglot`;
* OUT/cub_validation.csv (path,label,split): CUB's 50 DML train classes, the first 35
  as `train` and the other 15 (036-050) as `test` (the validation classes), from the
  CUB folder `--cub`.

Train on each with `keras-dml train --data-dir ...` (Omniglot with `--image-size 28`),
then sweep with `python -m benchmarks.rerank RUN --methods ...`. CUB's test classes
(051-100) and Omniglot's evaluation characters are never seen.
"""

import argparse
import csv
import os

import numpy as np

OMNIGLOT_TRAIN = 700  # of the 964 background characters
CUB_TRAIN = 35  # of the 50 DML train classes


def omniglot(source, out):
    with np.load(os.path.join(source, "images_background.npz")) as data:
        images, labels = data["images"], data["labels"]
    os.makedirs(out, exist_ok=True)
    np.savez(os.path.join(out, "images_background.npz"), images=images[:OMNIGLOT_TRAIN],
             labels=labels[:OMNIGLOT_TRAIN])
    np.savez(os.path.join(out, "images_evaluation.npz"), images=images[OMNIGLOT_TRAIN:],
             labels=labels[OMNIGLOT_TRAIN:] - OMNIGLOT_TRAIN)


def cub(source, out_csv):
    with open(os.path.join(source, "images.txt")) as f:
        paths = [line.split()[1] for line in f if line.strip()]
    classes = sorted({path.split("/")[0] for path in paths})[:50]  # the DML train half
    with open(out_csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split"])
        for path in paths:
            label = path.split("/")[0]
            if label in classes:
                split = "train" if classes.index(label) < CUB_TRAIN else "test"
                writer.writerow([os.path.join(source, "images", path), label, split])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--omniglot", default="/work/shared/datasets/omniglot")
    parser.add_argument("--cub", default="/work/shared/datasets/cub200_subset/CUB_200_2011")
    args = parser.parse_args()
    omniglot(args.omniglot, os.path.join(args.out, "omniglot"))
    cub(args.cub, os.path.join(args.out, "cub_validation.csv"))
    print(f"written: {args.out}/omniglot/, {args.out}/cub_validation.csv")


if __name__ == "__main__":
    main()
