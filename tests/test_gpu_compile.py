"""The cupy backend checked without a GPU: its kernels compile, its code is generated.

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
import dataclasses
import glob
import os
import sys
import warnings

import numpy as np
import pytest
from op_table import ROWS

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.kernels import gpu, gpu_reductions
from dezero.kernels.codegen import KernelSpec, Param, kernel_spec
from dezero.models import GPT, MLP
from dezero.static import ir, passes
from dezero.utils import clip_grad_norm

# The chains of the benchmarks (and of tests/gpu): x a matrix, a a row, b a scalar.
CHAINS = {
    "arithmetic": lambda x, a, b: ((x * a + b) * (x - a) + b * b) * x + a,
    "transcendental": lambda x, a, b: F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2,
}

# The arch of the GPUs the benchmarks run on (H100/H200); NVRTC 12.x knows it.
ARCH = "compute_90"


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
    # Adam: three outputs, 0-d hyperparameters
    KernelSpec("k1", (f32("p"), f32("gp"), f32("m"), f32("v"), f32("lr", ()), f32("eps", ())),
               (f32("m2"), f32("v2"), f32("p2")), (4, 3),
               "const float t1 = m + (gp - m) * 0.1f;\nconst float t2 = v + (gp * gp - v)"
               " * 0.001f;\nm2 = t1;\nv2 = t2;\np2 = p - lr * t1 / (sqrt(t2) + eps);\n"),
    # float64 ReLU backward and sign: comparisons cast to the result type
    KernelSpec("k2", (f64("x"), f64("gy")), (f64("gx"), f64("s")), (4, 3),
               "const double m = (double)((x > 0) ? 1 : 0);\ngx = gy * m;\n"
               "s = (double)((x > 0) - (x < 0));\n"),
    # integer and bool parameters
    KernelSpec("k3", (Param("t", "long long", "int64", (4,)), f32("y", (4,))),
               (f32("z", (4,)), Param("ok", "bool", "bool", (4,))), (4,),
               "const float hit = (float)(t == 1);\nz = hit * y;\nok = (bool)(y > 0.0f);\n"),
]


def test_params_are_typed_by_dtype_and_the_body_is_the_operation():
    assert gpu.elementwise_params(HAND_SPECS[3]) == (
        "int64 t, float32 y", "float32 z, bool ok", HAND_SPECS[3].body)
    assert gpu.kernel_source(HAND_SPECS[0]).startswith(
        "// kernel k0: cupy.ElementwiseKernel, shape (4, 3)\n"
        "// in_params:  float32 x, float32 a, float32 b\n// out_params: float32 g\n"
        "const float c = x * a;\n")


def test_a_value_named_i_is_renamed_clear_of_cupys_loop_index():
    graph = dezero.trace(CHAINS["transcendental"]).lower(
        np.ones((4, 3), np.float32), np.ones(3, np.float32), np.ones((), np.float32))
    assert "i" in {v.name for n in graph.nodes for v in n.outputs}
    spec = kernel_spec(graph.groups[0])
    assert "const float v_i = " in spec.body and "i" not in {p.name for p in spec.inputs}


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
    shape (broadcast inputs: not contiguous; 32-bit indexes); a horizontal kernel's
    raw arrays each of its own shape, C-contiguous, over a loop of one axis; a
    reduction spec's, _reduction_source, or _row_source for a row kernel."""
    import cupy
    from cupy._core import _carray, _kernel, core
    ndarray_kind, indexer_kind = 1, 2  # cupy's _ArgKind: ARG_KIND_NDARRAY, _INDEXER
    parts = ["\n".join(f"#include <{h}>" for h in core._cupy_header_list)]
    for spec in specs:
        if hasattr(spec, "axes"):
            parts.append(_reduction_source(spec) if gpu_reductions.one_fold(spec) else
                         _row_source(spec))
            continue
        kernel = gpu.elementwise_kernel(*gpu.elementwise_params(spec), spec.name)
        ndim = len(spec.shape)
        args = [_kernel._ArgInfo(ndarray_kind, cupy.ndarray, np.dtype(p.dtype),
                                 len(p.shape) if spec.segments else ndim,
                                 p.shape == spec.shape or bool(spec.segments), True)
                for p in spec.inputs + spec.outputs]
        args.append(_kernel._ArgInfo(indexer_kind, _carray.Indexer, None, ndim, True, True))
        parts.append(_kernel._get_elementwise_kernel_code(
            tuple(args), _kernel._TypeMap(()), kernel.params, kernel.operation,
            kernel.name, kernel.preamble))
    return "\n".join(parts)


