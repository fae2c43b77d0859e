"""benchmarks/: every case still builds and runs (tiny sizes); the harness writes its table.

No timing is asserted: the machine's load decides the figures.
"""

import json
import os
import re
import subprocess
import sys
import types

import numpy as np

import pytest

from benchmarks import cases, processes
from conftest import require_shared_datasets

# The benchmarks' end-to-end checks, against PyTorch and faiss: the full tier.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_summary_statistics():
    stats = processes.summary([3.0, 1.0, 2.0, 4.0, 5.0])
    assert (stats["median"], stats["min"], stats["max"], stats["n"]) == (3.0, 1.0, 5.0, 5)
    assert stats["q1"] <= stats["median"] <= stats["q3"]


def test_thread_env_sets_every_framework():
    env = processes.thread_env(3)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                 "BENCH_THREADS"):
        assert env[name] == "3"


def test_cpu_device_hides_every_gpu_and_gpu_device_is_passed_on():
    assert processes.thread_env(1)["CUDA_VISIBLE_DEVICES"] == ""
    env = processes.thread_env(1, device="gpu")
    assert env["BENCH_DEVICE"] == "gpu"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"  # workers share the GPU
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_gpu_device_without_a_gpu_is_refused_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--device", "gpu", "--smoke", "--only", "knn",
         "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
             "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "--device gpu: no GPU is visible here" in last and "--device cpu" in last, last
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing timed, nothing written


@pytest.mark.slow  # three short fits of the main job's network (about 40 s on 2 cores)
def test_training_step_times_the_main_job_beside_plain_keras(tmp_path):
    out = tmp_path / "step.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.training_step", "--steps", "3", "--rounds", "1",
         "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["systems"]) == {"plain", "main_job", "multi_similarity"}
    assert report["cpu"] and report["backend"] == os.environ.get("KERAS_BACKEND", "tensorflow")
    for row in report["systems"].values():
        low, median, high = row["step_ms"]
        assert 0 < low <= median <= high
    assert report["systems"]["plain"]["ratio_to_plain"] == [1.0, 1.0, 1.0]
    assert "main_job" in result.stdout and "x plain" in result.stdout


def test_faiss_peers_on_gpu_need_faiss_gpu(monkeypatch):
    """`--device gpu` never puts a CPU faiss search into the GPU table: without faiss-gpu
    the faiss peer and PML's AccuracyCalculator peers stop with an error saying so."""
    faiss = pytest.importorskip("faiss")
    torch = pytest.importorskip("torch")
    if faiss.get_num_gpus():
        pytest.skip("this faiss has a GPU")
    from benchmarks import faiss_systems, torch_systems

    assert isinstance(faiss_systems.inner_product_index(8), faiss.IndexFlatIP)
    with pytest.raises(RuntimeError, match="faiss-gpu"):
        faiss_systems.inner_product_index(8, on_gpu=True)
    monkeypatch.setattr(torch_systems, "DEVICE", torch.device("cuda"))
    with pytest.raises(RuntimeError, match="faiss-gpu"):
        torch_systems.accuracy_calculator(n=60, d=8, classes=10)
    with pytest.raises(RuntimeError, match="faiss-gpu"):
        torch_systems.omniglot_evaluate(limit=10)


def test_worker_runs_an_untimed_lead_in_before_the_timed_calls(tmp_path, monkeypatch):
    """A millisecond unit's turn starts with untimed calls (`lead_seconds`): only the
    `n` calls after them are timed."""
    (tmp_path / "counting_unit.py").write_text(
        "import time\n"
        "def build(path):\n"
        "    def step():\n"
        "        time.sleep(0.01)\n"
        "        open(path, 'a').write('.')\n"
        "    return step\n")
    calls = tmp_path / "calls"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    worker = processes.Worker("counting_unit:build", {"path": str(calls)}, threads=1).wait_ready()
    try:
        assert len(worker.run(3)) == 3 and len(calls.read_text()) == 3
        assert len(worker.run(3, lead_seconds=0.1)) == 3
        assert len(calls.read_text()) >= 3 + 3 + 1  # at least one untimed call first
    finally:
        worker.close()


def _needs(case):
    if case.group == "training":  # reads Omniglot from ../shared/datasets
        require_shared_datasets()


