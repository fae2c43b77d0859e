"""The unified view's Table 1 (pair weighting x pair mining) on the Omniglot protocol.

Rows (unified view, section 6.1): Binomial (binomial deviance on all pairs), VTHM
(weight 1 on the pairs valid-triplet hard mining keeps), Binomial + VTHM, RAW
(relative and absolute weighting, eq. 17, on all pairs), RAW + VTHM (= the
multi-similarity loss), RAW + distance-weighted sampling, RAW + semi-hard mining.
The paper's claim: VTHM helps both Binomial and RAW, RAW + VTHM is best, and
semi-hard or distance-weighted sampling do not help RAW.

    python examples/reproduce_unified_view.py            # full: 600 steps x 2 seeds
    python examples/reproduce_unified_view.py --quick    # smoke run

"VTHM" alone is `Contrastive(pos_margin=1, neg_margin=-1)` on the mined pairs: on
cosine similarities its value is sum (1 - S_ip) + sum (S_in + 1), so every kept pair
has weight exactly 1. Writes docs/figures/unified_view.{jsonl,md,png}.
"""

import sys

import reproduction
from reproduction import Row

from keras_dml import losses, mining

NAME = "unified_view"


def rows():
    vthm = mining.MultiSimilarityMiner  # epsilon 0.1, the paper's
    raw = losses.RelativeAbsoluteWeighting
    return [
        Row("Binomial", lambda: losses.BinomialDeviance(), group="Binomial"),
        Row("VTHM (weight 1)", lambda: losses.Contrastive(pos_margin=1.0, neg_margin=-1.0,
                                                          miner=vthm()), group="VTHM"),
        Row("Binomial + VTHM", lambda: losses.BinomialDeviance(miner=vthm()),
            group="Binomial"),
        Row("RAW", lambda: raw(mining=False), group="RAW"),
        Row("RAW + VTHM (= MS)", lambda: raw(), group="RAW"),
        Row("RAW + distance-weighted", lambda: raw(
            miner=mining.DistanceWeighted(dim=128, seed=0)), group="RAW"),
        Row("RAW + semi-hard", lambda: raw(miner=mining.SemiHardMiner()), group="RAW"),
    ]


def main(argv=None):
    args, _, _, summary = reproduction.run_table(
        NAME, __doc__.split("\n\n")[0], lambda args: rows(), steps=600, seeds=[0, 1],
        argv=argv)
    title = (f"Unified view Table 1 on Omniglot\n({args.steps} steps of 32 x 4, "
             f"3-block CNN from scratch)")
    reproduction.write_table(NAME, args, reproduction.markdown(summary))
    colors = [{"Binomial": "tab:blue", "VTHM": "tab:gray", "RAW": "tab:orange"}[e["group"]]
              for e in summary]
    reproduction.bar_figure(summary, f"{args.out_dir}/{NAME}.png", title, colors=colors)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
