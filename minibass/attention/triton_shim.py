"""Everything minibass uses of Triton beyond its documented language, in one place.

Two things are not public API:

* ``tl.standard._elementwise_max`` and ``tl.standard._sum_combine``: the combine functions
  behind ``tl.max`` / ``tl.sum``. The kernel reduces rows with ``tl.reduce(x, 1, MAX)`` rather
  than ``tl.max(x, 1)`` because ``tl.max`` is a ``@triton.jit`` wrapper that Triton's
  interpreter cannot call unless ``TRITON_INTERPRET=1`` was set before Triton was imported;
  ``tl.reduce`` with these combiners runs in both worlds.
* ``triton.runtime.interpreter.InterpretedFunction``: runs a kernel's Python body with NumPy,
  which is how the ``ragged`` backend serves CPU tensors without ``TRITON_INTERPRET=1``.

Tested with Triton 3.6 and 3.9 (the interpreter on a CPU with both: 3.6 with NumPy 2.3, 3.9
with NumPy 2.4; compiled on a GPU with the versions recorded in ``bench_results/*cuda*.json``
when such runs exist). Another version that moved these symbols fails here, at import, with a
message that says so. Triton 3.6's interpreter turns a loop bound into an int with ``int()`` on
a one-element array, which NumPy 2.4 refuses; ``interpreted`` says so instead of failing deep
inside a kernel.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

TESTED_VERSIONS = ("3.6", "3.9")


class TritonVersionError(ImportError):
    """The installed Triton lacks an internal symbol minibass uses."""


try:
    MAX = tl.standard._elementwise_max  # combine fn: max(a, b)
    SUM = tl.standard._sum_combine  # combine fn: a + b
    from triton.runtime.interpreter import InterpretedFunction
except (AttributeError, ImportError) as error:  # pragma: no cover - depends on the installed Triton
    raise TritonVersionError(
        f"minibass's ragged kernel uses Triton internals (tl.standard._elementwise_max, _sum_combine, "
        f"triton.runtime.interpreter.InterpretedFunction) that Triton {triton.__version__} does not have; "
        f"it was tested with Triton {', '.join(TESTED_VERSIONS)}. Use the 'padded' or 'split' backend, "
        f"or install a tested Triton.") from error


def compiled(kernel):
    """The kernel compiled for the GPU (``triton.jit``)."""
    return triton.jit(kernel)


def _version(text: str) -> tuple[int, int]:
    return tuple(int(part) for part in text.split(".")[:2])


def interpreted(kernel):
    """The kernel run by Triton's interpreter on CPU tensors."""
    if _version(triton.__version__) < (3, 9) and _version(np.__version__) >= (2, 4):
        raise TritonVersionError(
            f"Triton {triton.__version__}'s interpreter cannot run the ragged kernel with NumPy {np.__version__} "
            f"(tested: Triton 3.6 with NumPy 2.3, Triton 3.9 with NumPy 2.4). Install 'numpy<2.4' or "
            f"'triton>=3.9', or use the 'padded' or 'split' backend on a CPU.")
    return InterpretedFunction(kernel)
