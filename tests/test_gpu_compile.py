"""The cupy backend's kernels compile, checked without a GPU.

cupy imports on a machine without a GPU, and NVRTC (the nvidia-cuda-nvrtc-cu12
wheel) compiles CUDA source to PTX there. For every kernel the test builds the
complete source cupy.ElementwiseKernel would compile (cupy's own code generator
given the arrays' layout, behind cupy's headers) and compiles it with cupy's
options for a Hopper GPU. Skipped only where those wheels are missing (the
`test` extra installs them; under CI, which installs that extra, missing wheels
fail the test instead).

Finding NVRTC: installed by pip into site-packages, cupy finds the wheel's
libnvrtc.so.12 (nvidia/cuda_nvrtc/lib) by itself. Installed elsewhere (pip
--target, a PYTHONPATH entry), cupy does not look there, so `_load_nvrtc` loads
that library first from the sys.path entry that holds it; cupy then uses the
loaded copy.

    python -m pytest -q tests/test_gpu_compile.py
"""
import ctypes
import glob
import hashlib
import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from dezero.static.backends import gpu

# The arch of the GPUs the benchmarks run on (H100/H200); NVRTC 12.x knows it.
ARCH = "compute_90"


# A stand-in for codegen.Param and codegen.KernelSpec (FUSION.md), for the
# hand-written specs below.
@dataclass(frozen=True)
class Param:
    name: str
    ctype: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class KernelSpec:
    name: str
    inputs: tuple
    outputs: tuple
    shape: tuple
    body: str

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()


def f32(name, shape=(4, 3)):
    return Param(name, "float", "float32", shape)


def f64(name, shape=(4, 3)):
    return Param(name, "double", "float64", shape)


HAND_SPECS = [
    # tanh chain, a row broadcast: tanh(x * a + b) * (1 / (1 + exp(-x))) + x ** 2
    KernelSpec("k0", (f32("x"), f32("a", (3,)), f32("b", ())), (f32("g"),), (4, 3),
               "const float c = x * a;\nconst float d = c + b;\nconst float e = tanh(d);\n"
               "const float f = exp(-x);\nconst float h = 1.0f / (1.0f + f);\n"
               "g = e * h + pow(x, 2.0f);\n"),
    # Adam: three outputs, 0-d hyperparameters, a value named `i` (cupy's index)
    KernelSpec("k1", (f32("p"), f32("gp"), f32("m"), f32("v"), f32("lr", ()), f32("i", ())),
               (f32("m2"), f32("v2"), f32("p2")), (4, 3),
               "const float t1 = m + (gp - m) * 0.1f;\nconst float t2 = v + (gp * gp - v)"
               " * 0.001f;\nm2 = t1;\nv2 = t2;\np2 = p - lr * t1 / (sqrt(t2) + i);\n"),
    # float64 ReLU backward and sign: comparisons cast to the result type
    KernelSpec("k2", (f64("x"), f64("gy")), (f64("gx"), f64("s")), (4, 3),
               "const double m = (double)((x > 0) ? 1 : 0);\ngx = gy * m;\n"
               "s = (double)((x > 0) - (x < 0));\n"),
    # an output named `i`, integer and bool parameters
    KernelSpec("k3", (Param("t", "long long", "int64", (4,)), f32("y", (4,))),
               (f32("i", (4,)), Param("ok", "bool", "bool", (4,))), (4,),
               "const float hit = (float)(t == 1);\ni = hit * y;\nok = (bool)(y > 0.0f);\n"),
]


def test_params_are_typed_by_dtype_and_cupys_index_is_renamed():
    assert gpu.elementwise_params(HAND_SPECS[0])[:2] == (
        "float32 x, float32 a, float32 b", "float32 g")
    ins, outs, body = gpu.elementwise_params(HAND_SPECS[3])
    assert (ins, outs) == ("int64 t, float32 y", "float32 _v_i, bool ok")
    assert body.startswith("{\nfloat &i = _v_i;\n") and body.endswith("\n}")
    assert "const float &i = _v_i;" in gpu.elementwise_params(HAND_SPECS[1])[2]
    assert "// in_params:  float32 x, float32 a, float32 b" in gpu.kernel_source(HAND_SPECS[0])


