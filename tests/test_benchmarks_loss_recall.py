"""benchmarks/loss_recall.py: every loss in the table, seeds averaged, one real --quick run."""

import json
import math
import os
import re
import subprocess
import sys

import pytest

from benchmarks.loss_recall import FAMILY, PML_TWINS, aggregate, main, markdown
from keras_dml.losses import LOSSES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_registered_loss_has_a_family_and_every_twin_is_a_pml_class():
    assert set(FAMILY) == set(LOSSES), set(FAMILY) ^ set(LOSSES)
    assert set(PML_TWINS) <= set(LOSSES), set(PML_TWINS) - set(LOSSES)
    pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
    missing = [twin for twin in PML_TWINS.values() if not hasattr(pml_losses, twin)]
    assert not missing, missing


def test_seeds_are_averaged_and_failed_seeds_are_named():
    runs = [{"loss": "Triplet", "seed": 0, "recall@1": 0.5, "map@r": 0.2},
            {"loss": "Triplet", "seed": 1, "recall@1": 0.7, "map@r": 0.4},
            {"loss": "Triplet", "seed": 2, "error": "ValueError: bad"},
            {"loss": "VICReg", "seed": 0, "error": "ValueError: two views"}]
    triplet, vicreg = aggregate(runs)
    assert triplet["recall@1"] == pytest.approx(0.6)
    assert triplet["recall@1_spread"] == pytest.approx(0.2)
    assert triplet["map@r"] == pytest.approx(0.3)
    assert triplet["seeds"] == [0, 1] and triplet["errors"] == ["seed 2: ValueError: bad"]
    assert (triplet["family"], triplet["pml_twin"]) == ("pair-based", "TripletMarginLoss")
    assert vicreg["recall@1"] is None and vicreg["seeds"] == []
    text = markdown([triplet, vicreg], "a test")
    assert "| `Triplet` | pair-based | TripletMarginLoss | 60.0 +- 20.0 | 30.0 | 0 1 |" in text
    assert "| `VICReg` |" in text and "failed: seed 0: ValueError: two views" in text


def test_a_malformed_loss_argument_is_refused_naming_it(tmp_path):
    with pytest.raises(SystemExit, match="Triplet=margin"):
        main(["--losses", "Triplet", "--loss-args", "Triplet=margin", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["--losses", "Tripletx", "--out", str(tmp_path)])
    assert not (tmp_path / "loss_recall.md").exists()


@pytest.mark.slow  # two short trainings in their own processes (about 80 s on 2 loaded cores)
def test_quick_mode_writes_a_row_of_finite_figures_per_loss(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.loss_recall", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "loss_recall.json").read_text())
    assert [row["loss"] for row in report["rows"]] == ["MultiSimilarity", "ProxyAnchor"]
    for row in report["rows"]:
        assert row["errors"] == [] and row["seeds"] == [0], row
        for key in ("recall@1", "map@r"):
            assert math.isfinite(row[key]) and 0 <= row[key] <= 1, row
    assert report["machine"]["cpu"]
    text = (tmp_path / "loss_recall.md").read_text()
    for name in ("MultiSimilarity", "ProxyAnchor"):
        assert re.search(rf"\| `{name}` \| \S.* \| \d+\.\d \+- \d+\.\d \| \d+\.\d \| 0 \|", text)
