"""keras_dml's Omniglot step against PML's on both CPU kinds, in one interleaved run.

    python -m benchmarks.cpu_kinds [--quick] [--kinds native avx2]
        [--systems tf tf:stock tf:jit tf:onednn_off ...] [--steps 20] [--rounds 5]

An AVX-512 machine stands in for an AVX2 one with `ONEDNN_MAX_CPU_ISA=AVX2` (oneDNN:
TensorFlow's and PyTorch's kernels) and `XLA_FLAGS=--xla_cpu_max_isa=AVX2` (XLA: JAX and
`jit_compile`); on an AVX2 machine "native" is the AVX2 kind itself. Every system runs
in its own process (`processes.compare`, rounds interleaved in random order), once
per kind: PML's twin (`torch_systems.omniglot_train`, the bundled 28 x 28 Omniglot,
width 32, MultiSimilarity + miner) and each of `--systems`:

- "tf", "jax", "torch": the main job's step (`keras-dml train`'s cnn3 and head,
  MultiSimilarity, 32 x 4) on that Keras backend;
- "tf:FORM": the same on TensorFlow with cnn3's layers of `step_variants.LAYER_FORMS`
  ("tf:stock" is the plain-Keras network);
- "tf:jit": with `jit_compile=True`; "tf:onednn_off": `TF_ENABLE_ONEDNN_OPTS=0`;
  "tf:inter1": one inter-op thread (`TF_NUM_INTEROP_THREADS=1`).

The report gives each system's median time per step [interquartile range], its ratio
to PML on the same kind (median [range] over rounds) and, with both kinds, the ratio
of its AVX2 time to its native time; the machine (`machine_info`) and the load average
before and after. `--quick` runs 10 steps x 3 rounds.
"""

import argparse
import os
import statistics
import sys

from benchmarks import machine_info, processes
from benchmarks.__main__ import command_line, write_json

KINDS = {"native": {}, "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2",
                                "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}}
_VARIANT = "benchmarks.step_variants:main_job_variant"
_TF = {"KERAS_BACKEND": "tensorflow"}
#: {system: (factory, kwargs, environment)} (kwargs without `steps`)
SYSTEMS = {
    "pml": ("benchmarks.torch_systems:omniglot_train", {"width": 32, "bundled": True}, {}),
    "tf": (_VARIANT, {}, _TF),
    "jax": (_VARIANT, {}, {"KERAS_BACKEND": "jax"}),
    "torch": (_VARIANT, {}, {"KERAS_BACKEND": "torch"}),
    "tf:jit": (_VARIANT, {"jit_compile": True}, _TF),
    "tf:onednn_off": (_VARIANT, {}, {**_TF, "TF_ENABLE_ONEDNN_OPTS": "0"}),
    "tf:inter1": (_VARIANT, {}, {**_TF, "TF_NUM_INTEROP_THREADS": "1"}),
    **{f"tf:{form}": (_VARIANT, {"layers": form}, _TF)
       for form in ("stock", "stock_conv", "stock_bn", "stock_pool", "relu_first",
                    "channels_first")},
}
DEFAULT_SYSTEMS = ("tf", "tf:stock")


def kind_environment(kind, environ=None):
    """The variables that make a process run as `kind` ("native" or "avx2"); XLA_FLAGS
    keeps the flags already in `environ` (default `os.environ`)."""
    env = dict(KINDS[kind])
    inherited = (environ if environ is not None else os.environ).get("XLA_FLAGS", "")
    if "XLA_FLAGS" in env and inherited:
        env["XLA_FLAGS"] = f"{inherited} {env['XLA_FLAGS']}"
    return env


def plan(systems, kinds, steps):
    """({"system@kind": (factory, kwargs)}, {"system@kind": environment}): PML and each
    of `systems` under each of `kinds`."""
    specs, envs = {}, {}
    for kind in kinds:
        for name in ("pml", *systems):
            factory, kwargs, env = SYSTEMS[name]
            specs[f"{name}@{kind}"] = (factory, {**kwargs, "steps": steps})
            envs[f"{name}@{kind}"] = {**env, **kind_environment(kind)}
    return specs, envs


def _ratios(numerator, denominator):
    values = [a / b for a, b in zip(numerator, denominator)]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(results, systems, kinds, steps):
    """{"system@kind": {"step_ms": [q1, median, q3], "to_pml": ratios, "avx2_to_native":
    ratios}} from `processes.compare`'s results (per round: one call of `steps` steps)."""
    rows = {}
    for kind in kinds:
        pml = results[f"pml@{kind}"]["samples"]
        for name in ("pml", *systems):
            result = results[f"{name}@{kind}"]
            row = {"step_ms": [round(1e3 * result[q] / steps, 2) for q in ("q1", "median", "q3")]}
            if name != "pml":
                row["to_pml"] = _ratios(result["samples"], pml)
            if kind == "avx2" and "native" in kinds:
                row["avx2_to_native"] = _ratios(result["samples"],
                                                results[f"{name}@native"]["samples"])
            rows[f"{name}@{kind}"] = row
    return rows


def _cell(ratios):
    return "" if ratios is None else (
        f"{ratios['median']:.2f} [{ratios['min']:.2f}-{ratios['max']:.2f}]")


def markdown(rows):
    lines = ["| system @ CPU kind | ms / step, median [IQR] | / PML, same kind | "
             "AVX2 / native |", "| --- | --- | --- | --- |"]
    for name, row in rows.items():
        q1, median, q3 = row["step_ms"]
        lines.append(f"| {name} | {median:.1f} [{q1:.1f}-{q3:.1f}] | "
                     f"{_cell(row.get('to_pml'))} | {_cell(row.get('avx2_to_native'))} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_kinds",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 steps x 3 rounds")
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--systems", nargs="+", default=list(DEFAULT_SYSTEMS),
                        choices=[name for name in SYSTEMS if name != "pml"],
                        help="systems timed beside PML (default: tf tf:stock)")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed call")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 10, 3
    if args.steps < 1 or args.rounds < 1 or args.threads < 1:
        parser.error(f"--steps, --rounds and --threads must be at least 1, got "
                     f"{args.steps}, {args.rounds}, {args.threads}")
    machine = machine_info.machine_info()
    load = os.getloadavg()
    specs, envs = plan(args.systems, args.kinds, args.steps)
    results = processes.compare(specs, repeats=args.rounds, warmup=1, threads=args.threads,
                                envs=envs)
    rows = summarize(results, args.systems, args.kinds, args.steps)
    end = os.getloadavg()
    print(f"{machine_info.describe(machine)}; {args.threads} thread(s) per system; "
          f"{args.rounds} rounds of {args.steps} steps; load average {load[0]:.2f} at "
          f"start, {end[0]:.2f} at end")
    print(markdown(rows))
    if args.json:
        write_json(args.json, {"command": command_line("benchmarks.cpu_kinds", argv),
                               "machine": machine, "threads": args.threads,
                               "steps": args.steps, "rounds": args.rounds,
                               "load_average": [load[0], end[0]], "systems": rows,
                               "facts": {name: result["facts"]
                                         for name, result in results.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
