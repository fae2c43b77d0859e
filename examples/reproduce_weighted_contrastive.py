"""Weighted contrastive: balanced contrastive with and without importance weights
across batch designs, on the Omniglot protocol.

Claim (Hong, Park and Kim, sections 4-5): a mini-batch loss is a biased estimate of
the full-data loss whose bias depends on how the batch is drawn; weighting each
sampled pair by W_ij = P_U(i, j) / Q(i, j) (eq. 23-25) removes it, so with the
weights the result should not depend on the batch design and without them it
should. Designs, all of 128 images: p-random (p = 0.5, 64 pairs), (m, n)-group
with (2, 64) and (16, 8), and the protocol's C x k = 32 x 4 (the (4, 32) group).
"Without" keeps the same sampled pairs with W = 1; both keep eta (eq. 16).

    python examples/reproduce_weighted_contrastive.py          # full: 400 steps, 1 seed
    python examples/reproduce_weighted_contrastive.py --quick  # smoke run

The spread (max - min R@1 across designs) is reported for each. Writes
docs/figures/weighted_contrastive.{jsonl,md,png}.
"""

import sys

import numpy as np
import tensorflow as tf

import omniglot_protocol as protocol
import reproduction
from reproduction import Row

from keras_dml import losses
from keras_dml.data.designs import GroupDesign, RandomPairDesign, RandomPairSampler

NAME = "weighted_contrastive"
DESIGNS = [
    ("p-random (p=0.5, 64 pairs)", RandomPairDesign(0.5, 64)),
    ("(m, n)-group (2, 64)", GroupDesign(m=2, n=64)),
    ("(m, n)-group (16, 8)", GroupDesign(m=16, n=8)),
    ("C x k = 32 x 4", GroupDesign(m=4, n=32)),
]


class SamePairsUnweighted(losses.BalancedContrastive):
    """The design's sampled pairs (W > 0) all weighted 1: eq. 23 without importance."""

    def importance_weights(self, labels):
        return tf.cast(super().importance_weights(labels) > 0, tf.float32)


def design_order(design, labels, steps, seed):
    """(steps, 128) training indices drawn by `design`."""
    if isinstance(design, RandomPairDesign):
        sampler = RandomPairSampler(labels, design.p, design.num_pairs, seed=seed)
        return np.stack([sampler.next_batch() for _ in range(steps)])
    return protocol.batch_order(labels, design.n, design.m, steps, seed)


def rows(data_dir=None):
    labels = protocol.load_data(data_dir)[1]
    counts = np.bincount(labels)
    table = []
    for weighted in (True, False):
        for label, design in DESIGNS:
            cls = losses.BalancedContrastive if weighted else SamePairsUnweighted
            table.append(Row(
                f"{'with' if weighted else 'without'} weights, {label}",
                lambda cls=cls, design=design: cls(class_counts=counts, design=design),
                lambda seed, steps, design=design: {
                    "order": design_order(design, labels, steps, seed)},
                group="with" if weighted else "without"))
    return table


def main(argv=None):
    args, _, _, summary = reproduction.run_table(
        NAME, __doc__.split("\n\n")[0], lambda args: rows(args.data), steps=400, seeds=[0],
        argv=argv)
    text = reproduction.markdown(summary)
    for group in ("with", "without"):
        values = [e["R@1"] for e in summary if e["group"] == group]
        if values:
            text += (f"\n\nSpread of R@1 across designs {group} importance weights: "
                     f"{max(values) - min(values):.1f} points "
                     f"({min(values):.1f} to {max(values):.1f}).")
    reproduction.write_table(NAME, args, text)
    plt = reproduction._pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for offset, group, color in ((-width / 2, "with", "tab:green"),
                                 (width / 2, "without", "tab:gray")):
        entries = [e for e in summary if e["group"] == group]
        ax.bar(np.arange(len(entries)) + offset, [e["R@1"] for e in entries], width,
               yerr=reproduction.error_bars(entries), capsize=3, color=color,
               label=f"{group} importance weights")
    ax.set_xticks(range(len(DESIGNS)), [label for label, _ in DESIGNS], fontsize=8)
    values = [e["R@1"] for e in summary]
    ax.set_ylim(max(0, min(values) - 8), min(100, max(values) + 4))
    ax.set_xlabel("batch design (128 images per batch)")
    ax.set_ylabel("R@1 (%)" + (", mean ± std over seeds" if len(args.seeds) > 1 else ""))
    ax.set_title(f"Balanced contrastive with / without importance weights ({args.steps} "
                 "steps)", fontsize=10)
    reproduction.save_figure(fig, f"{args.out_dir}/{NAME}.png", [ax])
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
