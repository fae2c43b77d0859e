"""benchmarks/profile_step.py: ops attributed to the main job's parts, and one real profile."""

import collections
import json
import os
import subprocess
import sys

import pytest

from benchmarks.profile_step import part_of, report

PARTS = {"conv1": "convolution", "bn0": "batch norm", "pool2": "pooling",
         "embedding": "head", "instance_cross_entropy": "loss", "adam": "optimizer"}


@pytest.mark.parametrize("op_name, expected", [
    # JAX: the op_name metadata of the compiled step's HLO instructions.
    ("jit(<lambda>)/jvp(conv1)/conv_general_dilated", ("convolution", False)),
    ("jit(<lambda>)/transpose(jvp(bn0))/reduce_sum", ("batch norm", True)),
    ("jit(<lambda>)/jvp(instance_cross_entropy)/jit(_where)/select_n", ("loss", False)),
    ("jit(<lambda>)/adam/sqrt", ("optimizer", False)),
    ("jit(<lambda>)/is_finite", ("nan guard", False)),
    ("jit(<lambda>)/jit(_where)/select_n", ("nan guard", False)),
    # TensorFlow: op names scoped by layer, with Keras' call-count suffixes.
    ("StatefulPartitionedCall/cnn3_embedder_1/pool2_1/MaxPool", ("pooling", False)),
    ("StatefulPartitionedCall/gradient_tape/cnn3_embedder_1/conv1_1/convolution/"
     "Conv2DBackpropFilter", ("convolution", True)),
    ("StatefulPartitionedCall/All_13", ("nan guard", False)),
    ("StatefulPartitionedCall/cnn3_embedder_1/flatten_1/Reshape", ("other ops", False)),
])
def test_ops_are_attributed_by_their_name_scopes(op_name, expected):
    assert part_of(op_name, PARTS) == expected


def test_report_splits_the_wall_time_per_step():
    totals = collections.Counter({("convolution", False): 0.2, ("convolution", True): 0.4,
                                  ("loss", True): 0.1, "sampler": 0.05})
    row = report(wall=1.0, totals=totals, steps=10)
    assert row["wall_ms_per_step"] == 100.0
    assert row["parts"]["convolution"] == {"forward": 20.0, "backward": 40.0, "total": 60.0}
    assert row["parts"]["loss"]["total"] == 10.0
    assert row["parts"]["sampler"]["total"] == 5.0
    assert "optimizer" not in row["parts"]  # no op of it was seen
    assert row["op_ms_per_step"] == 70.0
    assert row["rest_of_wall_ms_per_step"] == 25.0


@pytest.mark.slow  # the main job's model compiled and profiled for a few steps (~30 s)
def test_profile_of_the_main_job_finds_its_parts(tmp_path):
    out = tmp_path / "profile.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_step", "--steps", "2", "--warmup", "1",
         "--loss", "MultiSimilarity", "--json", str(out)], capture_output=True, text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == 0, result.stderr[-2000:]
    info = json.loads(out.read_text())
    assert info["backend"] in result.stdout and info["cpu"]
    assert info["loss"] == "multi_similarity" and info["machine"]["versions"]["keras"]
    if info["backend"] == "tensorflow":  # the heaviest op types, for what oneDNN runs
        assert all(ms >= 0 for ms in info["op_types_ms_per_step"].values())
        assert any("Conv2D" in op_type for op_type in info["op_types_ms_per_step"])
    parts = info["parts"]
    for name in ("convolution", "batch norm", "loss", "optimizer"):
        assert parts[name]["total"] > 0, name
    assert parts["convolution"]["backward"] > 0
    assert parts["sampler"]["total"] > 0
    assert 0 < info["op_ms_per_step"]


def test_hlo_fusions_without_metadata_are_named_after_what_they_call():
    from benchmarks.profile_step import hlo_op_names

    text = """HloModule step
%fused_computation.5 (param_0.5: f32[32,14,14,128], param_1.5: f32[14,14,128,32]) -> f32[32] {
  ROOT %convolution.6 = f32[32,3,3,32]{3,2,1,0} convolution(%param_0.5, %param_1.5)
}
%fused_computation.7 (param_0.7: f32[4,4]) -> f32[4,4] {
  ROOT %transpose.1 = f32[4,4]{0,1} transpose(%param_0.7)
}
ENTRY %main (p: f32[4]) -> f32[4] {
  %ynn_fusion.38 = f32[128] fusion(%a, %b), kind=kCustom, calls=%fused_computation.38, \
metadata={op_name="jit(step)/jvp(conv1)/conv_general_dilated" stack_frame_id=4}
  %ynn_fusion.5 = f32[32,3,3,32]{3,2,1,0} fusion(%c, %d), kind=kCustom, calls=%fused_computation.5
  ROOT %transpose_copy_fusion.3 = f32[4,4] fusion(%e), kind=kLoop, calls=%fused_computation.7
}
""".replace("\\\n", "")
    names = hlo_op_names(text)
    assert names["ynn_fusion.38"] == "jit(step)/jvp(conv1)/conv_general_dilated"
    assert part_of(names["ynn_fusion.5"], PARTS) == ("convolution", True)
    assert part_of(names["transpose_copy_fusion.3"], PARTS) == ("other ops", False)
