"""keras_dml.backend.cpu: the CPU kind from /proc/cpuinfo flags and the ISA caps."""

import pytest

from keras_dml.backend import cpu

AVX512 = {"fma", "avx2", "avx512f", "avx512_bf16", "amx_tile"}
AVX2 = {"fma", "avx", "avx2"}


@pytest.mark.parametrize("flags, environ, compiler, expected", [
    (AVX512, {}, "onednn", "avx512"),
    (AVX2, {}, "onednn", "avx2"),
    ({"sse4_2", "avx"}, {}, "xla", "older"),
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "onednn", "avx2"),
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, "onednn", "avx512"),
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "ALL"}, "onednn", "avx512"),
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "SSE41"}, "onednn", "older"),
    # a cap above the hardware does not widen it
    (AVX2, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "onednn", "avx2"),
    # each compiler reads its own cap
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "xla", "avx512"),
    (AVX512, {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false --xla_cpu_max_isa=AVX2"},
     "xla", "avx2"),
    (AVX512, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}, "onednn", "avx512"),
])
def test_kind_is_the_hardware_lowered_by_its_cap(flags, environ, compiler, expected):
    assert cpu.kind(compiler, flags=flags, environ=environ) == expected


def test_kind_names_a_bad_compiler():
    with pytest.raises(ValueError, match="'mkl'"):
        cpu.kind("mkl", flags=AVX2, environ={})


def test_flags_and_model_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\n"
                    "flags\t\t: fpu avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu.cpu_model_name(info) == "AMD EPYC 9R14"
    assert cpu.cpu_flags(info) == {"fpu", "avx", "avx2", "fma"}
    assert cpu.simd_flags(cpu.cpu_flags(info))["avx512f"] is False


def test_without_cpuinfo_the_kind_is_unknown(tmp_path):
    missing = tmp_path / "none"
    assert cpu.cpu_flags(missing) is None and cpu.cpu_model_name(missing) is None
    assert cpu.kind(flags=None, environ={}) in cpu.KINDS  # this machine's
    assert cpu._hardware_kind(None) == "unknown"


@pytest.mark.parametrize("flags, environ, expected", [
    (AVX512, {}, "fused"),
    (AVX2, {}, "keras"),
    (AVX512, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "keras"),
    (AVX2, {"TF_ENABLE_ONEDNN_OPTS": "0"}, "fused"),  # Eigen's kernel, not oneDNN's
])
def test_tensorflow_batch_norm_form_follows_the_onednn_kind(flags, environ, expected):
    assert cpu.tensorflow_batch_norm(environ, flags) == expected


def test_choice_line_names_the_kind_the_cap_and_the_form():
    line = cpu.tensorflow_choice_line({"ONEDNN_MAX_CPU_ISA": "AVX2"}, AVX512)
    assert line.startswith("CPU kind: avx2 (ONEDNN_MAX_CPU_ISA=AVX2)")
    assert "batch norm: Keras ops" in line
    assert "batch norm: fused kernel" in cpu.tensorflow_choice_line({}, AVX512)
