"""ICE on the Omniglot protocol: the scale s ablation (Table 2) and ICE vs a normalised
softmax (CCE) at the same budget.

Claims (Wang et al. 2019, ICE): s = 1 does not learn usefully, Recall@1 grows from
s = 16 to s = 64 and drops at s = 80; ICE (instance-to-instance matching) beats
categorical cross entropy with class proxies (here `NormalizedSoftmax`, temperature
0.05 = scale 20, the normalised CCE the paper compares with).

    python examples/reproduce_ice.py            # full: 600 steps, seeds 0 and 1
    python examples/reproduce_ice.py --quick    # smoke run

docs/ice_s_ablation.md holds the earlier, longer ablation (90 x 2 batches, 800
steps, a 4-block CNN). Writes docs/figures/ice.{jsonl,md,png}.
"""

import sys

import reproduction
from reproduction import Row

from keras_dml import losses

NAME = "ice"
SCALES = (1, 16, 32, 64, 80)


def rows():
    return [Row(f"ICE s={s}", lambda s=s: losses.InstanceCrossEntropy(scale=s), group="ice",
                x=s) for s in SCALES] + [
        Row("NormalizedSoftmax (CCE, T=0.05)",
            lambda: losses.NormalizedSoftmax(num_classes=964), group="cce"),
    ]


def main(argv=None):
    args, _, _, summary = reproduction.run_table(
        NAME, __doc__.split("\n\n")[0], lambda args: rows(), steps=600, seeds=[0, 1],
        argv=argv)
    reproduction.write_table(NAME, args, reproduction.markdown(summary))
    plt = reproduction._pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ice = [e for e in summary if e["group"] == "ice"]
    ax.errorbar([e["x"] for e in ice], [e["R@1"] for e in ice],
                yerr=reproduction.error_bars(ice), marker="o", capsize=3,
                label="InstanceCrossEntropy")
    for e in summary:
        if e["group"] == "cce":
            ax.axhline(e["R@1"], color="tab:red", linestyle="--", label=e["row"])
            ax.axhspan(e["R@1"] - e["R@1 std"], e["R@1"] + e["R@1 std"], color="tab:red",
                       alpha=0.15)
    ax.set_xticks(list(SCALES))
    ax.set_xlabel("ICE scale s")
    ax.set_ylabel("R@1 (%)" + (", mean ± std over seeds" if len(args.seeds) > 1 else ""))
    ax.set_title(f"ICE scale ablation on Omniglot ({args.steps} steps of 32 x 4)",
                 fontsize=10)
    reproduction.save_figure(fig, f"{args.out_dir}/{NAME}.png", [ax])
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