# =============================================================================
# NVRTC: the complete source of each kernel, compiled to PTX
# =============================================================================


def _missing(what):
    (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{what} is not installed")


def _load_nvrtc():
    """cupy's NVRTC binding, its library loaded (see the module docstring), or skip."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        _missing("cupy-cuda12x")
    from cupy_backends.cuda.libs import nvrtc
    try:
        nvrtc.getVersion()
        return nvrtc
    except Exception:  # noqa: BLE001 - cupy's finder raises its own error types
        pass
    for entry in sys.path:
        libraries = sorted(glob.glob(os.path.join(entry or ".", "nvidia", "cuda_nvrtc",
                                                  "lib", "libnvrtc.so.*")))
        if libraries:
            ctypes.CDLL(libraries[0], mode=ctypes.RTLD_GLOBAL)
            nvrtc.getVersion()
            return nvrtc
    _missing("nvidia-cuda-nvrtc-cu12")


def cuda_source(specs) -> str:
    """What cupy compiles for these kernels: its headers, then for each kernel the
    code cupy's ElementwiseKernel generates when called on arrays of the spec's
    shape (broadcast inputs: not contiguous; 32-bit indexes)."""
    import cupy
    from cupy._core import _carray, _kernel, core
    ndarray_kind, indexer_kind = 1, 2  # cupy's _ArgKind: ARG_KIND_NDARRAY, _INDEXER
    parts = ["\n".join(f"#include <{h}>" for h in core._cupy_header_list)]
    for spec in specs:
        kernel = gpu.elementwise_kernel(*gpu.elementwise_params(spec), spec.name)
        ndim = len(spec.shape)
        args = [_kernel._ArgInfo(ndarray_kind, cupy.ndarray, np.dtype(p.dtype), ndim,
                                 p.shape == spec.shape, True)
                for p in spec.inputs + spec.outputs]
        args.append(_kernel._ArgInfo(indexer_kind, _carray.Indexer, None, ndim, True, True))
        parts.append(_kernel._get_elementwise_kernel_code(
            tuple(args), _kernel._TypeMap(()), kernel.params, kernel.operation,
            kernel.name, kernel.preamble))
    return "\n".join(parts)


def compile_to_ptx(source: str, name: str) -> str:
    """PTX from NVRTC with the options cupy uses, or an error showing source and log."""
    from cupy._core import core
    from cupy.cuda import compiler
    options = core.assemble_cupy_compiler_options(()) + (
        "-ftz=true", f"-arch={ARCH}", "--device-as-default-execution-space")
    program = compiler._NVRTCProgram(source, f"{name}.cu", method="ptx")
    try:
        ptx, _ = program.compile(options)
    except compiler.CompileException as error:
        pytest.fail(f"NVRTC rejected {name}:\n{error.get_message()}\n{source}")
    return ptx.decode() if isinstance(ptx, bytes) else ptx


def test_hand_written_kernels_compile_to_ptx():
    _load_nvrtc()
    source = cuda_source(HAND_SPECS)
    ptx = compile_to_ptx(source, "hand_written")
    for spec in HAND_SPECS:
        assert f".entry {spec.name}(" in ptx
    assert "tanh(d)" in source and "CUPY_FOR" in source  # cupy's loop around the body


def test_a_bad_body_is_a_compile_error_with_the_source():
    _load_nvrtc()
    bad = KernelSpec("k9", (f32("x"),), (f32("y"),), (4, 3), "y = undefined_function(x);\n")
    with pytest.raises(pytest.fail.Exception, match="(?s)undefined_function.*CUPY_FOR"):
        compile_to_ptx(cuda_source([bad]), "bad")
