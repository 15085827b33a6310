"""The soil's hot loops, compiled ahead of time where that build exists, else by numba's JIT.

The kernels are written once, as numba functions (:mod:`excavator_sim.soil.terrain_kernels`,
:mod:`excavator_sim.soil.bucket_body_kernels`). ``python -m excavator_sim.soil.kernels_aot``
(run by ``make``) compiles them ahead of time into an extension module next to them
(``_soil_kernels``, numba's ``pycc``) that needs only numpy at run time. A process that loads
the soil then does not load numba and LLVM: about 130 MiB less PSS in sim_node
(``bench/memory_parts.py``, issue 32), and no compilation at start-up.

The extension carries a digest of the kernels' source; one built from another source (a kernel
edited since the build) is not used: the JIT runs the current source, and a warning says how to
rebuild. Without the extension (a colcon build, or no C compiler) the JIT runs, as before.
:data:`COMPILED_AHEAD` says which runs here; ``EXCAVATOR_HIL_SOIL_KERNELS=jit`` in the
environment makes the JIT run them even where the build exists (to compare, or to debug a
kernel).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from excavator_sim.soil.terrain_config import NO_CAP

__all__ = ["COMPILED_AHEAD", "NO_CAP", "column_extents", "dig", "heap_caps", "held_caps",
           "pour", "relax", "settle", "wall_caps"]

# each kernel and the module of its source (what the extension is built from)
KERNELS = {"column_extents": "terrain_kernels", "wall_caps": "terrain_kernels",
           "dig": "terrain_kernels", "relax": "terrain_kernels",
           "held_caps": "bucket_body_kernels", "heap_caps": "bucket_body_kernels",
           "pour": "bucket_body_kernels", "settle": "bucket_body_kernels"}
EXTENSION = "excavator_sim.soil._soil_kernels"
BUILD_COMMAND = "python -m excavator_sim.soil.kernels_aot"
FORCE_JIT_ENV = "EXCAVATOR_HIL_SOIL_KERNELS"   # "jit": numba's JIT even where the build exists

_log = logging.getLogger(__name__)


def source_digest() -> int:
    """The kernels' source as a number (63 bits of its SHA-256, so numba can return it)."""
    sha = hashlib.sha256()
    here = Path(__file__).parent
    for module in sorted(set(KERNELS.values())):
        sha.update((here / f"{module}.py").read_bytes())
    sha.update(str(int(NO_CAP)).encode())   # a global of the kernels, frozen into their code
    return int.from_bytes(sha.digest()[:8], "little") >> 1


def load_compiled(module_name: str = EXTENSION) -> ModuleType | None:
    """The ahead-of-time build if it exists and was built from the current source, else None
    (a warning when it exists but is stale)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    built_from = int(module.kernels_digest())
    if built_from != source_digest():
        _log.warning("the soil's compiled kernels (%s) were built from another source than "
                     "the kernels' present one: running numba's JIT instead (more memory, "
                     "compiles at start); rebuild them with '%s' (or 'make')",
                     module.__file__, BUILD_COMMAND)
        return None
    return module


_compiled = None if os.environ.get(FORCE_JIT_ENV) == "jit" else load_compiled()
COMPILED_AHEAD = _compiled is not None


def _kernel(name: str) -> Any:
    if _compiled is not None:
        return getattr(_compiled, name)
    return getattr(importlib.import_module(f"excavator_sim.soil.{KERNELS[name]}"), name)


column_extents = _kernel("column_extents")
wall_caps = _kernel("wall_caps")
dig = _kernel("dig")
relax = _kernel("relax")
held_caps = _kernel("held_caps")
heap_caps = _kernel("heap_caps")
pour = _kernel("pour")
settle = _kernel("settle")
