"""benchmarks/: every case still builds and runs (tiny sizes); the harness writes its table.

No timing is asserted: the machine's load decides the figures.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import cases, processes

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


def _needs(case):
    if case.group == "training" and not os.path.isdir(
            os.path.join(__import__("benchmarks.data").data.SHARED, "omniglot")):
        pytest.skip("Omniglot is not in ../shared/datasets")


@pytest.mark.parametrize("case", [c for c in cases.CASES if c.group != "losses"],
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


def test_loss_cases_agree_with_their_peer():
    """The loss cases time the same quantity on both sides: equal values at smoke size."""
    import importlib

    def run(factory, kwargs):
        module, function = factory.split(":")
        return getattr(importlib.import_module(module), function)(**kwargs)[1]

    for case in (c for c in cases.CASES if c.group == "losses"):
        systems = case.systems_for("smoke")
        ours, theirs = run(*systems["keras_dml"]), run(*systems["peer"])
        assert ours["finite"] and theirs["finite"]
        if case.same_value:  # see the cases' comments for the others
            assert ours["value"] == pytest.approx(theirs["value"], rel=1e-3, abs=1e-5), case.name


def test_command_writes_json_and_markdown(tmp_path):
    """`python -m benchmarks --smoke --check-fairness` on one case: processes, table, JSON."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--check-fairness", "--threads", "1",
         "--only", "losses/NCA", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "benchmarks.json").read_text())
    (row,) = report["cases"]
    assert row["case"] == "losses/NCA"
    assert set(row["systems"]) == {"keras_dml", "peer"}
    assert row["ratio"] > 0 and row["peer_alone"]["n"] == 1
    assert report["machine"]["threads"] == 1 and report["machine"]["versions"]["tensorflow"]
    table = (tmp_path / "benchmarks.md").read_text()
    assert "| losses: NCA |" in table and "peer alone / in harness" in table


def test_unknown_case_is_named():
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit):
        main(["--only", "no-such-case"])
