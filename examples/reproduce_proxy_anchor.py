"""Proxy Anchor's slides: Recall@1 against training steps for ProxyAnchor, ProxyNCA
and MultiSimilarity on the Omniglot protocol.

Claim (Kim et al. 2020, slides): Proxy Anchor converges fastest and ends highest
among the proxy losses (and at least on par with the pair-based MS). Both proxy
losses use the paper's 100x proxy learning rate; everything else is the protocol.

    python examples/reproduce_proxy_anchor.py           # full: 1,000 steps, eval every 100
    python examples/reproduce_proxy_anchor.py --quick   # smoke run

Writes docs/figures/proxy_anchor.{jsonl,md,png}.
"""

import sys

import numpy as np

import reproduction
from reproduction import Row

from keras_dml import losses

NAME = "proxy_anchor"


def rows(eval_every):
    curve = {"eval_every": eval_every}
    return [
        Row("ProxyAnchor (proxy lr x100)",
            lambda: losses.ProxyAnchor(964, proxy_lr_multiplier=100), curve),
        Row("ProxyNCA (proxy lr x100)",
            lambda: losses.ProxyNCA(964, proxy_lr_multiplier=100), curve),
        Row("MultiSimilarity", lambda: losses.MultiSimilarity(), curve),
    ]


def main(argv=None):
    args, table_rows, results, summary = reproduction.run_table(
        NAME, __doc__.split("\n\n")[0],
        lambda args: rows(args.eval_every or max(1, args.steps // 10)), steps=1000, seeds=[0],
        argv=argv, extra=lambda p: p.add_argument("--eval-every", type=int, default=None,
                                                  help="default steps / 10"))
    series, text = {}, reproduction.markdown(summary)
    text += "\n\n| row | step | R@1 (mean over seeds) |\n|---|---|---|"
    for row in table_rows:
        curves = [np.array(r["curve"]) for r in results if r["row"] == row.name]
        if not curves:
            continue
        stacked = np.stack(curves)  # (seeds, points, (step, R@1, MAP@R))
        steps, r1 = stacked[0, :, 0], stacked[:, :, 1]
        std = r1.std(0, ddof=1) if len(curves) > 1 else np.zeros(len(steps))
        series[row.name] = list(zip(steps, r1.mean(0), std))
        text += "".join(f"\n| {row.name} | {int(s)} | {m:.1f} |"
                        for s, m in zip(steps, r1.mean(0)))
    reproduction.write_table(NAME, args, text)
    reproduction.line_figure(series, f"{args.out_dir}/{NAME}.png",
                             f"Recall@1 during training on Omniglot (32 x 4, "
                             f"{len(args.seeds)} seed{'s' if len(args.seeds) > 1 else ''})",
                             "training step")
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
