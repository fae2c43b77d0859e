"""What the reproduce_<paper>.py scripts share: rows x seeds on the Omniglot protocol,
a Markdown table, a figure with error bars over seeds.

A script lists its rows (`Row(name, make_loss, protocol keyword arguments)`) and
calls `main(...)`. Every finished run is appended to `<out-dir>/<name>.jsonl`, and
runs already there (same row, seed and steps) are not run again, so a long
reproduction can be stopped and resumed. `--quick` is the smoke version (a few
steps, 10 test characters, one seed, written to a temporary folder unless
`--out-dir` is given); it checks that every row runs, not the paper's claim.
"""

import argparse
import dataclasses
import json
import os
import tempfile
import time

import numpy as np

import omniglot_protocol as protocol

FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                       "figures")
QUICK = {"steps": 2, "seeds": [0], "test_classes": 10, "run_eagerly": True}


@dataclasses.dataclass
class Row:
    """One configuration: `make_loss()` builds a fresh loss; `protocol` are extra
    `run_protocol` keyword arguments (or a callable of (seed, steps) returning them);
    `x` places it on a line figure."""
    name: str
    make_loss: callable
    protocol: object = dataclasses.field(default_factory=dict)
    group: str = ""
    x: float = None


def parse_args(description, steps, seeds, argv=None, extra=None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK['steps']} steps, one seed, 10 test characters")
    parser.add_argument("--steps", type=int, default=None, help=f"default {steps}")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help=f"default {seeds}")
    parser.add_argument("--out-dir", default=None,
                        help="table, figure and results (default docs/figures; --quick: a "
                        "temporary folder)")
    parser.add_argument("--data", default=None, help="folder with the Omniglot npz files")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", nargs="+", default=None, metavar="NAME",
                        help="run only the rows whose name starts with one of these (the "
                        "table and figure still show every row's results)")
    if extra:
        extra(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = args.steps or QUICK["steps"]
        args.seeds = args.seeds or QUICK["seeds"]
        args.out_dir = args.out_dir or tempfile.mkdtemp(prefix="keras_dml_quick_")
        args.test_classes, args.run_eagerly = QUICK["test_classes"], QUICK["run_eagerly"]
        args.evaluated = f"{QUICK['test_classes']} held-out characters (--quick)"
    else:
        args.steps, args.seeds = args.steps or steps, args.seeds or seeds
        args.out_dir, args.test_classes, args.run_eagerly = args.out_dir or FIGURES, None, False
        args.evaluated = "659 held-out Omniglot characters"
    os.makedirs(args.out_dir, exist_ok=True)
    return args


def _read(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_rows(name, rows, args):
    """Runs every (row, seed) not yet in `<out-dir>/<name>.jsonl`; returns all results."""
    path = os.path.join(args.out_dir, f"{name}.jsonl")
    done = {(r["row"], r["seed"], r["steps"]) for r in _read(path)}
    for row in rows:
        if args.rows and not row.name.startswith(tuple(args.rows)):
            continue
        for seed in args.seeds:
            if (row.name, seed, args.steps) in done:
                continue
            extra = row.protocol(seed, args.steps) if callable(row.protocol) else row.protocol
            started = time.time()
            result = protocol.run_protocol(row.make_loss(), steps=args.steps, seed=seed,
                                           test_classes=args.test_classes,
                                           run_eagerly=args.run_eagerly,
                                           data_dir=args.data, **extra)
            record = {"row": row.name, "group": row.group, "x": row.x, "seed": seed,
                      **result, "wall_seconds": time.time() - started,
                      "load": os.getloadavg()[0]}
            print(json.dumps({k: v for k, v in record.items() if k != "curve"}), flush=True)
            protocol.append_result(path, record)
    wanted = {(row.name, seed) for row in rows for seed in args.seeds}
    return [r for r in _read(path) if r["steps"] == args.steps
            and (r["row"], r["seed"]) in wanted]


def error_bars(entries, metric="R@1"):
    """The std over seeds of each entry for matplotlib's yerr/xerr; None when every
    entry has one seed (no bar rather than a bar of length 0)."""
    if max((e["n"] for e in entries), default=0) < 2:
        return None
    return [e[metric + " std"] for e in entries]


def seeds_text(entries):
    """How many seeds the entries average: "one seed", "mean ± std over 3 seeds" or
    "mean ± std over 2-3 seeds"."""
    counts = sorted({e["n"] for e in entries}) or [1]
    if counts[-1] == 1:
        return "one seed"
    span = f"{counts[-1]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"mean ± std over {span} seeds"


def summarize(rows, results, metrics=("R@1", "R@8", "MAP@R")):
    """Per row (in order): name, group, x, n seeds, and mean / std of each metric."""
    table = []
    for row in rows:
        mine = [r for r in results if r["row"] == row.name]
        if not mine:
            continue
        entry = {"row": row.name, "group": row.group, "x": row.x, "n": len(mine),
                 "train_seconds": float(np.mean([r["train_seconds"] for r in mine]))}
        for metric in metrics:
            values = np.array([r[metric] for r in mine])
            entry[metric] = float(values.mean())
            entry[metric + " std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        table.append(entry)
    return table


def markdown(summary, metrics=("R@1", "R@8", "MAP@R")):
    head = "| row | " + " | ".join(metrics) + " | seeds | train s (mean) |"
    lines = [head, "|---" * (len(metrics) + 3) + "|"]
    for entry in summary:
        cells = [f"{entry[m]:.1f} ± {entry[m + ' std']:.1f}" if entry["n"] > 1
                 else f"{entry[m]:.1f}" for m in metrics]
        lines.append(f"| {entry['row']} | " + " | ".join(cells)
                     + f" | {entry['n']} | {entry['train_seconds']:.0f} |")
    return "\n".join(lines)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_figure(summary, path, title, evaluated, metric="R@1", colors=None):
    """Horizontal bars of `metric` per row, error bars = std over seeds (when > 1)."""
    plt = _pyplot()
    names = [e["row"] for e in summary]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.4))
    ax.barh(range(len(names)), [e[metric] for e in summary],
            xerr=error_bars(summary, metric), capsize=3,
            color=colors or "tab:blue", alpha=0.85)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    low = min(e[metric] - e[metric + " std"] for e in summary)
    high = max(e[metric] + e[metric + " std"] for e in summary)
    pad = max(1.0, 0.15 * (high - low))
    ax.set_xlim(max(0.0, low - pad), min(100.0, high + pad))
    for i, e in enumerate(summary):
        ax.text(e[metric] + e[metric + " std"] + 0.05 * pad, i, f"{e[metric]:.1f}",
                va="center", fontsize=8)
    ax.set_xlabel(f"{metric} (%) on {evaluated}\n{seeds_text(summary)}")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def line_figure(series, path, title, xlabel, ylabel="R@1 (%)", logx=False):
    """One line per label: `series[label] = [(x, mean, std), ...]`."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, points in series.items():
        points = sorted(points)
        xs, means, stds = zip(*points)
        ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=label)
    if logx:
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for points in series.values() for p in points})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path, [ax])


def write_table(name, args, text):
    path = os.path.join(args.out_dir, f"{name}.md")
    with open(path, "w") as f:
        f.write(text + "\n")
    print(text)
    return path


def run_table(name, description, make_rows, steps, seeds, argv=None, extra=None):
    """Parse the command line, run every (row, seed) not done yet, and summarise:
    returns (args, rows, results, summary). `make_rows(args)` lists the rows."""
    args = parse_args(description, steps=steps, seeds=seeds, argv=argv, extra=extra)
    protocol.set_threads(args.threads)
    rows = make_rows(args)
    results = run_rows(name, rows, args)
    return args, rows, results, summarize(rows, results)


def save_figure(fig, path, axes=()):
    """Grid and legend on `axes`, then a tight PNG at `path`."""
    plt = _pyplot()
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
