"""keras_dml's loss steps at two git revisions, side by side: a refactoring's A/B.

    python -m benchmarks.compare_revisions --before REV [--after REV] [--only TEXT ...]

Each loss case of `benchmarks.cases` runs its keras_dml system twice, once
importing `keras_dml` from each revision, every side in its own worker process
with rounds interleaved (`processes.compare`), so load drift hits both alike.
The harness itself (this folder) is the current one for both sides; `--after`
defaults to the working tree. Since a case's peer is the same on both sides,
after / before is also how the case's keras_dml / peer ratio moves. A case whose
configuration the older revision does not accept is reported as failing there.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile

from benchmarks import cases, processes


def materialise(revision, into):
    """A source root at `into` holding `keras_dml` at `revision` and this harness."""
    os.makedirs(into)
    archive = subprocess.run(["git", "archive", revision, "keras_dml"], cwd=processes.ROOT,
                             check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as tar:
        tar.write(archive)
        tar.seek(0)
        tarfile.open(fileobj=tar).extractall(into, filter="data")
    os.symlink(os.path.join(processes.ROOT, "benchmarks"), os.path.join(into, "benchmarks"))
    return into


def compare_case(case, mode, roots, threads, repeats=None):
    """{"before", "after"} timing summaries of the case's keras_dml system, or an error."""
    factory, kwargs = case.systems_for(mode)["keras_dml"]
    systems = {side: (factory, kwargs) for side in roots}
    rounds, warmup, inner = case.timing(mode)
    try:
        result = processes.compare(systems, repeats or rounds, warmup, inner, threads,
                                   roots=roots)
    except RuntimeError as error:
        return {"error": str(error).strip().splitlines()[-1]}
    ratios = [a / b for a, b in zip(result["after"]["samples"], result["before"]["samples"])]
    return {**{side: result[side] for side in roots}, "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios)}


def markdown(rows, before, after):
    lines = [f"| case | {before} (ms) | {after} (ms) | after / before [min-max] |",
             "|---|---|---|---|"]
    for name, row in rows:
        if "error" in row:
            lines.append(f"| {name} | fails: {row['error'][:80]} | | |")
            continue
        lines.append(f"| {name} | {1e3 * row['before']['median']:.3g} | "
                     f"{1e3 * row['after']['median']:.3g} | {row['ratio']:.2f} "
                     f"[{row['ratio_min']:.2f}-{row['ratio_max']:.2f}] |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_revisions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, metavar="REV", help="the older revision")
    parser.add_argument("--after", default=None, metavar="REV",
                        help="the newer revision (default: the working tree)")
    parser.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                        help="loss cases whose name contains one of these")
    parser.add_argument("--mode", choices=("quick", "full", "smoke"), default="quick")
    parser.add_argument("--repeats", type=int, default=None,
                        help="rounds per case (default: the case's own for the mode)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    chosen = [case for case in cases.CASES if case.group == "losses"
              and (not args.only or any(text in case.name for text in args.only))]
    if not chosen:
        parser.error(f"--only {' '.join(args.only)} matches no loss case")
    with tempfile.TemporaryDirectory() as scratch:
        roots = {"before": materialise(args.before, os.path.join(scratch, "before")),
                 "after": (materialise(args.after, os.path.join(scratch, "after"))
                           if args.after else processes.ROOT)}
        rows = []
        for case in chosen:
            print(f"[{case.name}] ...", file=sys.stderr, flush=True)
            rows.append((case.name, compare_case(case, args.mode, roots, args.threads,
                                                    args.repeats)))
    print(markdown(rows, args.before, args.after or "working tree"))


if __name__ == "__main__":
    main()
