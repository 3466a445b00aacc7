"""Helpers shared by the ops and by users: shape utilities, numerical gradients,
gradient checking, gradient clipping (clip_grad_norm) and DOT drawings of the
dynamic graph.

Sits beside core.py: functions.py uses the shape helpers; tests and learners
use gradient_check and plot_dot_graph.

    dezero.utils.plot_dot_graph(y, verbose=False, to_file="y.png")
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np

from dezero import cuda
from dezero.downloads import cache_dir, get_file  # noqa: F401  (the book's dezero.utils names)
from dezero.files import atomic_file

# =============================================================================
# Shapes: sum_to, reshape_sum_backward, max_backward_shape, logsumexp
# =============================================================================


def sum_to(x, shape):
    """Sum the array x down to `shape`, undoing numpy broadcasting."""
    lead = x.ndim - len(shape)
    if lead < 0 or any(n != 1 and n != x.shape[i + lead] for i, n in enumerate(shape)):
        raise ValueError(f"sum_to: cannot sum shape {x.shape} to shape {tuple(shape)}; "
                         f"the target must broadcast to {x.shape} (each of its axes "
                         f"equal to the matching trailing axis, or 1)")
    lead_axes = tuple(range(lead))
    stretched = tuple(i + lead for i, n in enumerate(shape) if n == 1 and x.shape[i + lead] != 1)
    y = x.sum(lead_axes + stretched, keepdims=True)
    if lead > 0:
        y = y.squeeze(lead_axes)
    return y


def reshape_sum_backward(gy, x_shape, axis, keepdims):
    """Reshape the gradient of sum(x, axis) so that it broadcasts against x."""
    ndim = len(x_shape)
    if ndim == 0 or axis is None or keepdims:
        return gy  # already broadcasts against x
    axes = axis if isinstance(axis, tuple) else (axis,)
    shape = list(gy.shape)
    for a in sorted(a % ndim for a in axes):
        shape.insert(a, 1)
    return gy.reshape(tuple(shape))


def max_backward_shape(x, axis):
    """The shape of max(x, axis) with keepdims=True."""
    if axis is None:
        axis = range(x.ndim)
    elif isinstance(axis, int):
        axis = (axis,)
    axis = {a % x.ndim for a in axis}
    return tuple(1 if i in axis else n for i, n in enumerate(x.shape))


def logsumexp(x, axis=1):
    """log(sum(exp(x), axis, keepdims=True)) computed without overflow."""
    xp = cuda.get_array_module(x)
    m = x.max(axis=axis, keepdims=True)
    s = xp.exp(x - m).sum(axis=axis, keepdims=True)
    return xp.log(s) + m


# =============================================================================
# Convolution sizes: get_conv_outsize, get_deconv_outsize, pair
# =============================================================================


def get_conv_outsize(input_size, kernel_size, stride, pad):
    return (input_size + pad * 2 - kernel_size) // stride + 1


def get_deconv_outsize(size, k, s, p):
    return s * (size - 1) + k - 2 * p


def pair(x):
    """An int or a pair of ints as a pair: 3 -> (3, 3)."""
    if isinstance(x, (int, np.integer)):
        return (int(x), int(x))
    if isinstance(x, tuple) and len(x) == 2:
        return x
    raise ValueError(f"expected an int or a pair of ints, got {x!r}")


# =============================================================================
# Gradient checking: numerical_grad, gradient_check, array_equal, array_allclose
# =============================================================================


def numerical_grad(f, x, *args, eps=1e-4, **kwargs):
    """Central-difference gradient of sum(f(x, *args)) with respect to x."""
    from dezero.core import Variable
    x_data = x.data if isinstance(x, Variable) else x
    xp = cuda.get_array_module(x_data)
    x_data = cuda.as_numpy(x_data).copy()
    grad = np.zeros_like(x_data)

    def total(value):
        return float(np.sum(cuda.as_numpy(_output_data(f(_as_input(value, x, xp), *args,
                                                             **kwargs)))))

    it = np.nditer(x_data, flags=["multi_index"], op_flags=["readwrite"])
    while not it.finished:
        i = it.multi_index
        original = x_data[i].copy()
        x_data[i] = original + eps
        up = total(x_data)
        x_data[i] = original - eps
        down = total(x_data)
        x_data[i] = original
        grad[i] = (up - down) / (2 * eps)
        it.iternext()
    return xp.asarray(grad)


def _as_input(value, like, xp):
    from dezero.core import Variable
    value = xp.asarray(value.copy())
    return Variable(value) if isinstance(like, Variable) else value


def _output_data(y):
    from dezero.core import Variable
    return y.data if isinstance(y, Variable) else y


def gradient_check(f, x, *args, rtol=1e-4, atol=1e-5, **kwargs):
    """Compare backprop's gradient of sum(f(x)) with a numerical one (in float64).

    Returns True when they agree; otherwise prints the worst element and returns False.
    """
    from dezero.core import Variable, as_variable
    x = as_variable(x)
    x = Variable(x.data.astype(np.float64))
    num_grad = cuda.as_numpy(numerical_grad(f, x, *args, **kwargs))
    y = f(x, *args, **kwargs)
    y.backward()
    bp_grad = cuda.as_numpy(x.grad.data)
    if bp_grad.shape != num_grad.shape:
        print(f"gradient_check: backprop gradient shape {bp_grad.shape} != "
              f"numerical {num_grad.shape}")
        return False
    ok = array_allclose(num_grad, bp_grad, rtol=rtol, atol=atol)
    if not ok:
        error = np.abs(num_grad - bp_grad) - rtol * np.abs(num_grad)
        worst = np.unravel_index(np.argmax(error), error.shape) if error.ndim else ()
        print(f"gradient_check failed: worst element at {tuple(int(i) for i in worst)}: "
              f"backprop {bp_grad[worst]:.6g}, numerical {num_grad[worst]:.6g} "
              f"(rtol={rtol}, atol={atol})")
    return ok


def array_equal(a, b):
    from dezero.core import Variable
    a = a.data if isinstance(a, Variable) else a
    b = b.data if isinstance(b, Variable) else b
    return bool(np.array_equal(cuda.as_numpy(a), cuda.as_numpy(b)))


def array_allclose(a, b, rtol=1e-4, atol=1e-5):
    from dezero.core import Variable
    a = a.data if isinstance(a, Variable) else a
    b = b.data if isinstance(b, Variable) else b
    return bool(np.allclose(cuda.as_numpy(a), cuda.as_numpy(b), rtol=rtol, atol=atol))


# =============================================================================
# Gradients: clip_grad_norm
# =============================================================================


def clip_grad_norm(params, max_norm, eps=1e-6):
    """Scale the gradients of params together so that their norm, taken as one vector,
    is at most max_norm: grad <- grad * min(1, max_norm / (norm + eps)), as PyTorch's
    torch.nn.utils.clip_grad_norm_. Returns the norm before the scaling (a 0-d Variable).

    params: Parameters (model.params()), a Layer, or one Parameter; those without a
    gradient are left out. The scale is computed with dezero functions, no Python
    branch on the norm, so a traced step computes it afresh at every replay.

    >>> w = dezero.Parameter(np.zeros(2)); w.grad = dezero.Variable(np.array([3.0, 4.0]))
    >>> float(dezero.utils.clip_grad_norm([w], 1.0).data), w.grad.data.round(4).tolist()
    (5.0, [0.6, 0.8])
    """
    import dezero.functions as F
    from dezero.core import Variable, no_grad
    from dezero.layers import Layer
    if isinstance(max_norm, int | float | np.integer | np.floating) and \
            not (np.isfinite(max_norm) and max_norm >= 0):
        raise ValueError(f"clip_grad_norm: max_norm must be a finite number >= 0, "
                         f"got {max_norm}")
    params = params.params() if isinstance(params, Layer) else \
        [params] if isinstance(params, Variable) else params
    params = list(params)
    for param in params:
        if not isinstance(param, Variable):
            raise TypeError(f"clip_grad_norm: params must be Parameters (model.params(), a "
                            f"Layer or one Parameter), got a {type(param).__name__}")
        if param.grad is not None and param.grad.dtype.kind != "f":
            # An integer gradient would take the scale as an integer: 0, in silence.
            raise TypeError(f"clip_grad_norm: the gradient of {param.name or 'a parameter'} "
                            f"is of dtype {param.grad.dtype}; only float gradients scale")
    params = [p for p in params if p.grad is not None]
    if not params:
        return Variable(np.array(0.0, dtype=np.float32))
    with no_grad():
        total = None
        for param in params:
            grad = param.grad
            if grad.dtype == np.float16:  # squares of float16 overflow past 256
                grad = F.astype(grad, np.float32)
            s = F.sum(F.square(grad))
            total = s if total is None else total + s
        norm = F.sqrt(total)
        # min(1, .) without a branch: a traced step cannot branch on a computed value.
        scale = F.clip(max_norm / (norm + eps), 0.0, 1.0)
        for param in params:  # the scale in each gradient's dtype
            param.grad = param.grad * F.astype(scale, param.grad.dtype)
    return norm


# =============================================================================
# Drawing the dynamic graph: get_dot_graph, plot_dot_graph, render_dot, escape_dot
# =============================================================================


def escape_dot(text):
    """text for a double-quoted DOT string: a backslash in a name (C:\\new) would
    otherwise start an escape (\\n a line break), and a quote end the string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_var(v, node_id, verbose):
    label = "" if v.name is None else escape_dot(v.name)
    if verbose and v.data is not None:
        if v.name is not None:
            label += ": "
        label += f"{v.shape} {v.dtype}"
    return f'{node_id} [label="{label}", color=orange, style=filled]\n'


