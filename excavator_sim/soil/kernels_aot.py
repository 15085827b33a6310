"""Compile the soil's kernels ahead of time: ``python -m excavator_sim.soil.kernels_aot``.

Builds the extension module ``excavator_sim/soil/_soil_kernels`` (numba's ``pycc``: LLVM
compiles each kernel for the one signature below, a C compiler links the module) from the numba
source of :mod:`excavator_sim.soil.terrain_kernels` and
:mod:`excavator_sim.soil.bucket_body_kernels`, with the digest of that source
(:func:`excavator_sim.soil.kernels.source_digest`) as a function of its own, so that
:mod:`excavator_sim.soil.kernels` takes it only while the source is unchanged. ``make`` runs it
once per checkout (a few seconds to a minute); the module needs only numpy at run time.

numba marks ``pycc`` as pending deprecation (its successor is not released); where it is gone
or no C compiler is found, this command fails, naming why, and the JIT runs, as without it.

Each signature is the one the package calls the kernel with (C-contiguous arrays, int64 cells,
float64 lengths); test_soil_kernels_aot checks them against what the JIT compiles for the
reference scoop, and the two builds' results against each other.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SIGNATURES = {
    "column_extents": "void(f8[:, ::1], i8[:, ::1], i8[::1], i8[:, ::1], f8, f8, f8, i8, i8, "
                      "f8[:, ::1], f8[:, ::1])",
    "wall_caps": "i8(f8[:, ::1], f8[:, ::1], f8, i8[:, ::1])",
    "dig": "UniTuple(i8, 2)(i8[:, ::1], i8, i8, i8[:, ::1], b1, f8, f8, f8, f8)",
    "relax": "i8(i8[:, ::1], i8, i8, i8[:, ::1], i8, i8)",
    "held_caps": "void(f8[::1], f8, f8, f8, f8[::1], f8, i8[:, ::1])",
    "heap_caps": "void(f8[::1], f8, f8, f8, f8, f8, f8[::1], f8, i8[:, ::1])",
    "pour": "i8(i8[:, ::1], f8[::1], f8, f8, f8, f8, f8[::1], i8[:, ::1], i8)",
    "settle": "i8(i8[:, ::1], f8[::1], f8, f8, f8, f8, f8, f8[::1], f8, f8, i8, i8[:, ::1], f8, "
              "f8[::1])",
}

_DIGEST = 0   # set by build() before compiling: numba freezes a global's value into the code


def _kernels_digest() -> int:
    return _DIGEST


def build(output_dir: Path) -> Path:
    """Compile every kernel into ``output_dir``; returns the module's path."""
    global _DIGEST
    import importlib
    import warnings

    from excavator_sim.soil.kernels import EXTENSION, KERNELS, source_digest

    with warnings.catch_warnings():   # pycc's pending deprecation: said in the docstring
        warnings.simplefilter("ignore")
        from numba.pycc import CC

        cc = CC(EXTENSION.rsplit(".", 1)[1])
    cc.output_dir = str(output_dir)
    cc.verbose = False
    if set(SIGNATURES) != set(KERNELS):
        raise SystemExit(f"kernels_aot: SIGNATURES names {sorted(SIGNATURES)}, kernels.KERNELS "
                         f"{sorted(KERNELS)}: give every kernel one signature")
    for name, signature in SIGNATURES.items():
        module = importlib.import_module(f"excavator_sim.soil.{KERNELS[name]}")
        cc.export(name, signature)(getattr(module, name).py_func)
    _DIGEST = source_digest()
    cc.export("kernels_digest", "i8()")(_kernels_digest)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cc.compile()
    built = sorted(output_dir.glob(f"{cc.name}.*"))
    if not built:
        raise SystemExit(f"kernels_aot: numba's pycc wrote no {cc.name}.* into {output_dir}")
    return built[0]


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=here,
                        help=f"where the module goes (default: the package, {here})")
    args = parser.parse_args(argv)
    try:
        path = build(args.output_dir)
    except Exception as exc:  # noqa: BLE001 - one line naming why; the JIT stays the fallback
        print(f"kernels_aot: the soil's kernels were not compiled ahead of time "
              f"({type(exc).__name__}: {exc}); numba's JIT runs them instead (more memory per "
              f"process: docs/soil.md)", file=sys.stderr)
        return 1
    print(f"kernels_aot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
