"""Recall@1 of every loss on the main job's protocol: the losses guide's R@1 column.

    python -m benchmarks.loss_recall [--losses NAME ...] [--seeds 0 1 2]
                                     [--out DIR] [--quick]

Each (loss, seed) is one `keras-dml train --loss NAME --seed S --no-export --no-plots`
in its own process (bundled Omniglot, the default epochs and steps); its `summary.json`
gives Recall@1 and MAP@R after training. A loss that needs `num_classes` gets it as
`keras-dml train` gives it (`make_loss`); other constructor arguments go in
`--loss-args NAME=JSON`. A run that fails is a row with its error, not a stop.

Writes DIR/loss_recall.md (loss | family | PML twin | R@1 mean +- spread | MAP@R |
seeds) and DIR/loss_recall.json (every run's figures, the machine). `--quick`: two
losses, seed 0, digits, 1 epoch of 5 steps: a check that the tool works, not figures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.__main__ import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: each registered loss's family, as the losses guide's table names it
FAMILIES = {
    "pair-based": ("Angular", "BalancedContrastive", "BinLifted", "BinomialDeviance",
                   "Circle", "Contrastive", "GeneralizedLiftedStructure", "Histogram",
                   "Instance", "InstanceCrossEntropy", "LiftedStructure", "LogRatio",
                   "Margin", "MultiSimilarity", "NCA", "NPair",
                   "RelativeAbsoluteWeighting", "SignalToNoiseRatioContrastive",
                   "SupervisedContrastive", "Triplet", "TupletMargin", "DynamicSoftMargin"),
    "proxy/classifier": ("ArcFace", "CosFace", "LargeMarginSoftmax", "NormalizedSoftmax",
                         "P2SGrad", "ProxyAnchor", "ProxyNCA", "SoftTriple", "SphereFace",
                         "SubCenterArcFace", "Manifold"),
    "ranking/AP": ("FastAP", "PNP", "RankedList", "SmoothAP"),
    "self-supervised/two-view": ("MultipleNegativesRanking", "NTXent", "VICReg"),
    "regulariser": ("IntraPairVariance", "ThresholdConsistentMargin"),
}
FAMILY = {loss: family for family, members in FAMILIES.items() for loss in members}

#: the loss's class in pytorch-metric-learning 2.9 (absent: no twin there)
PML_TWINS = {
    "Angular": "AngularLoss", "ArcFace": "ArcFaceLoss", "Circle": "CircleLoss",
    "DynamicSoftMargin": "DynamicSoftMarginLoss", "FastAP": "FastAPLoss",
    "Manifold": "ManifoldLoss", "PNP": "PNPLoss",
    "ThresholdConsistentMargin": "ThresholdConsistentMarginLoss",
    "Contrastive": "ContrastiveLoss", "CosFace": "CosFaceLoss",
    "GeneralizedLiftedStructure": "GeneralizedLiftedStructureLoss",
    "Histogram": "HistogramLoss", "Instance": "InstanceLoss",
    "IntraPairVariance": "IntraPairVarianceLoss",
    "LargeMarginSoftmax": "LargeMarginSoftmaxLoss", "LiftedStructure": "LiftedStructureLoss",
    "Margin": "MarginLoss", "MultiSimilarity": "MultiSimilarityLoss", "NCA": "NCALoss",
    "NPair": "NPairsLoss", "NTXent": "NTXentLoss",
    "NormalizedSoftmax": "NormalizedSoftmaxLoss", "P2SGrad": "P2SGradLoss",
    "ProxyAnchor": "ProxyAnchorLoss", "ProxyNCA": "ProxyNCALoss",
    "RankedList": "RankedListLoss", "RelativeAbsoluteWeighting": "MultiSimilarityLoss",
    "SignalToNoiseRatioContrastive": "SignalToNoiseRatioContrastiveLoss",
    "SmoothAP": "SmoothAPLoss", "SoftTriple": "SoftTripleLoss",
    "SphereFace": "SphereFaceLoss", "SubCenterArcFace": "SubCenterArcFaceLoss",
    "SupervisedContrastive": "SupConLoss", "Triplet": "TripletMarginLoss",
    "TupletMargin": "TupletMarginLoss", "VICReg": "VICRegLoss",
}

QUICK_LOSSES = ("MultiSimilarity", "ProxyAnchor")
QUICK_TRAIN = ("--dataset", "digits", "--epochs", "1", "--steps-per-epoch", "5")


def train_command(loss, seed, runs_dir, loss_args=None, extra=()):
    """The `keras-dml train` command of one (loss, seed) run, in `runs_dir`."""
    command = [sys.executable, "-m", "keras_dml.cli", "train", "--loss", loss,
               "--seed", str(seed), "--no-export", "--no-plots", "--runs-dir", runs_dir,
               "--run-name", f"{loss}-seed{seed}", "--overwrite", *extra]
    if loss_args:
        command += ["--loss-args", json.dumps(loss_args)]
    return command


def run_one(loss, seed, runs_dir, loss_args=None, extra=()):
    """Trains one (loss, seed) in its own process; its figures, or its error.

    Returns:
        {"loss", "seed", "recall@1", "map@r", "recall@1_before", "train_seconds"} from
        the run's summary.json, or {"loss", "seed", "error"} (stderr's last line).
    """
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(train_command(loss, seed, runs_dir, loss_args, extra),
                            cwd=ROOT, env=env, capture_output=True, text=True)
    summary_path = os.path.join(runs_dir, f"{loss}-seed{seed}", "summary.json")
    if result.returncode != 0 or not os.path.exists(summary_path):
        lines = result.stderr.strip().splitlines() or [f"exit code {result.returncode}"]
        return {"loss": loss, "seed": seed, "error": lines[-1]}
    with open(summary_path) as file:
        summary = json.load(file)
    after = summary.get("recall_after") or {}
    if "recall@1" not in after:
        return {"loss": loss, "seed": seed, "error": "the run measured no Recall@1"}
    return {"loss": loss, "seed": seed, "recall@1": after["recall@1"],
            "map@r": after.get("map@r"),
            "recall@1_before": (summary.get("recall_before") or {}).get("recall@1"),
            "train_seconds": summary.get("train_seconds")}


def aggregate(runs):
    """One row per loss, in first-run order: the mean and spread of its seeds.

    Returns:
        [{"loss", "family", "pml_twin", "recall@1", "recall@1_spread", "map@r",
          "seeds", "errors"}], the figures as fractions (None with no finished seed);
        spread is max - min over seeds.
    """
    rows = {}
    for run in runs:
        rows.setdefault(run["loss"], []).append(run)
    table = []
    for loss, seeds in rows.items():
        done = [run for run in seeds if "error" not in run]
        recalls = [run["recall@1"] for run in done]
        maps = [run["map@r"] for run in done if run["map@r"] is not None]
        table.append({
            "loss": loss, "family": FAMILY.get(loss, "-"), "pml_twin": PML_TWINS.get(loss, "-"),
            "recall@1": statistics.fmean(recalls) if recalls else None,
            "recall@1_spread": max(recalls) - min(recalls) if recalls else None,
            "map@r": statistics.fmean(maps) if maps else None,
            "seeds": [run["seed"] for run in done],
            "errors": [f"seed {run['seed']}: {run['error']}" for run in seeds
                       if "error" in run]})
    return table


def _percent(value):
    return "-" if value is None else f"{100 * value:.1f}"


def markdown(table, protocol):
    """The Markdown table of `aggregate`'s rows, under a line naming `protocol`."""
    lines = [f"Recall@1 and MAP@R after training, in %, {protocol}.", "",
             "| loss | family | PML twin | R@1 (mean +- spread) | MAP@R | seeds |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in table:
        recall = "-" if row["recall@1"] is None else \
            f"{_percent(row['recall@1'])} +- {_percent(row['recall@1_spread'])}"
        seeds = " ".join(map(str, row["seeds"])) or "failed: " + "; ".join(row["errors"])
        lines.append(f"| `{row['loss']}` | {row['family']} | {row['pml_twin']} | {recall} "
                     f"| {_percent(row['map@r'])} | {seeds} |")
    return "\n".join(lines) + "\n"


def _loss_args(pairs):
    """`--loss-args NAME=JSON ...` as {NAME: dict}; a clear error on a malformed one."""
    parsed = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not name or not isinstance(value, dict):
            raise SystemExit(f"--loss-args {pair!r}: expected NAME={{JSON object}}.")
        parsed[name] = value
    return parsed


def main(argv=None):
    from keras_dml.losses import LOSSES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", nargs="+", default=None, metavar="NAME",
                        help="default: every registered loss (--quick: two)")
    parser.add_argument("--seeds", nargs="+", type=int, default=None,
                        help="default 0 1 2 (--quick: 0)")
    parser.add_argument("--loss-args", nargs="+", default=[], metavar="NAME=JSON",
                        help='constructor arguments of a loss, e.g. Margin=\'{"nu": 0.1}\'')
    parser.add_argument("--out", default=os.path.join("runs", "loss_recall"), metavar="DIR",
                        help="default %(default)s")
    parser.add_argument("--quick", action="store_true",
                        help="digits, 1 epoch of 5 steps: checks the tool, measures nothing")
    args = parser.parse_args(argv)
    loss_args = _loss_args(args.loss_args)
    losses = args.losses or (QUICK_LOSSES if args.quick else LOSSES)
    unknown = [name for name in losses if name not in LOSSES]
    if unknown:
        parser.error(f"unknown loss {unknown[0]!r}: expected one of {', '.join(LOSSES)}")
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    extra = QUICK_TRAIN if args.quick else ()
    protocol = ("--quick (digits, 1 epoch x 5 steps; not the main job)" if args.quick
                else "the main job (`keras-dml train --loss NAME`, bundled Omniglot, "
                "default epochs and steps)")
    os.makedirs(args.out, exist_ok=True)
    runs_dir = os.path.abspath(os.path.join(args.out, "runs"))
    runs = []
    for loss in losses:
        for seed in seeds:
            runs.append(run_one(loss, seed, runs_dir, loss_args.get(loss), extra))
            print(json.dumps(runs[-1]), flush=True)
    table = aggregate(runs)
    text = markdown(table, protocol)
    with open(os.path.join(args.out, "loss_recall.md"), "w") as file:
        file.write(text)
    with open(os.path.join(args.out, "loss_recall.json"), "w") as file:
        json.dump({"protocol": protocol, "machine": machine(os.cpu_count()),
                   "rows": table, "runs": runs, "loss_args": loss_args}, file, indent=1)
    print(text)


if __name__ == "__main__":
    main()