@pytest.mark.parametrize("case", [c for c in cases.CASES if c.group not in ("losses", "data")],
                         ids=lambda c: c.name[:40])
def test_every_case_runs_in_process(case):
    """Each system's factory builds and runs one step at smoke size (one process here)."""
    import importlib

    _needs(case)
    for name, (factory, kwargs) in case.systems_for("smoke").items():
        module, function = factory.split(":")
        built = getattr(importlib.import_module(module), function)(**kwargs)
        step, facts = built if isinstance(built, tuple) else (built, {})
        step()
        assert isinstance(facts, dict)


def _facts(factory, kwargs):
    """Build one system in this process, run its step once, return its facts."""
    import importlib

    module, function = factory.split(":")
    step, facts = getattr(importlib.import_module(module), function)(**kwargs)
    step()
    return facts


@pytest.mark.parametrize("case", [c for c in cases.CASES if c.group == "losses"],
                         ids=lambda c: c.name[:40])
def test_loss_case_runs_on_both_sides_and_agrees_where_it_should(case):
    """Each loss case's two steps run at smoke size, with finite gradients, and the
    cases marked `same_value` compute the same value on both sides."""
    systems = case.systems_for("smoke")
    ours, theirs = _facts(*systems["keras_dml"]), _facts(*systems["peer"])
    assert ours["finite"] and theirs["finite"]
    if case.same_value:  # see the cases' comments for the others
        assert ours["value"] == pytest.approx(theirs["value"], rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("case", [c for c in cases.CASES if "floor" in c.systems],
                         ids=lambda c: c.name[:40])
def test_matmul_floor_computes_the_product_the_loss_needs(case):
    """A case's floor is the similarity matmul of the loss's own shapes: its forward
    value is the sum of that product, its gradients reach every side the loss's do."""
    import importlib

    import numpy as np

    from benchmarks import data

    factory, kwargs = case.systems_for("smoke")["floor"]
    module, function = factory.split(":")
    outputs = getattr(importlib.import_module(module), function)(**kwargs).outputs()
    value, *gradients = [np.asarray(t) for t in outputs]
    n, d = kwargs["n"], kwargs.get("d", 512)
    x = data.batch(n, d, kwargs.get("samples_per_class", 4), classes=kwargs.get("classes"))[0]
    if kwargs.get("keys"):
        product = x @ data.batch(kwargs["keys"], d, 1)[0].T
        assert [g.shape for g in gradients] == [(n, d), (kwargs["keys"], d)]
    elif kwargs.get("halves"):
        product = x[:, :d // 2] @ x[:, d // 2:].T
    else:
        product = x @ x.T
    expected = float(np.sum(product, dtype=np.float64))
    assert float(value) == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_value_checks_cover_the_losses_that_meet_pml():
    """The like-for-like loss cases keep their value check (a regression guard)."""
    checked = {c.name for c in cases.CASES if c.group == "losses" and c.same_value}
    for name in ("MultiSimilarity + VTHM mining", "NCA", "NPair N-pair-mc",
                 "Triplet hard (batch hard)", "Histogram (100 bins; N = 512 in --quick)"):
        assert name in checked


@pytest.mark.parametrize("case", [c for c in cases.CASES if c.group == "data"],
                         ids=lambda c: c.name[:40])
def test_sampler_cases_draw_the_same_epoch_on_both_sides(case):
    systems = case.systems_for("smoke")
    ours, theirs = _facts(*systems["keras_dml"]), _facts(*systems["peer"])
    assert ours == theirs and ours["batches"] > 0


def test_large_batches_report_peak_memory(tmp_path):
    """`--large-batches` at a tiny N: one worker, the step's peak and the first call's."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--large-batches", "--large-sizes", "64",
         "--large-losses", "MultiSimilarity", "--large-repeats", "1", "--threads", "1",
         "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads((tmp_path / "benchmarks.json").read_text())["large_batches"]
    assert (row["loss"], row["N"]) == ("MultiSimilarity", 64)
    assert row["seconds"] > 0 and row["first_call_peak_mb"] >= 0
    if sys.platform.startswith("linux"):  # the peak is reset through /proc/self/clear_refs
        assert row["peak_mb"] >= 0 and row["in_nxn_float32"] >= 0
    assert row["memory"] == "host resident"
    table = (tmp_path / "benchmarks.md").read_text()
    assert "| MultiSimilarity | 64 |" in table and "memory: host resident" in table


def test_worker_memory_is_the_gpu_allocator_on_gpu(monkeypatch):
    """On `--device gpu` a worker reports its framework's GPU allocator, not host memory."""
    from benchmarks import worker

    class Cuda:
        peak = 300 * 1024

        def is_available(self):
            return True

        def memory_allocated(self):
            return 100 * 1024

        def max_memory_allocated(self):
            return self.peak

        def reset_peak_memory_stats(self):
            self.peak = self.memory_allocated()

    class Experimental:
        peak = 700 * 1024

        def get_memory_info(self, device):
            assert device == "GPU:0"
            return {"current": 500 * 1024, "peak": self.peak}

        def reset_memory_stats(self, device):
            self.peak = 500 * 1024

    monkeypatch.setenv("BENCH_DEVICE", "gpu")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=Cuda()))
    memory = worker.Memory()
    assert memory.kind == "GPU allocator"
    assert (memory.in_use_kb(), memory.peak_kb()) == (100, 300)
    assert memory.reset_peak() and memory.peak_kb() == 100

    monkeypatch.delitem(sys.modules, "torch")
    config = types.SimpleNamespace(list_logical_devices=lambda kind: ["GPU:0"],
                                   experimental=Experimental())
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(config=config))
    memory = worker.Memory()
    assert (memory.in_use_kb(), memory.peak_kb()) == (500, 700)
    assert memory.reset_peak() and memory.peak_kb() == 500

    monkeypatch.setenv("BENCH_DEVICE", "cpu")
    assert worker.Memory().kind == "host resident"


