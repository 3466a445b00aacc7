"""dezero: define-by-run autograd on numpy/cupy, with a trace mode.

The public names are those of the book's DeZero:

    from dezero import Variable
    import dezero.functions as F
    x = Variable(np.array(1.0)); y = F.tanh(x); y.backward()
"""
# The book's steps 23-32 flip this to try the small core in core_simple.py.
is_simple_core = False

if is_simple_core:
    from dezero.core_simple import (  # noqa: F401
        Function,
        Variable,
        as_array,
        as_variable,
        no_grad,
        setup_variable,
        using_config,
    )
else:
    from dezero import (  # noqa: F401
        checkpoints,
        cuda,
        dataloaders,
        datasets,
        downloads,
        functions,
        layers,
        models,
        optimizers,
        schedules,
        transforms,
        utils,
    )
    from dezero.checkpoints import load_checkpoint, save_checkpoint  # noqa: F401
    from dezero.core import (  # noqa: F401
        Config,
        Function,
        Parameter,
        Variable,
        as_array,
        as_variable,
        no_grad,
        setup_variable,
        test_mode,
        using_config,
    )
    from dezero.dataloaders import DataLoader, SeqDataLoader  # noqa: F401
    from dezero.datasets import Dataset  # noqa: F401
    from dezero.layers import Layer  # noqa: F401
    from dezero.models import Model  # noqa: F401

setup_variable()
from dezero.static import TraceError, trace  # noqa: E402,F401
from dezero.static.symbols import (  # noqa: E402,F401
    Builder,
    Script,
    compile,
    placeholder,
)

__version__ = "0.1.0"
