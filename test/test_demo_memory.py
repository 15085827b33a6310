"""The demo's memory (issue 32: <= 400 MiB PSS for the whole demo at every moment): what each
process keeps and imports, checked structurally (bench/system.py measures the PSS itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_hil.demo.operator import TerrainPatches

NX, NY = 12, 9


@st.composite
def patch_sequences(draw: st.DrawFn) -> list[tuple[int, int, int, int, np.ndarray]]:
    """The whole grid first (as the soil sends at start), then changed boxes and now and then
    the whole grid again."""
    out = [(0, 0, NX, NY, np.full((NX, NY), 0.5))]
    for _ in range(draw(st.integers(0, 40))):
        if draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()):
            i0, j0, ni, nj = 0, 0, NX, NY
        else:
            i0, j0 = draw(st.integers(0, NX - 1)), draw(st.integers(0, NY - 1))
            ni, nj = draw(st.integers(1, NX - i0)), draw(st.integers(1, NY - j0))
        heights = np.array(draw(st.lists(st.floats(-2.0, 2.0), min_size=ni * nj,
                                         max_size=ni * nj))).reshape(ni, nj)
        out.append((i0, j0, ni, nj, heights))
    return out


def _replay(patches: list[tuple[int, int, np.ndarray]]) -> np.ndarray:
    grid = np.full((NX, NY), np.nan)
    for ni, nj, data in patches:
        i0, j0 = int(data[0]), int(data[1])
        grid[i0:i0 + ni, j0:j0 + nj] = data[2:].reshape(ni, nj)
    return grid


@settings(max_examples=200, deadline=None)
@given(patch_sequences())
def test_the_kept_terrain_patches_replay_to_the_same_terrain_as_all(
        sequence: list[tuple[int, int, int, int, np.ndarray]]) -> None:
    kept = TerrainPatches()
    every = []
    for i0, j0, ni, nj, heights in sequence:
        data = np.concatenate(([i0, j0], heights.ravel()))
        kept.add(ni, nj, data)
        every.append((ni, nj, data))
    np.testing.assert_array_equal(_replay(kept.kept), _replay(every))
    # nothing from before the latest whole grid is kept
    last_full = max(k for k, (_, _, ni, nj, _) in enumerate(sequence) if (ni, nj) == (NX, NY))
    assert len(kept.kept) <= len(sequence) - last_full


def test_a_long_run_keeps_a_bounded_list() -> None:
    """An hour of digging at 100 patches a second with the whole grid twice a second keeps
    at most the patches of half a second."""
    kept = TerrainPatches()
    full = np.concatenate(([0, 0], np.zeros(NX * NY)))
    small = np.concatenate(([3, 4], np.ones(4)))
    for k in range(20_000):
        kept.add(2, 2, small)
        if k % 50 == 0:
            kept.add(NX, NY, full)
    assert len(kept.kept) <= 51


def _imports(module: str) -> set[str]:
    code = (f"import sys, {module}; print(' '.join(m for m in ('numba', 'llvmlite', 'matplotlib'"
            ", 'scipy', 'nicegui') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    return set(out.stdout.split())


def test_a_simulation_without_the_soil_loads_no_numba_nor_plotting() -> None:
    """sim_node (the soil's numba kernels only with soil_in_process) and every user of the
    simulation core (the demo's final rendering) load neither numba (~35-60 MiB a process) nor
    matplotlib."""
    assert _imports("excavator_sim.sim_node") == set()
    assert _imports("excavator_sim.simulation") == set()


def test_the_demos_own_process_loads_no_numba() -> None:
    """The demo's process (the operator) only lays out the ground: reading and stretching the
    soil's grid (``terrain_config``) must not load the soil's numba kernels, which run in
    sim_node (~58 MiB of its PSS when ``drive_path`` imported them through ``terrain``)."""
    code = ("import sys; from excavator_hil.demo.run import DemoStack; "
            "from excavator_hil.demo.options import DemoOptions; "
            "import excavator_hil.demo.operator, excavator_hil.fleet; "
            "from excavator_sim.soil.config import load_soil_config; "
            "from excavator_hil.demo.drive_path import DrivePath; "
            "from excavator_hil.demo.wheeled_path import WheeledPath; "
            "DrivePath().soil_grid(load_soil_config().terrain); "
            "WheeledPath.for_model('ackermann', True).soil_grid(load_soil_config().terrain); "
            "print(' '.join(m for m in ('numba', 'llvmlite') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == [], out.stdout


def test_the_software_renderer_rasterizes_in_one_thread_unless_told_otherwise() -> None:
    """excavator_hil.render: one llvmpipe thread, 32 MiB less at the demo's final picture; a
    value the user set stands."""
    code = "import os, excavator_hil.render; print(os.environ['LP_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "LP_NUM_THREADS"}
    for users, expected in ((None, "0"), ("2", "2")):
        if users is not None:
            env["LP_NUM_THREADS"] = users
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, timeout=120, env=env)
        assert out.stdout.strip() == expected


def test_the_nodes_without_plots_load_no_matplotlib() -> None:
    for module in ("excavator_sim.soil.soil_node", "excavator_kinematics.ik_node",
                   "plc_bridge.bridge.node", "excavator_hil.demo.operator"):
        assert "matplotlib" not in _imports(module), module


def test_teleop_node_loads_scipy_only_for_the_impedance_mode() -> None:
    """scipy.linalg (the impedance model's matrix exponential) is a third of teleop_node's
    start-up: the joystick modes, the demo's and the usual one, start without it."""
    assert "scipy" not in _imports("excavator_kinematics.teleop_node")