def _dot_func(f, node_id, var_ids):
    text = f'{node_id} [label="{type(f).__name__}", color=lightblue, style=filled, shape=box]\n'
    for x in f.inputs:
        text += f"{var_ids(x)} -> {node_id}\n"
    for y in f.outputs:
        y = y()
        if y is not None:
            text += f"{node_id} -> {var_ids(y)}\n"
    return text


def get_dot_graph(output, verbose=True):
    """DOT text of the graph that produced `output`: Variables as ellipses,
    Functions as boxes. Node names come from visiting order, so the text is
    the same for the same graph."""
    names = {}

    def node_id(obj, prefix):
        key = id(obj)
        if key not in names:
            names[key] = f"{prefix}{len(names)}"
        return names[key]

    def var_id(v):
        return node_id(v, "v")

    text = _dot_var(output, var_id(output), verbose)
    funcs, seen = [], set()

    def add_func(f):
        if f is not None and id(f) not in seen:
            seen.add(id(f))
            funcs.append(f)

    add_func(output.creator)
    drawn_vars = {id(output)}
    while funcs:
        f = funcs.pop()
        text += _dot_func(f, node_id(f, "f"), var_id)
        for x in f.inputs:
            if id(x) not in drawn_vars:
                drawn_vars.add(id(x))
                text += _dot_var(x, var_id(x), verbose)
            add_func(x.creator)
    return "digraph g {\n" + text + "}\n"


