"""Kernel factories for fused replay tests: a numpy reference, whose kernels run
their group's nodes through their forwards as the interpreter would, and the cpu
backend's compiled kernels of several graphs built together."""
import dataclasses
import os
from unittest import mock

from dezero.kernels import cpu, outputs
from dezero.kernels.codegen import kernel_spec
from dezero.op_record import as_result_array
from dezero.static.backends import pycode


def reference_factory(graph, made=None):
    """factory(group) -> kernel for the groups of `graph`; the specs of the groups it
    receives are appended to `made` when given. Every group of the graph is marked compiled, so that
    the replay code calls a kernel for each."""
    groups = {g.name: g for g in graph.groups}
    for group in graph.groups:
        group.compiled = True

    def factory(group):
        assert groups[group.name] is group
        spec = kernel_spec(group)
        # a reduction kernel may read an input twice (per element and per row)
        sources = getattr(spec, "sources", range(len(group.inputs)))
        assert [p.shape for p in spec.inputs] == [group.inputs[i].shape for i in sources]
        assert [p.shape for p in spec.outputs] == [v.shape for v in group.outputs]
        if made is not None:
            made.append(spec)
        functions = [n.record.function(n.attrs) for n in group.nodes]

        def kernel(*arrays, out=None):  # out: written into where given, as the
            # kernel backends do
            out = outputs.writable(out) if out else None
            env = {id(v): a for v, a in zip(group.inputs, arrays, strict=True)}
            for node, f in zip(group.nodes, functions):
                y = f.forward(*(env[id(v)] for v in node.inputs))
                env[id(node.outputs[0])] = as_result_array(y)
            results = tuple(env[id(v)] for v in group.outputs)
            for given, result in zip(out or (), results):
                if given is not None:
                    given[...] = result
            return tuple(r if o is None else o for r, o in
                         zip(results, out or (None,) * len(results)))
        return kernel
    return factory


def split_for_the_cores(specs) -> list:
    """cpu.split's libraries, as many as the machine has cores (of about as many loops
    each), rather than of at most cpu.LOOPS_PER_LIBRARY loops: they compile side by
    side, none after the others."""
    with mock.patch.object(cpu, "LOOPS_PER_LIBRARY", 1):
        loops = len(cpu.split(specs))
    with mock.patch.object(cpu, "LOOPS_PER_LIBRARY", max(1, -(-loops // (os.cpu_count() or 1)))):
        return cpu.split(specs)


def cpu_factories(graphs, chosen=lambda group: group.compiled) -> list:
    """For each graph, factory(group) -> the cpu kernel of the group's spec, the chosen
    groups (by default those that run compiled) of all graphs built as one set of
    libraries, side by side (split_for_the_cores): the cases of a parametrised test
    pay one compile rather than one each. Graph i's kernel k0 is
    g<i>_k0 in the libraries (and so are a horizontal kernel's segments), since every
    graph names its kernels alike."""
    def renamed(spec, i):
        return dataclasses.replace(spec, name=f"g{i}_{spec.name}", segments=tuple(
            renamed(part, i) for part in spec.segments))
    compiled = [{s.name: renamed(s, i) for s in (kernel_spec(g) for g in graph.groups
                                                 if chosen(g))}
                for i, graph in enumerate(graphs)]
    parts = split_for_the_cores([s for specs in compiled for s in specs.values()])
    sources = [cpu.library_source(part) for part in parts]
    libraries = [cpu.KernelLibrary(part, source, path) for part, source, path in
                 zip(parts, sources, cpu.build_libraries(sources) if sources else [])]
    holder = {name: library for library in libraries for name in library.specs}

    def factory(i):
        calls = cpu.numpy_calls(graphs[i])  # what a kernel runs on inputs it cannot take

        def kernel(group):
            spec = renamed(kernel_spec(group), i)
            assert spec == compiled[i][spec.name[len(f"g{i}_"):]]
            return holder[spec.name].kernel(spec, numpy=lambda: calls(group.name))
        return kernel
    return [factory(i) for i in range(len(graphs))]


def cpu_plans(graphs) -> list:
    """Each graph's cpu replay code, its compiled groups calling their kernels, which
    are built for all graphs at once (cpu_factories)."""
    return [pycode.Compiled(graph, factory)
            for graph, factory in zip(graphs, cpu_factories(graphs))]