def test_unknown_large_batch_loss_is_named():
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit):
        main(["--large-batches", "--large-losses", "NoSuchLoss"])


def test_cross_batch_memory_quick_mode():
    """benchmarks/bench_cross_batch_memory.py --quick: both systems in their own process,
    one table row with both times, the ratio and both memories (issue 17)."""
    result = subprocess.run(
        [sys.executable, os.path.join("benchmarks", "bench_cross_batch_memory.py"), "--quick",
         "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 1024 | 64 |")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    ours, theirs, ratio = float(cells[2].split()[0]), float(cells[3]), float(cells[4])
    assert ours > 0 and theirs > 0 and ratio > 0  # times in ms (one decimal), ratio
    totals = [float(v) for v in cells[5].split(" / ")]  # MB: total and a step, both sides
    assert len(totals) == 2 and all(v >= 0 for v in totals)
    assert len(cells[6].split(" / ")) == 2


def _run(*samples):
    return {"median": sorted(samples)[len(samples) // 2], "samples": list(samples)}


def test_fairness_takes_the_spread_of_the_alone_processes():
    from benchmarks.__main__ import fairness

    alone = [_run(7.0, 7.1, 7.2), _run(8.2, 8.3, 8.4), _run(7.6, 7.7, 7.8)]
    inside = fairness([_run(9.0)], alone)  # within 8.3 x 1.1
    assert inside["fair"] and inside["peer_alone"]["process_medians"] == [7.1, 7.7, 8.3]
    assert inside["peer_alone"]["n"] == 9
    assert abs(inside["peer_alone_over_harness"] - 7.7 / 9.0) < 1e-12
    assert not fairness([_run(9.2)], alone)["fair"]  # above 8.3 x 1.1
    assert not fairness([_run(6.4)], alone)["fair"]  # below 7.1 / 1.1
    # several harness runs: their median is judged
    assert fairness([_run(9.5), _run(8.0), _run(7.5)], alone)["fair"]
    assert not fairness([_run(9.5), _run(9.3), _run(7.5)], alone)["fair"]


def _timer(*medians):
    runs = iter({"median": m, "samples": [m]} for m in medians)
    return lambda: next(runs)


def _harness(*peer_medians):
    """`measure` of a case whose runs give the peer these medians (keras_dml: half)."""
    runs = iter(peer_medians)

    def measure():
        m = next(runs)
        return {"keras_dml": _run(m / 2), "peer": _run(m)}
    return measure


def test_fairness_times_more_processes_only_when_the_first_disagree():
    from benchmarks.__main__ import check_fairness_of

    runs = [_harness(0.48)()]
    fair = check_fairness_of(runs, _harness(), _timer(0.47, 0.48, 0.49), count=3)
    assert fair["fair"] and len(fair["peer_alone"]["process_medians"]) == 3 and len(runs) == 1
    # a bimodal peer whose first harness run fell in the rarer mode: more of each
    runs = [_harness(0.70)()]
    bimodal = check_fairness_of(runs, _harness(0.48, 0.47),
                                _timer(0.47, 0.48, 0.47, 0.46, 0.48, 0.47), count=3)
    assert bimodal["fair"] and len(bimodal["peer_alone"]["process_medians"]) == 6
    assert len(runs) == 3 and bimodal["peer_in_harness_medians"] == [0.70, 0.48, 0.47]
    # a harness that slows its peer stays above every alone process
    runs = [_harness(0.90)()]
    slowed = check_fairness_of(runs, _harness(0.88, 0.93),
                               _timer(0.47, 0.48, 0.47, 0.69, 0.48, 0.70), count=3)
    assert not slowed["fair"] and len(runs) == 3


def test_a_case_row_pools_its_harness_runs():
    from benchmarks.__main__ import _round_ratios, pooled

    runs = [{"keras_dml": _run(1.0, 2.0), "peer": _run(4.0, 4.0)},
            {"keras_dml": _run(3.0), "peer": _run(2.0)}]
    assert _round_ratios(runs) == [0.25, 0.5, 1.5]
    result = pooled(runs)
    assert result["keras_dml"]["samples"] == [1.0, 2.0, 3.0]
    assert result["keras_dml"]["median"] == 2.0 and result["peer"]["n"] == 3
    assert result["peer"]["process_medians"] == [4.0, 2.0]


def test_command_writes_json_and_markdown(tmp_path):
    """`python -m benchmarks --smoke --check-fairness` on one case: processes, table, JSON.

    An exact kNN case: its peer (faiss) starts in about 0.5 s, so the fairness check's
    up to nine peer processes cost little (with a PyTorch peer, whose imports take about
    6 s, the command took 60-100 s here)."""
    case = "retrieval/exact kNN 20,000 x 512, k = 101 vs faiss IndexFlatIP"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--check-fairness", "--threads", "1",
         "--only", case, "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "benchmarks.json").read_text())
    (row,) = report["cases"]
    assert row["case"] == case
    assert set(row["systems"]) == {"keras_dml", "peer"}
    # three alone processes and one harness run, or (outside their range) six and three
    alone = len(row["peer_alone"]["process_medians"])
    assert (alone, row["harness_runs"]) in {(3, 1), (6, 3)}
    assert row["ratio"] > 0 and row["peer_alone"]["n"] == alone
    assert len(row["systems"]["peer"]["samples"]) == row["harness_runs"]  # smoke: 1 round
    assert isinstance(row["fair"], bool)
    assert report["machine"]["threads"] == 1 and report["machine"]["versions"]["tensorflow"]
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1")  # the workers' TensorFlow setting
    assert report["machine"]["tf_onednn"] == onednn
    table = (tmp_path / "benchmarks.md").read_text()
    assert "| retrieval: exact kNN 20,000 x 512," in table and "peer alone / in harness" in table
    assert f"TF_ENABLE_ONEDNN_OPTS={onednn}." in table


def test_unknown_case_is_named():
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit):
        main(["--only", "no-such-case"])


def test_cpu_model_names_the_widest_vector_instructions():
    """Two VMs both called "AMD EPYC" differ in AVX-512: the recorded CPU says which."""
    from benchmarks.__main__ import cpu_model

    try:
        with open("/proc/cpuinfo") as info:
            flags = next(line for line in info if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags here")
    expected = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    if expected is None:
        pytest.skip("a CPU without AVX2")
    assert f", {expected} (avx2" in cpu_model()


def test_equal_budget_runs_the_selected_rows_and_tabulates_both_sides():
    """benchmarks/omniglot_equal_budget.py: --rows picks table rows, each row runs
    keras_dml and PML in their own command, and the table pairs their results."""
    import argparse

    from benchmarks import omniglot_equal_budget as budget

    args = argparse.Namespace(steps=10, seed=0, threads=1, out="results.jsonl",
                              rows=["ArcFace"])
    runs = list(budget.commands(args))
    assert [key[:2] for key, _ in runs] == [("keras_dml", "ArcFace"), ("pml", "ArcFace")]
    assert runs[0][1][1].endswith("omniglot_protocol.py")
    assert runs[1][1][1].endswith("pml_omniglot.py")
    results = [
        {"system": "keras_dml 0.1", "loss": "ArcFace", "loss_args": {}, "steps": 10,
         "seed": 0, "R@1": 61.25, "R@8": 90.0, "MAP@R": 25.0, "train_seconds": 30.0,
         "cpu": "AMD EPYC, AVX-512", "load": 0.5},
        {"system": "pml 2.9", "loss": "ArcFace", "variant": "default", "steps": 10,
         "seed": 0, "R@1": 60.0, "R@8": 89.0, "MAP@R": 24.0, "train_seconds": 20.0,
         "cpu": "AMD EPYC, AVX-512", "load": 1.3}]
    lines = budget.table(results, 10, 0, ["ArcFace"]).splitlines()
    assert lines[2] == "| ArcFace | 61.2 | 90.0 | 25.0 | 30 | 60.0 | 89.0 | 24.0 | 20 | +1.2 |"
    # header, rule, the one selected row, then the machine both were measured on
    assert lines[3:] == ["", "CPU: AMD EPYC, AVX-512; load average 0.5-1.3"]


def test_compare_revisions_times_both_trees_and_names_a_failing_case(tmp_path):
    """benchmarks.compare_revisions: each side imports keras_dml from its own tree
    (a revision extracted with git archive); a case a tree cannot run is reported."""
    from benchmarks import compare_revisions

    try:
        before = compare_revisions.materialise("HEAD", str(tmp_path / "before"))
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"no git checkout here: {error}")
    assert os.path.isfile(os.path.join(before, "keras_dml", "losses", "base.py"))
    roots = {"before": before, "after": ROOT}
    (nca,) = [case for case in cases.CASES if case.key == "losses/NCA"]
    row = compare_revisions.compare_case(nca, "smoke", roots, threads=1)
    assert row["before"]["n"] == row["after"]["n"] >= 1
    assert row["ratio"] > 0
    missing = cases.Case("losses", "missing", {"keras_dml": (
        "benchmarks.tf_systems:loss_step", {"loss": "NoSuchLoss"})}, {"smoke": {"n": 8}})
    failed = compare_revisions.compare_case(missing, "smoke", roots, threads=1)
    assert "NoSuchLoss" in failed["error"]
    table = compare_revisions.markdown([("NCA", row), ("missing", failed)], "HEAD", "here")
    assert "| NCA |" in table and "| missing | fails: " in table


def test_listing_quick_mode(capsys):
    """benchmarks/bench_listing.py --quick: a generated tree listed by from_directory and
    from_csv, every file found, one table row each with its time."""
    from benchmarks.bench_listing import main

    assert main(["--quick"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| from_")]
    assert [row.split("|")[1].strip() for row in rows] == ["from_directory", "from_csv"]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == "200" and float(cells[2]) >= 0 and len(cells[3].split(", ")) == 3


def _env(**extra):
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **extra}


def _without_tensorflow(tmp_path):
    """An environment in which `import tensorflow` fails in every process, as where it
    is not installed: a sitecustomize that blocks it, first on PYTHONPATH (the
    benchmark's workers inherit it)."""
    blocker = tmp_path / "no_tensorflow"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nsys.modules['tensorflow'] = None  # import tensorflow fails\n")
    env = _env()
    env["PYTHONPATH"] = str(blocker) + os.pathsep + env["PYTHONPATH"]
    check = subprocess.run([sys.executable, "-c", "import tensorflow"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode != 0 and "ModuleNotFoundError" in check.stderr
    return env


def test_backend_suite_names_each_backend_and_the_pml_peer():
    """`--backends`: the main job, five losses at two sizes and kNN, a system per Keras
    backend beside PML; without "tensorflow" no system imports TensorFlow."""
    suite = cases.backend_cases(["torch", "jax"])
    factories = {factory for case in suite for factory, _ in case.systems.values()}
    assert not any("tf_systems" in f or "on_tensorflow" in f for f in factories)
    losses = [c for c in suite if ", N = " in c.name]
    assert {c.systems["jax"][1]["loss"] for c in losses} == {
        "MultiSimilarity", "InstanceCrossEntropy", "ProxyAnchor", "Contrastive", "ArcFace"}
    assert sorted({c.sizes["full"]["n"] for c in losses}) == [1024, 8192]
    for case in losses:
        assert ("peer" in case.systems) == ("InstanceCrossEntropy" not in case.name)
        assert case.systems[cases.TORCH_COMPILED][1]["jit_compile"] is True
        assert cases.TORCH_COMPILED not in case.systems_for("quick" if case.runs_in("quick")
                                                            else "smoke")
        assert cases.TORCH_COMPILED in case.systems_for("full")
        assert case.runs_in("quick") == (case.sizes["full"]["n"] == 1024)
    assert {"tensorflow", "jax", "torch"} <= set(cases.backend_cases(
        ["tensorflow", "jax", "torch"])[0].systems)
    assert any("kNN" in c.name and "peer" in c.systems for c in suite)
    assert any("main job" in c.name and "peer" not in c.systems for c in suite)


def test_a_pool_builds_each_case_in_the_same_worker(tmp_path, monkeypatch):
    """`processes.Pool`: one process per system name for a whole run; each case's
    unit replaces the last one in it."""
    (tmp_path / "named_unit.py").write_text(
        "import os\n"
        "def build(name):\n"
        "    if name == 'bad':\n"
        "        raise ValueError('cannot trace this unit')\n"
        "    return (lambda: None), {'name': name, 'pid': os.getpid()}\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = processes.Pool(threads=1)
    try:
        first = processes.compare({"a": ("named_unit:build", {"name": "one"})}, repeats=2,
                                  pool=pool)
        # a unit that fails to build leaves its case without it, and its worker alive
        failed = processes.compare({"a": ("named_unit:build", {"name": "bad"}),
                                    "b": ("named_unit:build", {"name": "other"})},
                                   repeats=1, pool=pool)
        assert set(failed) == {"b"}
        assert pool.failures == {"a": "ValueError: cannot trace this unit"}
        second = processes.compare({"a": ("named_unit:build", {"name": "two"})}, repeats=1,
                                   pool=pool)
        assert pool.failures == {} and pool.workers["a"].process.poll() is None
    finally:
        pool.close()
    assert first["a"]["facts"]["name"] == "one" and second["a"]["facts"]["name"] == "two"
    assert first["a"]["facts"]["pid"] == second["a"]["facts"]["pid"]
    assert len(first["a"]["samples"]) == 2 and len(second["a"]["samples"]) == 1
    assert pool.workers == {}


def test_frameworks_a_run_needs():
    from benchmarks.__main__ import frameworks

    assert frameworks([]) == ["torch", "tensorflow"]
    assert frameworks(["jax", "torch"]) == ["torch", "jax"]


def test_backend_suite_on_three_backends_agrees_with_pml(tmp_path):
    """`--smoke --backends tensorflow jax torch` on two losses, in one live process per
    system: the same MultiSimilarity value on every backend and PML, ratios to the peer,
    a column per backend."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--threads", "1", "--backends",
         "tensorflow", "jax", "torch", "--only", "MultiSimilarity + VTHM mining, N = 1,024",
         "ProxyAnchor (C = 100), N = 1,024", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "backends.json").read_text())
    multi_similarity, proxy_anchor = report["cases"]
    pml = multi_similarity["systems"]["peer"]["facts"]["value"]
    for backend in ("tensorflow", "jax", "torch"):
        for row in (multi_similarity, proxy_anchor):
            assert row["systems"][backend]["facts"]["finite"]
            assert row["ratios"][backend]["median"] > 0
        facts = multi_similarity["systems"][backend]["facts"]
        assert facts["value"] == pytest.approx(pml, rel=1e-4)
    assert multi_similarity["systems"]["jax"]["facts"]["compiled"] == "jax.jit"
    assert multi_similarity["systems"]["torch"]["facts"]["compiled"] == "eager"
    table = (tmp_path / "backends.md").read_text()
    assert "| benchmark | PML peer | TensorFlow | JAX (jax.jit) | PyTorch (eager) |" in table
    assert "AMD" in table or report["machine"]["cpu"] in table


def test_backend_suite_runs_without_tensorflow(tmp_path):
    """`python -m benchmarks --quick --backends jax torch` where TensorFlow cannot be
    imported: every case runs (the CPU path a GPU machine without TensorFlow takes)."""
    env = _without_tensorflow(tmp_path)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--backends", "jax", "torch",
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "backends.json").read_text())
    names = [row["name"] for row in report["cases"]]
    assert len(names) == 8 and not any("8,192" in name for name in names)
    for row in report["cases"]:
        assert {"jax", "torch"} <= set(row["systems"]) and "tensorflow" not in row["systems"]
        for name in ("jax", "torch"):
            assert row["systems"][name]["median"] > 0
            assert row["systems"][name]["facts"].get("finite", True)
    knn = report["cases"][-1]["systems"]
    assert knn["jax"]["facts"]["first_neighbours"] == knn["peer"]["facts"]["first_neighbours"]
    assert "| exact kNN" in (out / "backends.md").read_text()


def test_gpu_refused_in_one_line_without_tensorflow(tmp_path):
    """`--device gpu --backends jax torch` with no GPU (and no TensorFlow): one line
    naming the frameworks that see none, nothing timed or written."""
    env = {**_without_tensorflow(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--device", "gpu", "--quick", "--backends",
         "jax", "torch", "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "--device gpu: no GPU is visible here to PyTorch, JAX" in last, last
    assert "--device cpu" in last and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_vector_stores_quick_mode(tmp_path, capsys):
    """benchmarks/bench_vector_stores.py --quick: faiss flat/HNSW and Milvus Lite FLAT/HNSW,
    each in its own process, one table row each; the exact ones find the exact top-10."""
    from benchmarks.bench_vector_stores import exact_top_k, load_data, main

    gallery, queries = load_data(500, 8, 20)
    scores = queries @ gallery.T
    np.testing.assert_array_equal(exact_top_k(gallery, queries, 10, block=64),
                                  np.argsort(-scores, axis=1, kind="stable")[:, :10])
    assert main(["--quick", "--json", str(tmp_path / "stores.json")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"20,000 x 32 .*load average", out)
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ")]
    assert [row[0].strip() for row in rows[1:]] == ["faiss_flat", "milvus_flat", "faiss_hnsw",
                                                     "milvus_hnsw"]
    recalls = json.loads((tmp_path / "stores.json").read_text())["recalls"]
    assert recalls["faiss_flat"] == recalls["milvus_flat"] == 1.0
    assert recalls["faiss_hnsw"] > 0.8 and recalls["milvus_hnsw"] > 0.8


def test_omniglot_twins_tabulates_each_side_and_both_ratios():
    """benchmarks/omniglot_twins.py: medians per side, ratios paired round by round."""
    from benchmarks import omniglot_twins as twins

    results = {side: [{"step_ms": ms, "warmup_s": 2.0, "load": 1.0} for ms in times]
               for side, times in (("keras_dml", [60, 90]), ("pml", [100, 100]),
                                   ("keras_plain", [50, 50]), ("torch_plain", [40, 25]))}
    text = twins.table(results, 100, 20, 2, "AMD EPYC, AVX-512")
    assert "| keras_dml | 75 [60-90] | 2.0 | 1.0-1.0 |" in text
    assert "keras_dml / pml: 0.75 [0.60-0.90]" in text
    assert "keras_plain / torch_plain: 1.62 [1.25-2.00]" in text
    assert text.startswith("100 steps of 32 x 4 after 20, 2 thread(s) a side, AMD EPYC")


@pytest.mark.shared_data
def test_omniglot_twins_runs_every_side_in_its_own_process():
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.omniglot_twins", "--steps", "2", "--warmup", "1",
         "--rounds", "1", "--threads", "1"], cwd=ROOT, capture_output=True, text=True,
        timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    for side in ("keras_dml", "pml", "keras_plain", "torch_plain"):
        assert f"| {side} | " in result.stdout
    assert "keras_dml / pml: " in result.stdout and "keras_plain / torch_plain: " in result.stdout


def test_omniglot_twins_refuses_zero_steps(capsys):
    from benchmarks import omniglot_twins as twins

    with pytest.raises(SystemExit):
        twins.main(["--steps", "0"])
    assert "--steps must be at least 1, got 0" in capsys.readouterr().err
