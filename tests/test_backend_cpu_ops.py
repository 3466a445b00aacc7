"""Every elementwise op's `cpp` against its `forward`, through the cpu backend: one
kernel per op (codegen.kernel_spec of a one-node group), compiled into one library,
on random inputs and on every pair of edge values (0, -0, negatives, inf, NaN), in
float32 and float64."""
import inspect

import numpy as np
import pytest

import dezero
from dezero.kernels import codegen, cpu
from dezero.op_record import RECORDS
from dezero.static.ir import Group

pytestmark = pytest.mark.skipif(cpu.missing_reason() is not None,
                                reason=str(cpu.missing_reason()))

# Attrs for ops whose constructor takes some; a new op with attrs needs a row.
ATTRS = {"pow": [{"c": 2}, {"c": 3}, {"c": 0.5}, {"c": -1}, {"c": 0}],
         "clip": [{"x_min": -1.0, "x_max": 2.0}, {"x_min": 2.0, "x_max": -1.0}],  # lo > hi: hi
         "in_range": [{"x_min": -1.0, "x_max": 2.0}, {"x_min": 2.0, "x_max": -1.0}],
         "leaky_relu": [{"slope": 0.2}], "leaky_relu_grad": [{"slope": 0.2}]}
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, 100.0, -100.0,
         np.inf, -np.inf, np.nan]


def elementwise_ops():
    for name, record in sorted(RECORDS.items()):
        cls = record.cls
        if not record.elementwise or record.random:
            continue
        wanted = [p for p in list(inspect.signature(cls.__init__).parameters)[1:]
                  if p not in ("args", "kwargs")]
        for attrs in ATTRS.get(name, [{}] if not wanted else []):
            yield pytest.param(cls, attrs, id=f"{name}{attrs or ''}")
        assert not wanted or name in ATTRS, f"add a row for {name} to ATTRS"


CASES = list(elementwise_ops())


def inputs(n_inputs, dtype):
    rng = np.random.default_rng(0)
    grid = np.meshgrid(*[np.array(EDGES)] * n_inputs, indexing="ij")
    edge = [g.ravel() for g in grid]
    random = [rng.standard_normal(64) * 2 for _ in range(n_inputs)]
    return [np.concatenate([e, r]).astype(dtype) for e, r in zip(edge, random)]


def one_node_spec(cls, attrs, arrays, name):
    """The traced op node, and the spec of a group of it alone."""
    with np.errstate(all="ignore"):  # lower() runs the op once on the edge values
        graph = dezero.trace(lambda *xs: cls(**attrs)(*xs)).lower(*arrays)
    node, = graph.of_kind("op")
    unique = list({id(v): v for v in node.inputs}.values())
    group = Group(name, [node], unique, list(node.outputs), node.outputs[0].shape)
    return node, unique, codegen.kernel_spec(group)


@pytest.fixture(scope="module", params=["float32", "float64"])
def compiled(request):
    """dtype, {case id: (node, input values, spec)} and the library of all of them."""
    made = {}
    for k, case in enumerate(CASES):
        cls, attrs = case.values
        n_inputs = len(inspect.signature(cls.forward).parameters) - 1
        arrays = inputs(n_inputs, request.param)
        made[case.id] = (*one_node_spec(cls, attrs, arrays, f"op{k}"), arrays)
    library = cpu.KernelLibrary([spec for _, _, spec, _ in made.values()])
    return request.param, made, library


@pytest.mark.parametrize("case", [c.id for c in CASES])
def test_cpp_equals_forward(compiled, case):
    dtype, made, library = compiled
    node, unique, spec, arrays = made[case]
    by_value = dict(zip((id(v) for v in node.inputs), arrays))
    with np.errstate(all="ignore"):
        want = np.asarray(node.record.function(node.attrs).forward(*arrays))
    got, = library.kernel(spec)(*(by_value[id(v)] for v in unique))
    assert got.dtype == want.dtype
    tolerance = 4e-6 if dtype == "float32" else 1e-13  # vector math: a few ulp
    message = f"{case} ({dtype}), kernel body:\n{spec.body}"
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance, equal_nan=True,
                               err_msg=message)
    infinite = np.isinf(want)  # -inf and inf where forward has them
    np.testing.assert_array_equal(got[infinite], want[infinite], err_msg=message)
