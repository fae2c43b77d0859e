"""The machine a figure comes from, recorded and printed by every benchmark.

`machine_info()` gives the CPU (model, logical CPUs, the SIMD flags that pick the
frameworks' kernels: avx2, avx512f, avx512_bf16, amx), the instruction-set caps in the
environment (`ONEDNN_MAX_CPU_ISA`, `XLA_FLAGS=--xla_cpu_max_isa`: an AVX-512 machine
standing in for an AVX2 one), the kind each compiler generates code for, and the
versions of TensorFlow, oneDNN, JAX, PyTorch and Keras. `describe()` says it in one
line. Nothing here imports a framework: oneDNN's version is read from PyTorch's build
configuration only when PyTorch is already imported.
"""

import importlib.metadata
import importlib.util
import os
import re
import sys


def _load_cpu_module():
    """`keras_dml.backend.cpu`, loaded from its file: importing it through the package
    would import Keras and its backend, which the harness's parent process must not."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "keras_dml", "backend", "cpu.py")
    spec = importlib.util.spec_from_file_location("keras_dml_backend_cpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cpu = _load_cpu_module()

__all__ = ["cpu_line", "describe", "machine_info"]

VERSIONS = ("tensorflow", "keras", "jax", "jaxlib", "torch")


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def onednn_version():
    """oneDNN's version as PyTorch was built with it ("3.7.1"), when PyTorch is imported
    already; else None. (TensorFlow's own oneDNN has no public version query.)"""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    found = re.search(r"oneDNN\)? v?(\d+(?:\.\d+)+)", torch.__config__.show())
    return found.group(1) if found else None


def machine_info(environ=None):
    """{"cpu", "logical_cpus", "simd": {flag: bool}, "isa_limits", "kind": {"onednn",
    "xla"}, "versions"} of this machine and environment (default `os.environ`)."""
    flags = cpu.cpu_flags()
    versions = {package: _version(package) for package in VERSIONS}
    versions["onednn"] = onednn_version()
    return {"cpu": cpu.cpu_model_name() or "unknown CPU", "logical_cpus": os.cpu_count(),
            "simd": None if flags is None else cpu.simd_flags(flags),
            "isa_limits": cpu.isa_limits(environ),
            "kind": {compiler: cpu.kind(compiler, environ=environ)
                     for compiler in ("onednn", "xla")},
            "versions": versions}


_KIND_TITLES = {"avx512": "AVX-512", "avx2": "AVX2", "older": "no AVX2", "unknown": ""}


def cpu_line(info):
    """The CPU in a few words: "Intel(R) Xeon(R) Processor, AVX-512 (avx2 avx512f
    avx512_bf16 amx_tile)", and the caps that emulate another kind ("run as AVX2:
    ONEDNN_MAX_CPU_ISA=AVX2, --xla_cpu_max_isa=AVX2")."""
    simd = info["simd"]
    if simd is None:
        return info["cpu"]
    widest = _KIND_TITLES[cpu.kind(flags={f for f, present in simd.items() if present},
                                   environ={})]
    present = " ".join(flag for flag, on in simd.items() if on and flag != "fma")
    line = f"{info['cpu']}, {widest} ({present})"
    limits = info["isa_limits"]
    if any(limits.values()):
        caps = ", ".join(text for text in (
            limits["onednn"] and f"ONEDNN_MAX_CPU_ISA={limits['onednn']}",
            limits["xla"] and f"--xla_cpu_max_isa={limits['xla']}") if text)
        kinds = sorted({_KIND_TITLES[k] for k in info["kind"].values()})
        line += f", run as {'/'.join(kinds)}: {caps}"
    return line


def describe(info):
    """One line: the CPU (`cpu_line`), logical CPUs and the versions."""
    versions = ", ".join(f"{name} {version}" for name, version in info["versions"].items()
                         if version)
    return f"{cpu_line(info)}; {info['logical_cpus']} logical CPUs; {versions}"
