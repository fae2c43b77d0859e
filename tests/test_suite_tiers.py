"""tests/conftest.py's `--skip-passed-in`: CI's final stage leaves out exactly the tests that
passed in the README's quick tier (its JUnit XML report) and runs the rest."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The parametrised cases of a small, fast module, and a test of this one.
SELECTION = ["tests/test_ops.py::test_pairwise_matches_numpy",
             "tests/test_suite_tiers.py::test_a_fixed_case"]


def test_a_fixed_case():
    assert sorted("cab") == ["a", "b", "c"]


def _pytest(*arguments):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTEST_ADDOPTS": ""}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", *arguments],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout


@pytest.mark.slow
def test_the_final_stage_runs_only_what_did_not_pass_before(tmp_path):
    report = tmp_path / "quick.xml"
    code, out = _pytest(SELECTION[0], f"--junitxml={report}")
    passed = re.search(r"(\d+) passed", out)
    assert code == 0 and passed and int(passed.group(1)) > 1, out
    code, out = _pytest(*SELECTION, f"--skip-passed-in={report}")
    assert code == 0, out
    assert f"1 passed, {passed.group(1)} deselected" in out, out


def _final_stage_arguments(report):
    """The arguments of .ci/run's last pytest command, with `report` for its JUnit XML."""
    with open(os.path.join(ROOT, ".ci", "run")) as script:
        line = next(line for line in script if line.startswith("pytest ") and "--full" in line)
    words = line.split("2>&1")[0].split()[1:]
    return [word.replace('"$SCRATCH/readme-quick.xml"', str(report)) for word in words]


@pytest.mark.slow
def test_the_final_stage_command_reads_the_suites_options(tmp_path):
    # As CI runs it: no test path, the report in a scratch folder outside the tree. pytest
    # reads conftest.py (which defines --full and --skip-passed-in) only from the root it
    # chose; --help lists the options it found there, without collecting the suite.
    report = tmp_path / "quick.xml"
    report.write_text("<testsuites/>")
    arguments = _final_stage_arguments(report)
    assert any(str(report) in word for word in arguments), arguments
    code, out = _pytest(*arguments, "--help")
    assert code == 0 and "--skip-passed-in=JUNIT_XML" in out, out[-2000:]
