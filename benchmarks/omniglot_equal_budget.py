"""Equal-budget table: keras_dml against pytorch-metric-learning on the Omniglot protocol.

Each run is its own process (examples/omniglot_protocol.py for keras_dml,
benchmarks/pml_omniglot.py for PML), one after the other, same steps, seed,
batches, threads and CNN. Results are appended as JSON lines to --out (runs
already there are skipped, so an interrupted table resumes), and the Markdown
table is printed from that file:

    python benchmarks/omniglot_equal_budget.py --steps 2000 --out runs/equal_budget.jsonl
    python benchmarks/omniglot_equal_budget.py --table-only --out runs/equal_budget.jsonl

Runs go in priority order: both libraries' defaults first, then the papers'
recommended settings where they differ from a default, then the losses beyond the
papers. `--rows NAME ...` runs (and tabulates) only the rows whose name starts with
one of these.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOL = os.path.join(HERE, "..", "examples", "omniglot_protocol.py")
PML = os.path.join(HERE, "pml_omniglot.py")

# (table row, keras_dml loss or None, its JSON args, PML loss, PML variant or None);
# defaults first.
RUNS = [
    ("MultiSimilarity", "MultiSimilarity", {}, "MultiSimilarity", "default"),
    ("ProxyAnchor", "ProxyAnchor", {}, "ProxyAnchor", "default"),
    ("InstanceCrossEntropy", "InstanceCrossEntropy", {}, None, None),
    ("Contrastive", "Contrastive", {}, "Contrastive", "default"),
    ("Triplet (semi-hard)", "Triplet", {"mining": "semihard"}, "Triplet", "default"),
    ("NormalizedSoftmax", "NormalizedSoftmax", {}, "NormalizedSoftmax", "default"),
    ("SoftTriple", "SoftTriple", {}, "SoftTriple", "default"),
    ("NCA", "NCA", {}, "NCA", "default"),
    ("ProxyAnchor, proxy lr x100", "ProxyAnchor", {"proxy_lr_multiplier": 100}, "ProxyAnchor",
     "paper"),
    ("Contrastive, PML with keras_dml's margins", None, {}, "Contrastive", "paper"),
    ("Triplet (semi-hard), PML with margin 0.1 cosine", None, {}, "Triplet", "paper"),
    ("NCA, scale 1 (MS supplementary eq. 1) on both sides", "NCA", {"scale": 1.0}, "NCA",
     "paper"),
    # the losses beyond the papers, with the same defaults on both sides
    ("ArcFace", "ArcFace", {}, "ArcFace", "default"),
    ("CosFace", "CosFace", {}, "CosFace", "default"),
    ("SupervisedContrastive", "SupervisedContrastive", {}, "SupervisedContrastive", "default"),
    ("Circle", "Circle", {}, "Circle", "default"),
    ("SmoothAP", "SmoothAP", {}, "SmoothAP", "default"),
]


def _key(row):
    return (row["system"].split()[0], row["loss"], json.dumps(row.get("loss_args", {}),
                                                             sort_keys=True),
            row.get("variant"), row["steps"], row["seed"])


def _done(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _selected(rows):
    return [run for run in RUNS if not rows or run[0].startswith(tuple(rows))]


def commands(args):
    """(key, command) of every run of the selected rows, in priority order."""
    common = ["--steps", str(args.steps), "--seed", str(args.seed), "--threads",
              str(args.threads), "--out", args.out]
    for _, loss, loss_args, pml_loss, variant in _selected(args.rows):
        if loss is not None:
            yield (("keras_dml", loss, json.dumps(loss_args, sort_keys=True), None, args.steps,
                    args.seed),
                   [sys.executable, PROTOCOL, "--loss", loss, "--loss-args",
                    json.dumps(loss_args)] + common)
        if variant is not None:
            yield (("pml", pml_loss, "{}", variant, args.steps, args.seed),
                   [sys.executable, PML, "--loss", pml_loss, "--variant", variant] + common)


def table(rows, steps, seed, names=None):
    """Markdown: one line per selected RUNS entry, keras_dml and PML side by side, then the
    CPUs and the range of load averages the shown runs were measured at."""
    by_key = {_key(r): r for r in rows}
    shown = []
    lines = ["| loss | keras_dml R@1 | R@8 | MAP@R | train s | PML R@1 | R@8 | MAP@R | "
             "train s | keras - PML |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, loss, loss_args, pml_loss, variant in _selected(names):
        keras_row = by_key.get(("keras_dml", loss, json.dumps(loss_args, sort_keys=True), None,
                                steps, seed)) if loss else None
        pml_row = by_key.get(("pml", pml_loss, "{}", variant, steps, seed)) \
            if variant else None

        def cells(row):
            if row is None:
                return ["-"] * 4
            return [f"{row['R@1']:.1f}", f"{row['R@8']:.1f}", f"{row['MAP@R']:.1f}",
                    f"{row['train_seconds']:.0f}"]

        shown += [row for row in (keras_row, pml_row) if row]
        gap = (f"{keras_row['R@1'] - pml_row['R@1']:+.1f}" if keras_row and pml_row else "-")
        lines.append(f"| {name} | " + " | ".join(cells(keras_row) + cells(pml_row))
                     + f" | {gap} |")
    if shown:
        cpus = sorted({row.get("cpu", "CPU not recorded") for row in shown})
        loads = [row["load"] for row in shown if "load" in row]
        lines.append("\nCPU: " + "; ".join(cpus) + (
            f"; load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True, help="JSON-lines file of results")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--rows", nargs="+", default=None, metavar="NAME",
                        help="only the table rows whose name starts with one of these")
    args = parser.parse_args(argv)
    if not args.table_only:
        for key, command in commands(args):
            if key in {_key(r) for r in _done(args.out)}:
                continue
            print(" ".join(command[1:]), flush=True)
            subprocess.run(command, check=False)
    print(table(_done(args.out), args.steps, args.seed, args.rows))


if __name__ == "__main__":
    main()
