"""Kernel specs: a fused group of elementwise nodes as one C++ body with typed params.

codegen.py sits between the fusion pass and the kernel backends: kernel_spec(group)
turns an ir.Group (made by passes.fuse) into a KernelSpec, whose body is plain C++
for one element built from each op's `cpp` expression. The CPU backend wraps that
body in a loop; the cupy backend hands it to cupy.ElementwiseKernel as is.

    spec = kernel_spec(graph.groups[0]); print(spec.body)
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

import numpy as np

from dezero.errors import GraphError
from dezero.kernels.reductions import reduction_spec
from dezero.static.ir import Group, format_node

# =============================================================================
# The spec: Param, KernelSpec
# =============================================================================

# numpy dtype name -> the C++ type a kernel reads and writes it as.
CTYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long",
          "bool": "bool"}


@dataclass(frozen=True)
class Param:
    """One input or output of a kernel."""

    name: str    # the C identifier the body uses
    ctype: str   # "float", "double" ...
    dtype: str   # the numpy dtype name: "float32", "float64" ...
    shape: tuple  # the Value's shape; inputs broadcast to KernelSpec.shape


@dataclass(frozen=True)
class KernelSpec:
    """An elementwise kernel: typed inputs and outputs and the C++ body that computes
    one element (reads inputs by name, assigns outputs by name)."""

    name: str       # "k0": unique within the graph
    inputs: tuple   # Params, read-only
    outputs: tuple  # Params, all of shape `shape`
    shape: tuple
    body: str
    # A horizontal kernel's segments: KernelSpecs (k4_0, k4_1 ...) whose params are
    # some of this one's, by name; `shape` is then (total elements,), and each output
    # has its segment's shape.
    segments: tuple = ()
    # The names of the symbolic sizes in its shapes (Group.sizes): a replay passes
    # their values, in this order, as an array after the outputs.
    sizes: tuple = ()

    def key(self) -> str:
        """sha256 of everything in the spec: the same graph gives the same key."""
        text = repr((self.name, self.inputs, self.outputs, self.shape, self.body,
                     self.segments, self.sizes))
        return hashlib.sha256(text.encode()).hexdigest()

    def shape_of(self, param: Param) -> tuple:
        """The shape `param` (one of inputs) broadcasts to: the kernel's, or that of the
        first segment reading it."""
        return next((s.shape for s in self.segments if param.name in
                     (p.name for p in s.inputs)), self.shape)


def check_sizes(spec, sizes) -> tuple:
    """`sizes`, the values of a kernel's symbolic sizes (spec.sizes) that a replay
    passes, if they are a tuple of that many ints of 0 or more, else TypeError."""
    if type(sizes) is not tuple or len(sizes) != len(spec.sizes) or not all(
            type(n) is int and n >= 0 for n in sizes):
        raise TypeError(f"kernel {spec.name} takes the values of its sizes "
                        f"({', '.join(spec.sizes) or 'none'}) as sizes=, a tuple of "
                        f"{len(spec.sizes)} ints, got {sizes!r}")
    return sizes


def size_array(spec, sizes: tuple) -> tuple:
    """The arguments a C++ kernel takes after its outputs: (the intp array of its
    sizes' values), or () for a kernel of fixed sizes."""
    return (np.array(sizes, np.intp),) if spec.sizes else ()


def per_sizes(spec, make):
    """make(sizes) for the `sizes` a replay passes, kept for each tuple of values (the
    last 64): `sizes` is checked (check_sizes) when first seen, not on every call."""
    kept = functools.lru_cache(maxsize=64)(lambda sizes: make(check_sizes(spec, sizes)))

    def at(sizes):
        try:
            return kept(sizes)
        except TypeError:  # unhashable (a list): check_sizes says what it takes
            return kept(check_sizes(spec, sizes))
    return at


# =============================================================================
# Names and literals: c_names, c_literal
# =============================================================================

# Words a C++ or CUDA body cannot use as a variable: keywords, CUDA's built-in
# variables, `i` (the index variable of cupy's loop) and the lowercase macros of
# <cmath> and what it includes (errno, math_errhandling, assert). Names all in capitals (two
# or more) are kept clear too: headers spell their macros so (NAN, EOF, M_PI).
RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
    public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq std i threadIdx blockIdx blockDim gridDim warpSize errno math_errhandling
    assert
    """.split())
_MACRO_LIKE = re.compile(r"(?=(?:.*[A-Z]){2})[A-Z][A-Z0-9_]*")  # two capitals or more

_C_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")
# A number in a cpp expression: not part of a name ({x0}) or of another number.
_NUMBER = re.compile(r"(?<![\w.])(\d+\.?\d*(?:[eE][+-]?\d+)?)(?![\w.])")


def c_literal(value, dtype) -> str:
    """A number as a C++ literal of the kernel's float type: '0.5f' for float32,
    '0.5' for float64, negative ones in parentheses."""
    with np.errstate(over="ignore"):
        number = np.dtype(dtype).type(value)
    if not np.isfinite(number):
        raise GraphError(f"{value!r} is no finite {np.dtype(dtype).name} number; a kernel "
                         f"writes only finite literals (passes.fusion_refusal keeps such "
                         f"nodes out of kernels)")
    text = str(number)
    if "." not in text and "e" not in text:
        text += ".0"
    text += "f" if np.dtype(dtype) == np.float32 else ""
    return f"({text})" if text.startswith("-") else text


def c_names(group: Group) -> dict:
    """id(Value) -> its C name, for the inputs, then the outputs, then (as locals) the
    results of every node; outputs get a second name for their local. A Value's name
    where it is a safe C name, else 'v_' + it (a word of RESERVED, a macro-like name,
    a function the body calls) or 'v<k>' (a name C does not accept); '_' is appended
    until each is unique."""
    reserved = RESERVED | {f for n in group.nodes if not n.record.reduce
                           for f in _CALLED.findall(_template(n))}
    used, names = set(), {}

    def fresh(value, k):
        name = value.name if _C_NAME.fullmatch(value.name) else f"v{k}"
        name = f"v_{name}" if name in reserved or _MACRO_LIKE.fullmatch(name) else name
        while name in used:
            name += "_"
        used.add(name)
        return name

    for k, value in enumerate(group.inputs + group.outputs):
        names[id(value)] = fresh(value, k)
    for k, value in enumerate(v for n in group.nodes for v in n.outputs):
        names[("local", id(value))] = fresh(value, k)
    return names


# =============================================================================
# The body: kernel_spec
# =============================================================================


def _template(node) -> str:
    text = node.record.cpp
    if text is None:
        raise GraphError(f"{format_node(node)}: {node.op} has no cpp expression of its own "
                         f"and cannot be part of a kernel")
    return text(**node.attrs) if callable(text) else text


def _expression(node, names: dict) -> str:
    """The node's cpp with its inputs' C names (names: id(Value) -> name), its attrs
    and its numbers as literals."""
    dtype = node.outputs[0].dtype
    text = _NUMBER.sub(lambda m: c_literal(float(m.group(1)), dtype), _template(node))
    fields = {k: c_literal(v, dtype) for k, v in node.attrs.items()}
    fields.update(zip(node.record.params, (names[id(v)] for v in node.inputs)))
    try:
        return text.format(**fields)
    except (KeyError, IndexError) as e:
        raise GraphError(f"{format_node(node)}: cpp of {node.op} names {e}, which is neither "
                         f"a parameter of its forward nor an attr") from None


def kernel_spec(group: Group):
    """The KernelSpec of a group: one `const <type> name = <cpp>;` per node, then one
    assignment per output. Deterministic: the same group gives the same bytes. Made
    once and kept on the group, where the replay code and the kernel library find it.
    A group with reductions gets a reductions.ReductionSpec."""
    if group.spec is None and group.axes is not None:
        ctype = CTYPES[group.nodes[0].outputs[0].dtype.name]
        group.spec = reduction_spec(
            group, c_names(group), lambda node, reads: typed_expression(node, reads, ctype),
            lambda v, name: Param(name, CTYPES[v.dtype.name], v.dtype.name, tuple(v.shape)))
    if group.spec is None:
        group.spec = _make_spec(group)
    return group.spec


def _make_spec(group: Group, names: dict | None = None) -> KernelSpec:
    names = names or c_names(group)
    if group.segments:  # one body per segment, with names unique across all of them
        segments = tuple(_make_spec(s, names) for s in group.segments)
        return KernelSpec(group.name, params(group.inputs, names),
                          params(group.outputs, names), tuple(group.shape),
                          f"// kernel {group.name}: horizontal over "
                          f"{', '.join(s.name for s in segments)}\n", segments)
    dtype = group.nodes[0].outputs[0].dtype
    ctype = CTYPES[dtype.name]
    lines = [f"// kernel {group.name}: " + ", ".join(n.op for n in group.nodes)]
    reads = {id(v): names[id(v)] for v in group.inputs}
    for node in group.nodes:
        value = node.outputs[0]
        missing = [v.name for v in node.inputs if id(v) not in reads]
        if missing:
            raise GraphError(f"{format_node(node)}: kernel {group.name} neither reads "
                             f"{', '.join(missing)} nor makes it before this node")
        expression = typed_expression(node, reads, ctype)
        local = names[("local", id(value))]
        lines.append(f"const {ctype} {local} = {expression};")
        reads[id(value)] = local
    lines += [f"{names[id(v)]} = {names[('local', id(v))]};" for v in group.outputs]
    return KernelSpec(group.name, params(group.inputs, names), params(group.outputs, names),
                      tuple(group.shape), "\n".join(lines) + "\n", sizes=group.sizes)


def typed_expression(node, reads: dict, ctype: str) -> str:
    """The node's expression (see _expression), cast to the kernel's type where the
    op yields another (a comparison's bool)."""
    expression = _expression(node, reads)
    cpp_type = node.record.cpp_type
    return f"({ctype})({expression})" if cpp_type is not None and cpp_type != ctype \
        else expression


def params(values, names) -> tuple:
    return tuple(Param(names[id(v)], CTYPES[v.dtype.name], v.dtype.name, tuple(v.shape))
                 for v in values)
