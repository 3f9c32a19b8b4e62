"""eager.linalg: the vector norms of torch.linalg (CPU, numpy-backed)."""
from .functions.math_fns import vector_norm

__all__ = ["norm", "vector_norm"]


def norm(x, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm over vectors: the 2-norm by default (matrix norms are not supported)."""
    return vector_norm(x, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