class GraphvizNotFoundError(RuntimeError):
    """Raised when a graph must be rendered but no Graphviz `dot` is installed
    (or only `graphviz-pure`, for a format it cannot write)."""


_NO_DOT = (
    "Rendering a graph needs Graphviz's `dot` command, which was not found on PATH "
    "nor beside the Python interpreter. "
    "Install it with your system's package manager (apt-get install graphviz, "
    "brew install graphviz, conda install graphviz) or pip install 'dezero[viz]', "
    "which brings the pip-installable `graphviz-pure`. To get the graph without "
    "rendering, save it with a .dot extension.")

# What graphviz-pure writes (its -T formats that make a picture); PDF and
# PostScript need the system Graphviz.
PURE_FORMATS = ("png", "svg", "jpg", "jpeg", "jpe")


def _interpreter_dirs():
    """Where pip puts the commands of the running Python's packages. A venv's python
    called by its path (as Jupyter kernels are) has them off PATH."""
    return [os.path.dirname(sys.executable), sysconfig.get_path("scripts")]


def find_dot():
    """The path of a dot-compatible renderer, or None: Graphviz's `dot`, else
    `graphviz-pure`, each looked for on PATH and then beside the interpreter."""
    beside = os.pathsep.join(d for d in _interpreter_dirs() if d)
    for name in ("dot", "graphviz-pure"):
        found = shutil.which(name) or shutil.which(name, path=beside)
        if found:
            return found
    return None


class RenderedGraph:
    """A rendered graph file; in a notebook it displays inline."""

    def __init__(self, path):
        self.path = path

    def _repr_png_(self):
        if self.path.endswith(".png"):
            with open(self.path, "rb") as f:
                return f.read()
        return None

    def _repr_svg_(self):
        if self.path.endswith(".svg"):
            with open(self.path, encoding="utf-8") as f:
                return f.read()
        return None

    def __repr__(self):
        return f"RenderedGraph({self.path!r})"


def render_dot(dot_text, to_file):
    """Write DOT text to `to_file`, rendered in the format its extension names
    (png, svg, pdf ...; .dot writes the text itself)."""
    to_file = os.path.abspath(os.path.expanduser(to_file))
    directory = os.path.dirname(to_file)
    os.makedirs(directory, exist_ok=True)
    extension = os.path.splitext(to_file)[1][1:].lower() or "png"
    if extension in ("dot", "gv"):
        with atomic_file(to_file) as f:
            f.write(dot_text.encode("utf-8"))
        return RenderedGraph(to_file)
    dot = find_dot()
    if dot is None:
        raise GraphvizNotFoundError(_NO_DOT)
    if _is_pure(dot) and extension not in PURE_FORMATS:
        raise GraphvizNotFoundError(
            f"Rendering {to_file} as .{extension} needs Graphviz's `dot`; the renderer "
            f"found, {dot}, writes only {', '.join(PURE_FORMATS)}. Install Graphviz "
            f"(apt-get install graphviz, brew install graphviz, conda install graphviz) "
            f"for PDF, or save the graph as .svg or .png.")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "graph.dot")
        with open(source, "w", encoding="utf-8") as f:
            f.write(dot_text)
        rendered = os.path.join(tmp, "graph." + extension)
        result = subprocess.run([dot, source, "-T", extension, "-o", rendered],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{os.path.basename(dot)} failed to render {to_file}: "
                               f"{result.stderr.strip()}")
        with open(rendered, "rb") as source, atomic_file(to_file) as f:
            f.write(source.read())
    return RenderedGraph(to_file)


def _is_pure(dot):
    return os.path.basename(dot).lower().startswith("graphviz-pure")


def plot_dot_graph(output, verbose=True, to_file="graph.png"):
    """Draw the graph that produced `output` into `to_file` (format from its extension)."""
    return render_dot(get_dot_graph(output, verbose), to_file)