def _reduction_source(spec) -> str:
    """The code cupy's ReductionKernel generates for its own kernel (not CUB's) when
    called on arrays of the spec's shape (not contiguous; 32-bit indexes), its macros
    undefined after it, so that the next kernel defines its own."""
    import cupy
    from cupy._core import _carray, _kernel, _reduction, _scalar
    ndarray_kind, indexer_kind, scalar_kind = 1, 2, 3
    kernel = gpu_reductions.reduction_kernel(tuple(gpu_reductions.reduction_params(spec).items()))
    params = (kernel.in_params + kernel.out_params +
              _kernel._get_param_info("CIndexer _in_ind, CIndexer _out_ind", False) +
              _kernel._get_param_info("int32 _block_stride", True))
    ndim, kept = len(spec.shape), len(spec.shape) - len(spec.axes)

    def info(kind, p, n):  # (a 0-d array is contiguous)
        return _kernel._ArgInfo(kind, _scalar.CScalar if kind == scalar_kind else
                                cupy.ndarray, p.dtype, n, n == 0, True)
    infos = [info(scalar_kind if p.name == "cub_off" else ndarray_kind, p,
                  0 if p.name == "cub_off" else ndim) for p in kernel.in_params]
    infos += [_kernel._ArgInfo(ndarray_kind, cupy.ndarray, p.dtype, ndim, True, True)
              if p.raw else info(ndarray_kind, p, kept) for p in kernel.out_params]
    infos += [_kernel._ArgInfo(indexer_kind, _carray.Indexer, None, n, True, True)
              for n in (ndim, kept)]
    infos.append(_kernel._ArgInfo(scalar_kind, _scalar.CScalar, np.dtype(np.int32), 0, True,
                                  True))
    code = _reduction._ReductionKernel_get_cached_function_code(
        len(kernel.in_params), len(kernel.out_params), params, tuple(infos),
        _kernel._TypeMap((("IndexT", np.int32),)), kernel.name, 512, kernel.reduce_type,
        kernel.identity, kernel.map_expr, kernel.reduce_expr, kernel.post_map_expr,
        kernel.preamble, ())
    return code + "\n#undef REDUCE\n#undef POST_MAP\n#undef _REDUCE\n"


def _row_source(spec) -> str:
    """The code cupy's ElementwiseKernel generates for a row kernel called as
    gpu_reductions.row_launch calls it (raw params only, a size: a loop of one axis):
    views of the full shape or of the kept axes' (not contiguous) and 0-d inputs, fresh
    outputs, rows and flags; then its totals' ReductionKernel."""
    import cupy
    from cupy._core import _carray, _kernel
    ndarray_kind, indexer_kind = 1, 2
    kernel = gpu.elementwise_kernel(*gpu_reductions.row_params(spec), spec.name)
    ndim, kept = len(spec.shape), len(spec.shape) - len(spec.axes)
    layout = {}  # raw param -> (its ndim, contiguous); the others: fresh, one axis
    for k, (p, level) in enumerate(zip(spec.inputs + spec.outputs, spec.levels)):
        n = 0 if p.shape == () or level == "total" else ndim if level == "full" else kept
        layout[f"_r_{p.name}"] = (n, n == 0 or k >= len(spec.inputs))
    args = [_kernel._ArgInfo(ndarray_kind, cupy.ndarray, p.dtype, *layout.get(p.name, (1, True)),
                             True) for p in kernel.in_params + kernel.out_params]
    args.append(_kernel._ArgInfo(indexer_kind, _carray.Indexer, None, 1, True, True))
    code = _kernel._get_elementwise_kernel_code(
        tuple(args), _kernel._TypeMap(()), kernel.params, kernel.operation, kernel.name,
        kernel.preamble)
    return code + ("\n" + _reduction_source(gpu_reductions.totals_spec(spec))
                   if spec.totals else "")


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


