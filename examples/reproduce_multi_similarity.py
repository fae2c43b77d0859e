"""The multi-similarity supplementary: batch size, and BinLifted vs Binomial, on Omniglot.

Claims: Recall@1 of MS rises with the batch size (C x 4, from 40 to 320 images)
and then flattens; BinLifted (binomial deviance with a lifted-structure negative
term) is worse than Binomial. Every row runs the same number of steps, so a
larger batch also sees more images (as in the paper, which fixes iterations).

    python examples/reproduce_multi_similarity.py           # full: 400 steps x 2 seeds
    python examples/reproduce_multi_similarity.py --quick   # smoke run

Writes docs/figures/multi_similarity.{jsonl,md,png}.
"""

import sys

import reproduction
from reproduction import Row

from keras_dml import losses

NAME = "multi_similarity"
CLASSES = (10, 20, 40, 80)  # x 4 images: 40 to 320


def rows():
    batch = [Row(f"MS, batch {c * 4} ({c} x 4)", lambda: losses.MultiSimilarity(),
                 {"classes_per_batch": c, "samples_per_class": 4}, group="batch", x=c * 4)
             for c in CLASSES]
    return batch + [
        Row("Binomial (32 x 4)", lambda: losses.BinomialDeviance(), group="binomial"),
        Row("BinLifted (32 x 4)", lambda: losses.BinLifted(), group="binomial"),
    ]


def main(argv=None):
    args, _, _, summary = reproduction.run_table(
        NAME, __doc__.split("\n\n")[0], lambda args: rows(), steps=400, seeds=[0, 1],
        argv=argv)
    reproduction.write_table(NAME, args, reproduction.markdown(summary))
    plt = reproduction._pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), width_ratios=(2, 1))
    batch = [e for e in summary if e["group"] == "batch"]
    left.errorbar([e["x"] for e in batch], [e["R@1"] for e in batch],
                  yerr=reproduction.error_bars(batch), marker="o", capsize=3)
    left.set_xscale("log", base=2)
    left.set_xticks([e["x"] for e in batch], [str(int(e["x"])) for e in batch])
    left.set_xlabel("batch size (classes x 4 images)")
    left.set_ylabel(f"R@1 (%), {reproduction.seeds_text(batch)}")
    left.set_title(f"MultiSimilarity vs batch size ({args.steps} steps)\n{args.evaluated}",
                   fontsize=10)
    pair = [e for e in summary if e["group"] == "binomial"]
    right.bar([e["row"].split(" (")[0] for e in pair], [e["R@1"] for e in pair],
              yerr=reproduction.error_bars(pair), capsize=3, color=["tab:blue", "tab:red"])
    if pair:
        low = min(e["R@1"] - e["R@1 std"] for e in pair)
        right.set_ylim(max(0, low - 5), max(e["R@1"] + e["R@1 std"] for e in pair) + 2)
    right.set_ylabel(f"R@1 (%), {reproduction.seeds_text(pair)}")
    right.set_title("BinLifted vs Binomial (32 x 4)", fontsize=10)
    reproduction.save_figure(fig, f"{args.out_dir}/{NAME}.png", [left])
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
