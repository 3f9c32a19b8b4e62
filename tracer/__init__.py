"""tracer: `@function` traces eager code into a typed graph IR and runs it compiled.

>>> import eager, tracer
>>> @tracer.function
... def f(x):
...     return x * 2 + 1
>>> f(eager.ones(3))
tensor([3., 3., 3.])
>>> print(f.get_concrete_function(eager.ones(3)).graph)
"""
import warnings as _warnings

from . import logs, settings
from .version import __version__
from .backends import available as available_backends
from .backends import register_backend, run_cond, run_while
from .check import CheckError
from .control import cond, while_loop
from .function import (ConcreteFunction, Function, TensorSpec, function,
                       functions_run_eagerly, run_eagerly)
from .ir import Eqn, Graph, Literal, UpdateKind, Var, verify
from .trace import TracingError

# As eager does (eager/__init__.py): IEEE results (log(0) = -inf, 0/0 = nan, overflow = inf)
# are not warnings, also when numpy computes them for a compiled function (the interpreter,
# control-flow bodies); only numpy's own messages, so tracer's warnings still show.
_warnings.filterwarnings(
    "ignore", message=r"(invalid value|divide by zero|overflow|underflow) encountered",
    category=RuntimeWarning, module=r"tracer(\.|$)")

__all__ = ["function", "Function", "ConcreteFunction", "TensorSpec", "TracingError", "CheckError",
           "cond", "while_loop", "run_eagerly", "functions_run_eagerly", "register_backend",
           "available_backends", "run_cond", "run_while", "Graph", "Eqn", "Var", "Literal",
           "UpdateKind", "verify", "logs", "settings", "__version__"]
