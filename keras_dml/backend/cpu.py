"""The CPU's vector-instruction kind, as the frameworks' CPU kernels see it.

TensorFlow's and PyTorch's oneDNN pick their convolution kernels by the widest vector
instructions the CPU has and `ONEDNN_MAX_CPU_ISA` allows; XLA (JAX, TensorFlow's
`jit_compile`) by the CPU's and `XLA_FLAGS=--xla_cpu_max_isa=...`. `kind` names the
result: "avx512" (AVX-512 usable), "avx2" (AVX2 and FMA, no AVX-512: most laptops and
many cloud VMs) or "older". The reading needs no framework; on a system without
/proc/cpuinfo (not Linux) the flags are unknown and the kind is "unknown".
"""

import os
import re

__all__ = ["KINDS", "SIMD_FLAGS", "cpu_flags", "cpu_model_name", "isa_limits", "kind",
           "simd_flags", "tensorflow_batch_norm", "tensorflow_choice_line"]

#: the flags (as /proc/cpuinfo spells them) that decide the kernels of the frameworks
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
KINDS = ("avx512", "avx2", "older", "unknown")
CPUINFO = "/proc/cpuinfo"


def _cpuinfo_field(name, path=CPUINFO):
    """The first value of field `name` in `path`, or None when unreadable or absent."""
    try:
        with open(path) as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        return None
    return None


def cpu_flags(path=CPUINFO):
    """The CPU's feature flags (a set of /proc/cpuinfo names), or None when unknown."""
    flags = _cpuinfo_field("flags", path)
    return None if flags is None else set(flags.split())


def cpu_model_name(path=CPUINFO):
    """The CPU's model name ("Intel(R) Xeon(R) Processor"), or None when unknown."""
    return _cpuinfo_field("model name", path)


def simd_flags(flags):
    """{flag: present} for each of `SIMD_FLAGS`, from a set of flags."""
    return {flag: flag in flags for flag in SIMD_FLAGS}


def _hardware_kind(flags):
    if flags is None:
        return "unknown"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= flags else "older"


def _capped_kind(limit):
    """The kind an ISA limit allows ("AVX2", "AVX512_CORE_AMX", "SSE4_2"), None: no cap."""
    value = limit.strip().upper()
    if value in ("", "ALL", "DEFAULT"):
        return None
    if value.startswith(("AVX512", "AVX10")):
        return "avx512"
    return "avx2" if value.startswith("AVX2") else "older"


def isa_limits(environ=None):
    """The instruction-set caps set in the environment: {"onednn": value or None,
    "xla": value or None} from `ONEDNN_MAX_CPU_ISA` and `--xla_cpu_max_isa` in
    `XLA_FLAGS`."""
    environ = os.environ if environ is None else environ
    xla = re.search(r"--xla_cpu_max_isa=(\S+)", environ.get("XLA_FLAGS", ""))
    return {"onednn": environ.get("ONEDNN_MAX_CPU_ISA") or None,
            "xla": xla.group(1) if xla else None}


def kind(compiler="onednn", flags=None, environ=None):
    """The CPU kind `compiler` ("onednn": TensorFlow's and PyTorch's kernels, "xla":
    JAX's) generates code for: the hardware's ("avx512", "avx2", "older"; "unknown"
    without /proc/cpuinfo) lowered by its cap in the environment (`isa_limits`).

    Args:
        compiler: "onednn" or "xla".
        flags: the CPU's flags (default: `cpu_flags()`).
        environ: the environment (default: `os.environ`).

    Raises:
        ValueError: `compiler` is neither "onednn" nor "xla".
    """
    if compiler not in ("onednn", "xla"):
        raise ValueError(f"compiler must be 'onednn' or 'xla', got {compiler!r}.")
    hardware = _hardware_kind(cpu_flags() if flags is None else flags)
    limit = isa_limits(environ)[compiler]
    capped = None if limit is None else _capped_kind(limit)
    if hardware == "unknown" or capped is None:
        return hardware
    return max(hardware, capped, key=KINDS.index)  # the narrower of the two


def tensorflow_batch_norm(environ=None, flags=None):
    """How `FusedBatchNormalization` normalises on TensorFlow here: "fused"
    (`FusedBatchNormV3`) or "keras" (Keras' separate moment and scaling ops).

    "keras" where TensorFlow's oneDNN kernels are on (`TF_ENABLE_ONEDNN_OPTS` not "0")
    and oneDNN runs as the AVX2 kind: there oneDNN's fused batch-norm forward kernel
    took most of the main job's step (benchmarks/README.md, "CPU kinds"), where on
    AVX-512 it is the faster form.
    """
    environ = os.environ if environ is None else environ
    onednn_on = environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"
    avx2 = kind("onednn", flags=flags, environ=environ) in ("avx2", "older")
    return "keras" if onednn_on and avx2 else "fused"


def tensorflow_choice_line(environ=None, flags=None):
    """One line naming the CPU kind and the batch-norm form taken on TensorFlow, for the
    first line of `keras-dml train`."""
    environ = os.environ if environ is None else environ
    found = kind("onednn", flags=flags, environ=environ)
    cap = environ.get("ONEDNN_MAX_CPU_ISA")
    form = tensorflow_batch_norm(environ, flags)
    return (f"CPU kind: {found}{f' (ONEDNN_MAX_CPU_ISA={cap})' if cap else ''}; "
            f"batch norm: {'fused kernel' if form == 'fused' else 'Keras ops'} "
            f"(TF_ENABLE_ONEDNN_OPTS={environ.get('TF_ENABLE_ONEDNN_OPTS', '1')})")
