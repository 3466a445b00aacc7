"""A numpy reference kernel factory for fused replay tests: each kernel runs its
group's nodes through their forwards, as the interpreter would."""
from dezero.op_record import as_result_array


def reference_factory(graph, made=None):
    """factory(spec) -> kernel for the groups of `graph`; the specs it receives are
    appended to `made` when given. Every group of the graph is marked compiled, so that
    the replay code calls a kernel for each."""
    groups = {g.name: g for g in graph.groups}
    for group in graph.groups:
        group.compiled = True

    def factory(spec):
        group = groups[spec.name]
        # a reduction kernel may read an input twice (per element and per row)
        sources = getattr(spec, "sources", range(len(group.inputs)))
        assert [p.shape for p in spec.inputs] == [group.inputs[i].shape for i in sources]
        assert [p.shape for p in spec.outputs] == [v.shape for v in group.outputs]
        if made is not None:
            made.append(spec)
        functions = [n.record.function(n.attrs) for n in group.nodes]

        def kernel(*arrays, out=None):  # out: written into where given, as the
            # kernel backends do
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
