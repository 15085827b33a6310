"""The soil's kernels compiled ahead of time (excavator_sim.soil.kernels_aot, built by ``make``)
against the same kernels under numba's JIT: the same signatures, the same terrain and bucket
soil to the unit, a stale build refused, and a process that runs the soil without numba.

The project's set-up builds the extension; without it these tests fail naming the command."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from excavator_sim.soil import (
    bucket_body,
    bucket_body_kernels,
    kernels,
    kernels_aot,
    terrain_kernels,
)
from excavator_sim.soil.bucket_prism import BucketPose
from excavator_sim.soil.scenarios import REFERENCE_BUCKET, REFERENCE_GRID, reference_scoop_poses
from excavator_sim.soil.terrain import Terrain

REPO = Path(__file__).resolve().parents[1]
NOT_BUILT = ("the soil's kernels are not compiled ahead of time here: run 'make' (or "
             "'.venv/bin/python -m excavator_sim.soil.kernels_aot')")


def _jit_kernel(name: str):
    """The numba JIT dispatcher of kernel ``name`` (its source module)."""
    source = {"terrain_kernels": terrain_kernels, "bucket_body_kernels": bucket_body_kernels}
    return getattr(source[kernels.KERNELS[name]], name)


def _use_jit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the package call the numba JIT kernels, as it does without the extension."""
    for name in kernels.KERNELS:
        jit = _jit_kernel(name)
        monkeypatch.setattr(kernels, name, jit)
        if hasattr(bucket_body, name):
            monkeypatch.setattr(bucket_body, name, jit)


def _scoop(poses: list[BucketPose]) -> tuple[np.ndarray, int, int]:
    """The reference scoop: the grid (int64 z cells), the
    units in the bucket, and the total (terrain + bucket), which never changes."""
    terrain = Terrain(REFERENCE_GRID, REFERENCE_BUCKET)
    for pose in poses:
        terrain.update(pose)
    return terrain.h.copy(), int(terrain.load_units), int(terrain.total_units)


POSES = reference_scoop_poses(300)


def test_the_extension_is_built_and_taken() -> None:
    assert kernels.COMPILED_AHEAD, NOT_BUILT
    assert kernels.dig is not terrain_kernels.dig


def test_the_signatures_are_the_ones_the_package_calls_with(monkeypatch) -> None:
    from numba.core import sigutils

    _use_jit(monkeypatch)
    _scoop(POSES)
    for name in kernels.KERNELS:
        jit = _jit_kernel(name)
        args, ret = sigutils.normalize_signature(kernels_aot.SIGNATURES[name])
        called = [tuple(s.args) for s in jit.nopython_signatures]
        assert tuple(args) in called, (name, called)
        assert all(s.return_type == ret for s in jit.nopython_signatures
                   if tuple(s.args) == tuple(args)), name


def test_compiled_and_jit_kernels_dig_the_same_soil(monkeypatch) -> None:
    assert kernels.COMPILED_AHEAD, NOT_BUILT
    h_aot, bucket_aot, total_aot = _scoop(POSES)
    _use_jit(monkeypatch)
    h_jit, bucket_jit, total_jit = _scoop(POSES)
    assert bucket_aot > 0, "the scoop took no soil: the comparison would be empty"
    assert (h_aot != h_jit).sum() == 0
    assert (bucket_aot, total_aot) == (bucket_jit, total_jit)


def test_a_build_from_another_source_is_refused_with_the_command(monkeypatch, caplog) -> None:
    stale = types.ModuleType("stale_kernels")
    stale.kernels_digest = lambda: kernels.source_digest() ^ 1   # type: ignore[attr-defined]
    stale.__file__ = "/somewhere/stale_kernels.so"
    monkeypatch.setitem(sys.modules, "stale_kernels", stale)
    with caplog.at_level(logging.WARNING, logger=kernels.__name__):
        assert kernels.load_compiled("stale_kernels") is None
    assert "python -m excavator_sim.soil.kernels_aot" in caplog.text
    assert "/somewhere/stale_kernels.so" in caplog.text
    current = types.ModuleType("current_kernels")
    current.kernels_digest = kernels.source_digest   # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "current_kernels", current)
    assert kernels.load_compiled("current_kernels") is current
    assert kernels.load_compiled("no_such_kernels_module") is None


def test_the_built_module_carries_the_present_sources_digest() -> None:
    assert kernels.COMPILED_AHEAD, NOT_BUILT
    from excavator_sim.soil import _soil_kernels  # type: ignore[attr-defined]

    assert _soil_kernels.kernels_digest() == kernels.source_digest()


def test_the_soil_runs_without_numba_when_compiled_ahead() -> None:
    """What the extension is for (issue 32): sim_node's soil without numba and LLVM."""
    code = ("import sys\n"
            "from excavator_sim.soil.scenarios import REFERENCE_BUCKET, REFERENCE_GRID, "
            "reference_scoop_poses\n"
            "from excavator_sim.soil.terrain import Terrain\n"
            "t = Terrain(REFERENCE_GRID, REFERENCE_BUCKET)\n"
            "for p in reference_scoop_poses(100):\n"
            "    t.update(p)\n"
            "print(' '.join(m for m in ('numba', 'llvmlite') if m in sys.modules) or 'none')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["none"], NOT_BUILT if not kernels.COMPILED_AHEAD else done


def test_the_environment_can_ask_for_the_jit() -> None:
    code = "from excavator_sim.soil import kernels; print(kernels.COMPILED_AHEAD)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, kernels.FORCE_JIT_ENV: "jit"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
