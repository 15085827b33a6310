"""What each part of a process costs in memory (issue 32): PSS of one fresh process per case.

The demo's processes are Python processes made of the same few parts; this bench prices each
part on its own, so a change to the stack's memory starts from where the memory is. Each case
runs in a fresh interpreter and reports its PSS (``/proc/self/smaps_rollup``) after each step;
the baseline is the same interpreter with nothing imported, in the same run:

- ``numpy``: ``import numpy`` (every process of the stack has it);
- ``rclpy_node``: rclpy imported, initialised, one node with one publisher (one DDS
  participant: what each process with rclpy pays before it does anything);
- ``numba_soil``: ``import numba``, then the soil imported and the terrain updated along the
  reference scoop with the kernels under numba's JIT (``EXCAVATOR_HIL_SOIL_KERNELS=jit``; loaded
  from numba's disk cache after the first run): what sim_node paid for the soil in its process
  before the kernels were compiled ahead of time;
- ``compiled_soil``: the same with the kernels compiled ahead of time (``make``; the case
  fails where that build is missing): what it pays now;
- ``mujoco_model``: mujoco and the simulation's model with the demo's 35 m x 16 m terrain;
- ``final_picture``: the demo's final picture (``excavator_hil.render``, 1280 x 720, its 2048 px
  shadow map) of that model: the peak while it renders (sampled every 5 ms), what stays after
  it, and what stays once the freed heap is returned (``release_free_pages``).

PSS splits a library's pages among the processes mapping them, so a process alone (as here)
pays each library in full: in the demo the shared part of a library is split, its private part
(heap, relocations, touched code that no other process maps, such as LLVM's for numba) is not.
PSS does not depend on the host's speed or load.

Run: ``.venv/bin/python bench/memory_parts.py``. The last stdout line is JSON: per case, each
step's PSS [MiB] and its increase over the step before; ``ratio_to_baseline``: each case's highest
PSS over the bare interpreter's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PRELUDE = textwrap.dedent("""
    import json, os, sys, threading, time

    def pss_mib():
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    STEPS = []

    def step(name):
        STEPS.append((name, pss_mib()))

    step("interpreter")
""")

# the soil along the reference scoop (the kernels load at the first update)
SCOOP = textwrap.dedent("""
        from excavator_sim.soil.scenarios import (REFERENCE_BUCKET, REFERENCE_GRID,
                                                  reference_scoop_poses)
        from excavator_sim.soil.terrain import Terrain
        step('soil kernels imported')
        terrain = Terrain(REFERENCE_GRID, REFERENCE_BUCKET)
        for pose in reference_scoop_poses(200):
            terrain.update(pose)
        step('terrain updated (kernels loaded)')
""")

CASES: dict[str, str] = {
    "baseline": "",
    "numpy": "import numpy\nstep('numpy imported')\n",
    "rclpy_node": textwrap.dedent("""
        import numpy
        step('numpy imported')
        import rclpy
        from std_msgs.msg import String
        step('rclpy imported')
        rclpy.init()
        node = rclpy.create_node('memory_parts')
        node.create_publisher(String, 'memory_parts', 10)
        time.sleep(0.5)
        step('one node (a DDS participant)')
        node.destroy_node()
        rclpy.shutdown()
    """),
    "numba_soil": textwrap.dedent("""
        import numpy
        step('numpy imported')
        import numba
        step('numba imported')
    """) + SCOOP,
    "compiled_soil": textwrap.dedent("""
        import numpy
        step('numpy imported')
        from excavator_sim.soil import kernels
        if not kernels.COMPILED_AHEAD:
            raise SystemExit("the soil's kernels are not compiled ahead of time: run make")
    """) + SCOOP + "assert 'numba' not in sys.modules\n",
    "mujoco_model": textwrap.dedent("""
        import excavator_hil.render
        step('mujoco imported')
        from excavator_sim.sim_config import load_sim_config
        from excavator_sim.simulation import ExcavatorSimulation
        sim = ExcavatorSimulation(load_sim_config(overrides=TERRAIN))
        step('model with the demo terrain')
    """),
    "final_picture": textwrap.dedent("""
        import excavator_hil.render as render
        from excavator_common.heap import release_free_pages
        from excavator_sim.sim_config import load_sim_config
        from excavator_sim.simulation import ExcavatorSimulation
        sim = ExcavatorSimulation(load_sim_config(overrides=TERRAIN))
        sim.model.vis.quality.shadowsize = 2048   # the demo's (operator.RENDER_SHADOW_SIZE)
        step('model with the demo terrain')
        peak = [0.0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], pss_mib())
                time.sleep(0.005)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        render.render_png(sim, sys.argv[1], width=1280, height=720)
        done.set()
        sampler.join()
        STEPS.append(('picture: peak while rendering', peak[0]))
        step('picture: after it')
        release_free_pages()
        step('picture: freed heap returned')
    """),
}

# the demo's terrain (excavator_hil.demo.drive_path: 35 m x 16 m at 0.05 m)
TERRAIN = {"terrain.nx": 700, "terrain.ny": 320, "terrain.cell_size_m": 0.05}


def run_case(name: str, body: str, out_png: Path) -> list[tuple[str, float]]:
    code = (PRELUDE + f"TERRAIN = {TERRAIN!r}\n" + body
            + "\nprint(json.dumps(STEPS))\nsys.stdout.flush()\nos._exit(0)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if name == "numba_soil":
        env["EXCAVATOR_HIL_SOIL_KERNELS"] = "jit"
    done = subprocess.run([sys.executable, "-c", code, str(out_png)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"case {name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return [(str(s), float(v)) for s, v in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> None:
    import tempfile

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in CASES.items():
            steps = run_case(name, body, Path(tmp) / "picture.png")
            results[name] = [{"step": s, "pss_mib": round(v, 1),
                              "delta_mib": round(v - (steps[i - 1][1] if i else 0.0), 1)}
                             for i, (s, v) in enumerate(steps)]
    base = results["baseline"][-1]["pss_mib"]
    print(f"{'case':14s} {'step':36s} {'PSS [MiB]':>10s} {'+ [MiB]':>8s}")
    for name, steps in results.items():
        for s in steps:
            print(f"{name:14s} {s['step']:36s} {s['pss_mib']:10.1f} {s['delta_mib']:8.1f}")
    ratios = {name: round(max(s["pss_mib"] for s in steps) / base, 2)
              for name, steps in results.items()}
    print(json.dumps({"bench": "memory_parts", "baseline_pss_mib": base, "cases": results,
                      "ratio_to_baseline": ratios}))


if __name__ == "__main__":
    main()
