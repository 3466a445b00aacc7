"""Backends run a StaticGraph: the reference interpreter and the generated replay code.

backends/ is the last stage of the pipeline (tracer -> ir -> passes -> backends).
interpreter.py walks the nodes one by one and checks every type; pycode.py turns the
node list into Python source that calls each op's forward on arrays directly.

    graph.compile().source   # the replay code; graph.interpret(x) for the reference
"""
