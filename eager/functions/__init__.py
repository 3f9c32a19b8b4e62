"""The front end: PyTorch-style functions over tensors.

Argument handling lives here (Python scalars, type promotion, negative and
tuple dims, -1 in shapes, index keys); every computation goes through
`dispatch.apply` with a registry op.  Tensor methods call these functions.

One module per concern, each with its `__all__`; this package re-exports them all, so
``from eager.functions import x`` and ``functions.x`` reach every one:

* `elementwise`: scalars, constants, type promotion; arithmetic, comparisons, unary math
* `shapes`: dims, reshape and views, permute, expand, cat, stack
* `reductions`: sum, mean, var, amax, argmax, max/min, logsumexp; matmul
* `indexing`: x[key], and the index ops autograd and nn use
* `math_fns`: trigonometry, rounding, remainders, bitwise ops, prod, norms, isclose
* `creation`: tensor, from_numpy, zeros, ones, arange, rand, randn ...
"""
from . import creation, elementwise, indexing, math_fns, reductions, shapes
from .creation import *
from .elementwise import *
from .elementwise import _operands  # noqa: F401  (Tensor &, | promote as the front end does)
from .indexing import *
from .math_fns import *
from .indexing import _is_advanced  # noqa: F401  (Tensor.__setitem__ tells keys apart)
from .reductions import *
from .shapes import *
from .shapes import _norm_dim  # noqa: F401  (Tensor.size, nn.Unflatten check dims so)

#: The modules by concern; eager/__init__.py binds `Tensor` in each.
MODULES = (elementwise, shapes, reductions, indexing, creation, math_fns)

__all__ = [name for module in MODULES for name in module.__all__]

Tensor = None  # bound by eager/__init__.py
