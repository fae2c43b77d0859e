"""Run every benchmark, each system in its own process: `python -m benchmarks`.

    python -m benchmarks [--quick | --smoke] [--only TEXT ...] [--threads T]
                         [--check-fairness] [--large-batches] [--device cpu | gpu]
                         [--backends tensorflow jax torch] [--out DIR]

Writes DIR/benchmarks.json (every sample, the machine, the versions) and
DIR/benchmarks.md (the table benchmarks/README.md shows) and prints the table.
`--quick` runs smaller sizes and fewer rounds (50 minutes on 2 cores with
`--check-fairness`), `--smoke` only checks that every case runs.
`--check-fairness` also times each peer alone (no other worker alive, in three
processes one after the other) and reports it beside the peer's figure from the
interleaved run. `--large-batches`
alone times MultiSimilarity and ICE at N = 4,096-16,384 (PML's MultiSimilarity up to
8,192, the triplet losses at 4,096) with their peak memory; add `--only ""` to run
the cases too.

`--backends tensorflow jax torch` runs the backend suite instead (any of the three):
the main job's training step, the loss steps of MultiSimilarity, InstanceCrossEntropy,
ProxyAnchor, Contrastive and ArcFace at N = 1,024 and 8,192 (8,192 and PyTorch's
`torch.compile` column in full runs only) and exact kNN, keras_dml on each backend
beside pytorch-metric-learning on the same device, each system in one process of its
own for the whole run. It writes DIR/backends.json and DIR/backends.md. Without
"tensorflow" nothing imports TensorFlow: it runs where only JAX, PyTorch, Keras and
pytorch-metric-learning are installed. `--device gpu` runs on the GPU (the files are
named *-gpu.*) and stops with one line when a framework the run needs sees none.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import sys

from benchmarks import machine_info, processes
from benchmarks.cases import BACKENDS, CASES, TF, TORCH, backend_cases

PACKAGES = ("tensorflow", "keras", "jax", "torch", "pytorch-metric-learning", "faiss-cpu",
            "numpy")


def command_line(module, argv=None):
    """The command that reproduces a run: `python -m MODULE` and its arguments (`argv`,
    else the process's own)."""
    return " ".join(["python -m " + module, *map(str, sys.argv[1:] if argv is None else argv)])


def write_json(path, info):
    """Writes a benchmark's `info` to `path` (its `--json`), indented."""
    with open(path, "w") as f:
        json.dump(info, f, indent=2)


def cpu_model():
    """The CPU in a few words (`machine_info.cpu_line`): its model name, its widest vector
    instructions and SIMD flags ("Intel(R) Xeon(R) Processor, AVX-512 (avx2 avx512f ...)":
    a VM may name only the family, and TensorFlow's oneDNN and PyTorch pick their kernels
    by these) and any ISA cap that emulates another CPU kind."""
    return machine_info.cpu_line(machine_info.machine_info())


def machine(threads):
    """Date, CPU, thread count, load and package versions."""
    cpu = cpu_model()
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {"date": datetime.datetime.now().isoformat(timespec="minutes"), "cpu": cpu,
            "machine": machine_info.machine_info(),
            "logical_cpus": os.cpu_count(), "threads": threads,
            "python": platform.python_version(), "versions": versions,
            "load_average_start": os.getloadavg(),
            "tf_onednn": processes.thread_env(threads)["TF_ENABLE_ONEDNN_OPTS"]}


#: the module of each framework a run may need, and its name in messages
FRAMEWORKS = {"torch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow"}


def frameworks(backends):
    """The frameworks a run uses: its Keras backends and PyTorch (PML's peers); the
    catalogue (no `backends`): TensorFlow and PyTorch."""
    return sorted(set(backends or ["tensorflow"]) | {"torch"}, key=list(FRAMEWORKS).index)


def gpu_names(framework):
    """The GPUs `framework` ("torch", "jax" or "tensorflow") sees, as names; [] when
    none, None when it is not installed. Imports only that framework."""
    try:
        module = importlib.import_module(framework)
    except ImportError:
        return None
    if framework == "torch":
        return [module.cuda.get_device_name(i) for i in range(module.cuda.device_count())]
    if framework == "jax":
        try:
            return [str(device) for device in module.devices("gpu")]
        except RuntimeError:  # "Unknown backend: 'gpu' requested"
            return []
    return [device.name for device in module.config.list_physical_devices("GPU")]


def frameworks_without_gpu(names):
    """Those of `names` that see no GPU (or are not installed), as readable names."""
    blind = []
    for name in names:
        found = gpu_names(name)
        if not found:
            blind.append(FRAMEWORKS[name] + (" (not installed)" if found is None else ""))
    return blind


def _round_ratios(runs, system="keras_dml"):
    """`system` (keras_dml) / peer time in each interleaved round of each run."""
    return [a / b for run in runs
            for a, b in zip(run[system]["samples"], run["peer"]["samples"])]


def _samples_of(results):
    """Every sample of several results of one system, in order."""
    return [sample for result in results for sample in result["samples"]]


def pooled(runs):
    """The harness runs of one case as one result: each system's samples from every
    run, summarised together (its memory and facts from the first run)."""
    result = {}
    for name in runs[0]:
        samples = _samples_of(run[name] for run in runs)
        result[name] = {**runs[0][name], **processes.summary(samples), "samples": samples,
                        "process_medians": [run[name]["median"] for run in runs]}
    return result


#: the systems of the `--backends` table, in column order, and their titles
SYSTEM_TITLES = {"tensorflow": "TensorFlow", "jax": "JAX (jax.jit)",
                 "torch": "PyTorch (eager)", "torch_compiled": "PyTorch (torch.compile)"}


def _ratio_fields(runs, system):
    """`system` / peer per round: {"median", "min", "max"}."""
    ratios = _round_ratios(runs, system)
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def run_case(case, mode, threads, check_fairness, device="cpu", pool=None):
    """Time one case; its row for the table and the JSON. `pool`: run the systems in
    these live workers (`processes.Pool`) instead of fresh processes."""
    repeats, warmup, inner = case.timing(mode)
    systems = case.systems_for(mode)
    print(f"[{case.key}] {repeats} rounds ...", file=sys.stderr, flush=True)

    def measure():
        return processes.compare(systems, repeats, warmup, inner, threads, device=device,
                                 pool=pool)

    runs, fair = [measure()], {}
    if check_fairness and "peer" in systems:
        factory, kwargs = systems["peer"]
        fair = check_fairness_of(runs, measure, lambda: processes.alone(
            factory, kwargs, repeats, warmup, inner, threads, device))
    result = pooled(runs)
    row = {"case": case.key, "group": case.group, "name": case.name, "unit": case.unit,
           "per_call": case.per_call, "target": case.target, "kwargs": systems,
           "systems": result, "harness_runs": len(runs), **fair}
    if pool is not None and pool.failures:
        row["failures"] = dict(pool.failures)
    if "peer" in result:
        row["ratios"] = {name: _ratio_fields(runs, name) for name in result
                         if name not in ("peer", "floor")}
    if "keras_dml" in result:
        ours = row["ratios"]["keras_dml"]
        row.update(ratio=ours["median"], ratio_min=ours["min"], ratio_max=ours["max"])
    if "floor" in result:
        row["ratio_to_floor"] = result["keras_dml"]["median"] / result["floor"]["median"]
        row["floor_to_peer"] = result["floor"]["median"] / result["peer"]["median"]
    return row


#: separate processes the peer is timed alone in: a few-millisecond step's median moves
#: by up to about 20 % from one process to the next (benchmarks/README.md)
FAIRNESS_PROCESSES = 3
FAIRNESS_TOLERANCE = 0.10
#: harness runs added when the first one's peer lies outside its alone processes' range
HARNESS_RERUNS = 2


def check_fairness_of(runs, measure, time_alone, count=FAIRNESS_PROCESSES):
    """`fairness` of the peer in the harness `runs` (results of `measure()`) against
    `count` processes of the peer alone (`time_alone()` times one).

    When the first harness run's peer lies outside the alone processes' range, twice
    as many alone processes are taken and the case is measured `HARNESS_RERUNS` more
    times in fresh processes (appended to `runs`, so the row pools them): each harness
    figure is one process's median too, and the process-to-process noise of a
    few-millisecond step (or a bimodal peer, benchmarks/README.md) would otherwise put
    one in seven iid processes outside the range of six. A harness that slows its peer
    keeps the median of its runs above every alone process however many run.
    """
    alone = [time_alone() for _ in range(count)]
    row = fairness([run["peer"] for run in runs], alone)
    if not row["fair"]:
        alone += [time_alone() for _ in range(count)]
        runs.extend(measure() for _ in range(HARNESS_RERUNS))
        row = fairness([run["peer"] for run in runs], alone)
    return row


def fairness(harness, alone):
    """The peer in the harness runs against the peer alone, as row fields.

    "Same within noise": the median of the harness runs' medians lies within the
    range of the alone processes' medians, widened by `FAIRNESS_TOLERANCE` on both
    sides.
    """
    medians = sorted(run["median"] for run in alone)
    together = statistics.median(run["median"] for run in harness)
    pooled_alone = processes.summary(_samples_of(alone))
    return {"peer_alone": {**pooled_alone, "process_medians": medians},
            "peer_in_harness_medians": [run["median"] for run in harness],
            "peer_alone_over_harness": statistics.median(medians) / together,
            "fair": bool(medians[0] / (1 + FAIRNESS_TOLERANCE) <= together
                         <= medians[-1] * (1 + FAIRNESS_TOLERANCE))}


def _time(stats, unit):
    scale = 1e3 if unit == "ms" else 1.0
    return (f"{scale * stats['median']:.3g} {unit} "
            f"[{scale * stats['q1']:.3g}-{scale * stats['q3']:.3g}]")


def _header(info):
    """The table's first line: mode, date, CPU, threads, device, load, versions."""
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
    return (("" if info["mode"] == "full" else f"Mode `--{info['mode']}` (not the full sizes). ")
            + f"Measured {info['date']} on {info['cpu']} ({info['logical_cpus']} logical "
            f"CPUs), {info['threads']} thread(s) per system, device {info['device']}, "
            f"load average {info['load_average_start'][0]:.1f}"
            f" at the start and {info['load_average_end'][0]:.1f} at the end; {versions}, "
            f"TF_ENABLE_ONEDNN_OPTS={info['tf_onednn']}. ")


def _fairness_cell(row):
    runs = row.get("harness_runs", 1)
    return (f" {row['peer_alone_over_harness']:.2f}"
            f" ({'same within noise' if row['fair'] else 'DIFFERENT'}"
            f"{f'; {runs} harness runs' if runs > 1 else ''}) |")


def markdown(rows, info):
    lines = [
        _header(info)
        + "Times: median [interquartile range] over interleaved rounds, each system in "
        "its own process. Ratio: keras_dml / peer time, median [range] of the per-round "
        "ratios (below 1: keras_dml is faster).",
        "",
        "| benchmark | keras_dml | peer | ratio | target | met |"
        + (" peer alone / in harness |" if any("fair" in r for r in rows) else ""),
        "| --- | --- | --- | --- | --- | --- |"
        + (" --- |" if any("fair" in r for r in rows) else ""),
    ]
    for row in rows:
        result = row["systems"]
        ratio = f"{row['ratio']:.2f} [{row['ratio_min']:.2f}-{row['ratio_max']:.2f}]"
        if "ratio_to_floor" in row:
            ratio += (f"; {row['ratio_to_floor']:.2f}x the matmul floor, which takes "
                      f"{row['floor_to_peer']:.2f} of the peer")
        target = "" if row["target"] is None else f"<= {row['target']:.2f}"
        met = "" if row["target"] is None else ("yes" if row["ratio"] <= row["target"] else "no")
        line = (f"| {row['group']}: {row['name']} | {_time(result['keras_dml'], row['unit'])} | "
                f"{_time(result['peer'], row['unit'])} | {ratio} | {target} | {met} |")
        if "fair" in row:
            line += _fairness_cell(row)
        lines.append(line)
    return "\n".join(lines) + "\n"


def _system_cell(row, name):
    """A `--backends` cell: time [IQR] and the ratio to the peer, median [range]."""
    if name in row.get("failures", {}):
        return f"fails: {row['failures'][name][:100]}"
    if name not in row["systems"]:
        return ""
    result = row["systems"][name]
    cell = _time(result, row["unit"])
    ratio = row.get("ratios", {}).get(name)
    if ratio:
        cell += f"; {ratio['median']:.2f} [{ratio['min']:.2f}-{ratio['max']:.2f}]"
    if "kernel" in result["facts"]:  # which search keras_dml picked on this backend
        cell += f" ({result['facts']['kernel']})"
    return cell


def _case_title(row):
    """The row's name, with the steps a call where a call is several training steps."""
    steps = {kwargs.get("steps") for _, kwargs in row["kwargs"].values()} - {None}
    return row["name"] + (f", {steps.pop()} steps a call" if len(steps) == 1 else "")


def _peak_cell(row):
    """The peak resident (or GPU allocator) memory of each system's process, GB."""
    return ", ".join(f"{SYSTEM_TITLES.get(name, 'PML').split(' (')[0]}"
                     f"{' compiled' if name == 'torch_compiled' else ''} "
                     f"{result['memory']['peak_kb'] / 2**20:.1f}"
                     for name, result in row["systems"].items()
                     if result["memory"].get("peak_kb"))


def backend_markdown(rows, info):
    """The `--backends` table: a column per backend, the PML peer, peak memory."""
    systems = [name for name in SYSTEM_TITLES if any(name in r["systems"] for r in rows)]
    fair = any("fair" in r for r in rows)
    lines = [
        _header(info)
        + "Each backend and the peer in its own process (one per system for the whole run), "
        "rounds interleaved. Cells: median [interquartile range]; then the ratio to the "
        "PML peer on the same device, median [range] of the per-round ratios (below 1: "
        "keras_dml is faster); no ratio where PML has no such loss. keras_dml's TensorFlow "
        "loss step is a `tf.function` (jit_compile=False), JAX's `jax.jit`; `keras-dml "
        "train` runs PyTorch eagerly unless `--jit-compile`.",
        "",
        "| benchmark | PML peer |" + "".join(f" {SYSTEM_TITLES[n]} |" for n in systems)
        + " peak memory (GB) |" + (" peer alone / in harness |" if fair else ""),
        "| --- | --- |" + " --- |" * len(systems) + " --- |" + (" --- |" if fair else ""),
    ]
    for row in rows:
        peer = _time(row["systems"]["peer"], row["unit"]) if "peer" in row["systems"] \
            else "none"
        line = (f"| {_case_title(row)} | {peer} |"
                + "".join(f" {_system_cell(row, n)} |" for n in systems)
                + f" {_peak_cell(row)} |")
        if fair:
            line += _fairness_cell(row) if "fair" in row else " |"
        lines.append(line)
    return "\n".join(lines) + "\n"


LARGE_SIZES = (4096, 8192, 16384)


# (factory, kwargs, largest N run): PML's miner lists every pair (several N^2 int64
# index tensors: a warm step peaked at 18 N x N float32, 4.7 GB, at N = 8,192, which
# puts N = 16,384 near 19 GB), and a triplet loss only needs to show that nothing is N^3.
LARGE_SYSTEMS = {
    "MultiSimilarity": (f"{TF}:loss_step", {"loss": "MultiSimilarity"}, None),
    "InstanceCrossEntropy": (f"{TF}:loss_step", {"loss": "InstanceCrossEntropy"}, None),
    "PML MultiSimilarityLoss + miner": (
        f"{TORCH}:loss_step", {"loss": "MultiSimilarityLoss",
                               "config": {"alpha": 2, "beta": 50, "base": 0.5},
                               "miner": "MultiSimilarityMiner",
                               "miner_config": {"epsilon": 0.1}}, 8192),
    "Triplet semi-hard": (f"{TF}:loss_step",
                          {"loss": "Triplet", "config": {"mining": "semihard"}}, 4096),
    "Triplet hard": (f"{TF}:loss_step", {"loss": "Triplet", "config": {"mining": "hard"}},
                     4096),
    "Triplet (all triplets)": (f"{TF}:loss_step", {"loss": "Triplet"}, 4096),
}


def large_batches(threads, sizes=LARGE_SIZES, repeats=3, device="cpu", losses=None):
    """Large-N losses, d = 512: time and peak memory, one process each.

    Memory: the peak resident size of the calls after the first beyond the resident
    size after set-up (what a warm training step holds on top of the model and its
    inputs), and the first call's (tracing and compilation included) beyond the
    same; on `device="gpu"` the same figures of the GPU allocator. `losses`: run only
    these names of `LARGE_SYSTEMS` (default: all).
    """
    rows = []
    for n in sizes:
        for name, (factory, kwargs, largest) in LARGE_SYSTEMS.items():
            if largest is not None and n > largest:
                continue
            if losses and name not in losses:
                continue
            print(f"[large batches] {name} N={n} ...", file=sys.stderr, flush=True)
            result = processes.peak_memory(factory, {**kwargs, "n": n, "measure_memory": True},
                                           repeats=repeats, threads=threads, device=device)
            steady, first = result["steady"], result["first_call"]
            nxn_kb = 4.0 * n * n / 1024
            rows.append({"loss": name, "N": n, "memory": result["memory"],
                         "seconds": steady["median"],
                         "seconds_range": [steady["min"], steady["max"]],
                         "first_call_seconds": first["seconds"],
                         "peak_mb": None if steady["peak_kb"] is None
                         else steady["peak_kb"] / 1024,
                         "in_nxn_float32": None if steady["peak_kb"] is None
                         else steady["peak_kb"] / nxn_kb,
                         "first_call_peak_mb": first["peak_kb"] / 1024,
                         "first_call_in_nxn_float32": first["peak_kb"] / nxn_kb})
    return rows


def large_markdown(rows):
    lines = ["| loss | N | time (s), median [range] | peak memory of a warm step | "
             "in N x N float32 matrices | first call (tracing, compilation) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        peak = ("n/a", "n/a") if r["peak_mb"] is None else (
            f"{r['peak_mb']:.0f} MB", f"{r['in_nxn_float32']:.2f}")
        lines.append(f"| {r['loss']} | {r['N']} | {r['seconds']:.2f} "
                     f"[{r['seconds_range'][0]:.2f}-{r['seconds_range'][1]:.2f}] | "
                     f"{peak[0]} | {peak[1]} | {r['first_call_peak_mb']:.0f} MB "
                     f"({r['first_call_in_nxn_float32']:.2f}) |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes: checks every case runs")
    parser.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                        help="run the cases whose group/name contains one of these")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads per system (TF, torch, faiss, OpenMP); default: all CPUs")
    parser.add_argument("--check-fairness", action="store_true",
                        help="also time each peer alone and compare with its harness figure")
    parser.add_argument("--large-batches", action="store_true",
                        help="also MultiSimilarity and ICE at N = 4,096-16,384 (time, memory)")
    parser.add_argument("--large-sizes", type=int, nargs="+", default=list(LARGE_SIZES),
                        metavar="N", help="batch sizes for --large-batches")
    parser.add_argument("--large-losses", nargs="+", default=None, metavar="NAME",
                        choices=list(LARGE_SYSTEMS),
                        help="for --large-batches: only these losses (default: all)")
    parser.add_argument("--large-repeats", type=int, default=3,
                        help="timed calls per size for --large-batches, after a first "
                             "call (tracing) measured apart")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="cpu hides GPUs from every system; gpu runs TensorFlow, torch "
                             "and faiss (faiss-gpu needed) on the GPU; the files are named "
                             "benchmarks-gpu.*")
    parser.add_argument("--backends", nargs="+", default=[], choices=list(BACKENDS),
                        help="instead of the cases above, the backend suite: the main job's "
                             "step, five loss steps and exact kNN of keras_dml on these "
                             "Keras backends beside PML (no TensorFlow needed without "
                             "'tensorflow'); writes backends.json / backends.md")
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"),
                        help="folder for benchmarks.json and benchmarks.md")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    chosen = "smoke" if args.smoke else "quick" if args.quick else "full"
    catalogue = backend_cases(args.backends) if args.backends else CASES
    cases = [c for c in catalogue if c.runs_in(chosen) and (
        not args.only or any(t.lower() in c.key.lower() for t in args.only))]
    if args.large_batches and not args.only:
        cases = []  # --large-batches alone runs only them
    if not cases and not args.large_batches:
        parser.error(f"--only {args.only} matches no case; cases: "
                     + ", ".join(c.key for c in catalogue if c.runs_in(chosen)))
    if args.device == "gpu":
        blind = frameworks_without_gpu(frameworks(args.backends))
        if blind:
            parser.error(f"--device gpu: no GPU is visible here to {', '.join(blind)} "
                         "(CUDA_VISIBLE_DEVICES="
                         f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}); "
                         "run with --device cpu")
    info = {**machine(args.threads), "mode": chosen, "device": args.device,
            "command": command_line("benchmarks", argv)}
    name = "backends" if args.backends else "benchmarks"
    stem = os.path.join(args.out, name if args.device == "cpu" else f"{name}-gpu")
    os.makedirs(args.out, exist_ok=True)
    tabulate = backend_markdown if args.backends else markdown
    pool = processes.Pool(args.threads, args.device) if args.backends else None
    rows, large = [], []
    try:
        for case in cases:  # the files are rewritten after each case: a long run keeps its rows
            rows.append(run_case(case, chosen, args.threads, args.check_fairness, args.device,
                                 pool))
            table = write(stem, info, rows, large, tabulate)
    finally:
        if pool is not None:
            pool.close()
    if args.large_batches:
        large = large_batches(args.threads, args.large_sizes, args.large_repeats,
                              device=args.device, losses=args.large_losses)
        table = write(stem, info, rows, large, tabulate)
    print(table)
    return 0


def write(stem, info, rows, large, tabulate=markdown):
    """Write STEM.json and STEM.md (`tabulate(rows, info)` and the large batches);
    returns the Markdown."""
    info["load_average_end"] = os.getloadavg()
    table = tabulate(rows, info) if rows else ""
    if large:
        memory = " and ".join(sorted({row["memory"] for row in large}))
        table += ("\nLarge batches (d = 512, forward + backward, each alone in its process; "
                  f"memory: {memory}):\n\n")
        table += large_markdown(large)
    with open(stem + ".json", "w") as f:
        json.dump({"machine": info, "cases": rows, "large_batches": large}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)
    return table


if __name__ == "__main__":
    sys.exit(main())
