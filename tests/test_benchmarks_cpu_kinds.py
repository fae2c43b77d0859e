"""benchmarks/machine_info.py and benchmarks/cpu_kinds.py: the machine recorded next to
the figures, and the two-kind run of keras_dml's step against PML's.

No timing is asserted: the machine's load decides the figures.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import cpu_kinds, machine_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_machine_info_records_simd_flags_caps_and_versions():
    """An AVX-512 machine run as AVX2 says so next to its figures."""
    info = machine_info.machine_info({"ONEDNN_MAX_CPU_ISA": "AVX2",
                                      "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"})
    assert set(info["versions"]) >= {"tensorflow", "keras", "jax", "torch", "onednn"}
    assert info["versions"]["keras"]
    assert info["isa_limits"] == {"onednn": "AVX2", "xla": "AVX2"}
    line = machine_info.describe(info)
    assert "keras " + info["versions"]["keras"] in line
    if info["simd"] is None:
        pytest.skip("no /proc/cpuinfo flags here")
    assert set(info["simd"]) >= {"avx2", "avx512f", "avx512_bf16", "amx_tile"}
    if info["simd"]["avx2"]:
        assert info["kind"] == {"onednn": "avx2", "xla": "avx2"}
        assert "ONEDNN_MAX_CPU_ISA=AVX2" in line and "--xla_cpu_max_isa=AVX2" in line


def test_machine_info_without_caps_says_none():
    info = machine_info.machine_info({})
    assert info["isa_limits"] == {"onednn": None, "xla": None}
    assert "run as" not in machine_info.cpu_line(info)


def test_each_kind_runs_pml_and_every_system_with_its_environment():
    specs, envs = cpu_kinds.plan(["tf", "jax", "tf:onednn_off"], ["native", "avx2"], 7)
    assert set(specs) == {f"{name}@{kind}" for name in ("pml", "tf", "jax", "tf:onednn_off")
                          for kind in ("native", "avx2")}
    assert all(kwargs["steps"] == 7 for _, kwargs in specs.values())
    assert envs["jax@avx2"]["XLA_FLAGS"].endswith("--xla_cpu_max_isa=AVX2")
    assert envs["tf@avx2"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert "ONEDNN_MAX_CPU_ISA" not in envs["tf@native"]
    assert envs["tf:onednn_off@native"]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert envs["jax@native"]["KERAS_BACKEND"] == "jax"


def test_kind_environment_keeps_the_xla_flags_already_set():
    env = cpu_kinds.kind_environment("avx2", {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"})
    assert env["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false --xla_cpu_max_isa=AVX2"


def test_ratios_are_per_round():
    results = {"pml@native": {"samples": [1.0, 2.0, 4.0]},
               "tf@native": {"samples": [0.5, 0.5, 1.0]}}
    for result in results.values():
        result.update(q1=min(result["samples"]), median=sorted(result["samples"])[1],
                      q3=max(result["samples"]))
    rows = cpu_kinds.summarize(results, ["tf"], ["native"], steps=10)
    assert rows["tf@native"]["to_pml"] == {"median": 0.25, "min": 0.25, "max": 0.5}
    assert rows["pml@native"]["step_ms"] == [100.0, 200.0, 400.0]
    assert "| tf@native | 50.0 [50.0-100.0] | 0.25 [0.25-0.50] |" in cpu_kinds.markdown(rows)


def test_bad_arguments_are_named(capsys):
    with pytest.raises(SystemExit):
        cpu_kinds.main(["--steps", "0"])
    assert "got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cpu_kinds.main(["--systems", "tf:nothing"])
    assert "tf:nothing" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_mode_runs_both_kinds_and_records_the_machine(tmp_path):
    """`--quick` on both kinds (fewer steps here): every system timed, each row's ratio
    to PML, the machine with its flags and the emulation recorded."""
    out = tmp_path / "kinds.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cpu_kinds", "--quick", "--steps", "2",
         "--rounds", "1", "--systems", "tf", "tf:stock", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["systems"]) == {f"{name}@{kind}" for name in ("pml", "tf", "tf:stock")
                                      for kind in ("native", "avx2")}
    assert report["machine"]["versions"]["tensorflow"] and report["machine"]["cpu"]
    assert all(row["to_pml"]["median"] > 0 for name, row in report["systems"].items()
               if not name.startswith("pml"))
    assert report["systems"]["tf@avx2"]["avx2_to_native"]["median"] > 0
    assert report["facts"]["tf:stock@avx2"]["layers"] == "stock"
    assert machine_info.cpu_line(report["machine"]) in done.stdout