# =============================================================================
# Every kernel of the test graphs, and every elementwise op of them alone
# =============================================================================


def _step(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def _mlp_step(optimizer, activation, dtype):
    x, t = dezero.datasets.get_spiral(train=True)
    np.random.seed(0)
    model = MLP((10, 3), activation=activation)
    model(x[:1].astype(np.float32))  # make the lazily sized weights, then cast them
    for p in model.params():
        p.data = p.data.astype(dtype)
    return dezero.trace(_step(model, optimizer().setup(model))).lower(x[:30].astype(dtype),
                                                                     t[:30])


def _gpt_step(dynamic=None):
    """A small GPT's training step with clip_grad_norm and AdamW: layer norm rows, the
    attention's masked softmax (a bool param), GELU, the loss, one horizontal update;
    with dynamic=True of symbolic batch size and context length (its row kernels take
    them as scalar params)."""
    np.random.seed(0)
    model = GPT(11, 8, 2, 2, 8)
    optimizer = optimizers.AdamW().setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        clip_grad_norm(model, 1.0)
        optimizer.update()
        return loss
    x = np.random.default_rng(0).integers(0, 11, (3, 8))
    return dezero.trace(step, dynamic=dynamic).lower(x, x)


def _forward_backward(fn, *arrays):
    def run(*xs):
        y = fn(*xs)
        y.backward()
        return y, *[x.grad for x in xs]
    return dezero.trace(run).lower(*[Variable(a) for a in arrays])


def _activations(x):
    return F.sigmoid(x) * F.relu(x) + F.leaky_relu(x, 0.1) - F.softplus(x) / (F.sign(x) + 2)


def _test_graphs():
    """name -> graph recorded on the CPU and fused by the pipeline: the chains and
    training steps the GPU tests and benchmarks replay, and forward + backward of
    every row of the op table, in float32 and float64."""
    rng = np.random.default_rng(0)
    graphs = {}
    for dtype in (np.float32, np.float64):
        x, a, b = (rng.standard_normal(s).astype(dtype) for s in ((64, 33), (33,), ()))
        for name, chain in CHAINS.items():
            graphs[f"{name} {dtype.__name__}"] = dezero.trace(chain).lower(x, a, b)
        graphs[f"activations {dtype.__name__}"] = _forward_backward(_activations, x)
        graphs[f"sigmoid MLP SGD {dtype.__name__}"] = _mlp_step(optimizers.SGD, F.sigmoid,
                                                                dtype)
        graphs[f"ReLU MLP Adam {dtype.__name__}"] = _mlp_step(optimizers.Adam, F.relu, dtype)
    graphs["GPT AdamW clip_grad_norm"] = _gpt_step()
    graphs["GPT of symbolic sizes"] = _gpt_step(dynamic=True)
    with warnings.catch_warnings():  # some rows' gradients are constants
        warnings.simplefilter("ignore")
        for row in ROWS:
            graphs[f"op {row.name}"] = _forward_backward(row.fn, *row.inputs(np.float32))
    return graphs


@pytest.fixture(scope="module")
def graphs():
    return _test_graphs()


def _renamed_apart(graphs, specs_of) -> list:
    # Kernel names are unique only in their graph: k0 of graph 3 becomes k0_g3, so
    # that one program holds them all (NVRTC then parses cupy's headers once).
    return [dataclasses.replace(spec, name=f"{spec.name}_g{g}")
            for g, graph in enumerate(graphs.values()) for spec in specs_of(graph)]


def _ops_alone(graph) -> list:
    """A spec for each elementwise op node of the graph, as a kernel of its own."""
    specs = []
    fusable = [n for n in graph.of_kind("op") if passes.fusion_refusal(n, "gpu") is None
               and not n.record.reduce and not n.record.labels]  # labels: in a row kernel
    for k, node in enumerate(fusable):
        inputs = list({id(v): v for v in node.inputs}.values())  # mul(b, b) reads b once
        alone = ir.Group(f"op{k}", [node], inputs, list(node.outputs), node.outputs[0].shape)
        specs.append(kernel_spec(alone))
    return specs


def test_the_test_graphs_have_kernels(graphs):
    assert all(graphs[f"{name} {dtype}"].groups for name in [*CHAINS, "activations",
               "sigmoid MLP SGD", "ReLU MLP Adam"] for dtype in ("float32", "float64"))
    assert sum(len(g.groups) for g in graphs.values()) >= 28
    # the updates of every parameter: one horizontal kernel, one launch over raw arrays
    update, = [g for g in graphs["ReLU MLP Adam float32"].groups if g.segments]
    in_params, _, body = gpu.elementwise_params(kernel_spec(update))
    assert in_params.startswith("raw float32 _r_") and body.count("if (i < ") == 4
    # the GPT's masked softmax reads its mask as a bool param
    gpt = _fused_for_the_gpu(graphs["GPT AdamW clip_grad_norm"])
    assert any(p.dtype == "bool" for g in gpt.groups for p in kernel_spec(g).inputs)


def test_every_kernel_of_the_test_graphs_compiles_to_ptx(graphs):
    _load_nvrtc()
    # groups with reductions: test_every_reduction_kernel_compiles_to_ptx
    specs = _renamed_apart(graphs, lambda graph: [kernel_spec(g) for g in graph.groups
                                                  if g.axes is None])
    ptx = compile_to_ptx(cuda_source(specs), "test_graphs")
    assert [s.name for s in specs if f".entry {s.name}(" not in ptx] == []


def _fused_for_the_gpu(graph):
    unfused = graph.with_nodes(graph.nodes)
    unfused.device = "gpu"  # as if traced on cupy arrays: fused for cupy's kernels
    return passes.fuse(unfused)


# A reduction with elementwise work before and after it: (function, argument shapes).
REDUCTIONS = {
    "mean of squared error": (lambda y, t: F.mean((y - t) ** 2), [(64, 10), (64, 10)]),
    "row sums": (lambda x, c: F.sum(F.exp(x) * c - 1.0, axis=1) * 3.0, [(33, 20), (20,)]),
    "keepdims, a row input": (lambda x, r: F.sum(x * x, axis=1, keepdims=True) / r,
                              [(40, 7), (40, 1)]),
    "column max": (lambda x, b: F.max(F.tanh(x), axis=0) + b, [(50, 9), (9,)]),
    "min of two axes": (lambda x: F.min(x * 2.0 + 1.0, axis=(0, 2)), [(6, 5, 4)]),
    "sum_to": (lambda gy, x: F.sum_to(gy * x, (1, 12)), [(30, 12), (30, 12)]),
    "one input": (lambda x: F.sum(F.exp(x)), [(300,)]),
    "a value stored": (lambda x: (F.sum(F.exp(x), axis=1), F.exp(x) * x), [(7, 6, 5)]),
    # row kernels: passes over each row, one thread a row
    "softmax": (lambda x, b: F.softmax(x + b) * 2.0, [(8, 5), (5,)]),
    "log_softmax of axis 0": (lambda x: F.log_softmax(x, axis=0), [(3, 1200)]),
    "two reductions": (lambda x: F.sum(x * x, axis=1) + F.max(x, axis=1), [(6, 4)]),
}


def test_every_reduction_kernel_compiles_to_ptx(graphs):
    """The reductions above and those of the test graphs (their losses: a row kernel and
    the ReductionKernel of its mean), fused as on the GPU, in float32 and float64."""
    _load_nvrtc()
    fused = {}
    for dtype in (np.float32, np.float64):
        for name, (fn, shapes) in REDUCTIONS.items():
            graph = dezero.trace(fn).lower(*(np.ones(s, dtype) for s in shapes))
            fused[f"{name} {dtype.__name__}"] = _fused_for_the_gpu(graph)
            assert [g.axes is not None for g in fused[f"{name} {dtype.__name__}"].groups] \
                == [True]
    fused.update((name, _fused_for_the_gpu(graph)) for name, graph in graphs.items())
    specs = _renamed_apart(fused, lambda graph: [kernel_spec(g) for g in graph.groups
                                                 if g.axes is not None])
    assert len(specs) >= 2 * len(REDUCTIONS) + 2
    sources = {}  # one program per float type: each kernel typedefs its _type_reduce
    for ctype in ("float", "double"):
        sources[ctype] = cuda_source([s for s in specs if s.outputs[0].ctype == ctype])
        ptx = compile_to_ptx(sources[ctype], f"reductions_{ctype}")
        assert [s.name for s in specs if s.outputs[0].ctype == ctype and
                f".entry {s.name}(" not in ptx] == []
    assert "int cub_off" in sources["float"] and "(-CUDART_INF_F)" in sources["float"] and \
        "(CUDART_INF)" in sources["double"] and "_full0[_k] = " in sources["float"]
    for source in sources.values():  # row kernels, with their kept values and totals
        assert "_keep0[_r] = " in source and "_r__bad[0] = 1" in source and \
            "_total_post(" in source and "= -CUDART_INF" in source
    # of symbolic sizes: row lengths from the sizes' scalar params
    assert "const ptrdiff_t _R = _n_T;" in sources["float"]


@pytest.mark.slow  # about 300 kernels: 3 s of NVRTC
def test_every_elementwise_op_of_the_test_graphs_compiles_alone(graphs):
    _load_nvrtc()
    specs = _renamed_apart(graphs, _ops_alone)
    ptx = compile_to_ptx(cuda_source(specs), "ops_alone")
    assert [s.name for s in specs if f".entry {s.name}(" not in ptx] == []


# =============================================================================
# The backend without a GPU: what it generates, and a CPU graph refused
# =============================================================================


def _chain_graph():
    x, a, b = np.ones((8, 3), np.float32), np.ones(3, np.float32), np.ones((), np.float32)
    return dezero.trace(CHAINS["transcendental"]).lower(x, a, b)


def test_gpu_graphs_compile_to_kernel_lines_with_readable_sources():
    pytest.importorskip("cupy", reason="cupy-cuda12x is not installed")
    unfused = _chain_graph().with_nodes(_chain_graph().nodes)
    unfused.device = "gpu"  # as if traced on cupy arrays: compiled here, never run
    graph = passes.fuse(unfused)
    plan = graph.compile()  # the default backend for a graph on the GPU
    assert "= _k0(x, a, b" in plan.source and "tanh" not in plan.source
    source = plan.kernel_source
    assert source.startswith("// kernel k0: cupy.ElementwiseKernel, shape (8, 3)\n")
    assert "// in_params:  float32 x, float32 a, float32 b" in source and "tanh(" in source


def test_the_cupy_backend_refuses_a_cpu_graph():
    with pytest.raises(ValueError, match=r"graph <lambda> is on the CPU\n  fix: graph.to_gpu"):
        _chain_graph().compile("cupy")
