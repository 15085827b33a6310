"""Offscreen rendering of the simulated scene to PNG (no display: ``MUJOCO_GL=egl``).

``MUJOCO_GL`` must be set before ``mujoco`` is first imported, so this module sets it (unless the
caller chose a backend already; ``LP_NUM_THREADS`` too, below) and should be imported before
anything else that imports mujoco when used as a script: ``python -m excavator_hil.render
out.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
# Mesa's software renderer (llvmpipe, the GL of a host without a GPU) rasterizes in one thread
# instead of one per CPU: a frame's peak memory 32 MiB lower (247 against 280 MiB of PSS for
# the demo's final 1280 x 720 picture on 2 CPUs, issue 32), at the cost of a slower frame.
os.environ.setdefault("LP_NUM_THREADS", "0")

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np

if TYPE_CHECKING:
    from excavator_sim.simulation import ExcavatorSimulation


def render_rgb(model: mujoco.MjModel, data: mujoco.MjData, width: int = 960, height: int = 540,
               lookat: tuple[float, float, float] = (3.0, 0.0, 1.5), distance: float = 14.0,
               azimuth: float = -120.0, elevation: float = -20.0,
               bucket_soil: np.ndarray | None = None) -> np.ndarray:
    """RGB image ``(height, width, 3)`` uint8 of the scene from a free camera.

    Camera: ``lookat`` [m] in world, ``distance`` [m], ``azimuth`` and ``elevation`` [deg].
    The height field is re-uploaded first, so terrain edits show. ``bucket_soil``: the soil in
    the bucket as columns in world (``excavator_sim.soil.bucket_soil.soil_columns``, or
    ``SoilCoupling.bucket_soil()``), drawn as soil-coloured boxes.
    """
    if width < 16 or height < 16:
        raise ValueError(f"image size {width} x {height} px too small: use at least 16 x 16")
    model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), width)
    model.vis.global_.offheight = max(int(model.vis.global_.offheight), height)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.lookat[:] = lookat
    camera.distance = distance
    camera.azimuth = azimuth
    camera.elevation = elevation
    # Public rendering API (GL context, MjrContext, mjr_render): the height field must be
    # uploaded to the GPU context so terrain edits show.
    gl = mujoco.GLContext(width, height)
    gl.make_current()
    try:
        context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, context)
        for hid in range(model.nhfield):
            mujoco.mjr_uploadHField(model, context, hid)
        scene = mujoco.MjvScene(model, maxgeom=1000)
        mujoco.mjv_updateScene(model, data, mujoco.MjvOption(), None, camera,
                               mujoco.mjtCatBit.mjCAT_ALL, scene)
        if bucket_soil is not None:
            add_columns(scene, bucket_soil)
        viewport = mujoco.MjrRect(0, 0, width, height)
        mujoco.mjr_render(viewport, scene, context)
        rgb = np.empty((height, width, 3), dtype=np.uint8)
        mujoco.mjr_readPixels(rgb, None, viewport, context)
        context.free()
    finally:
        gl.free()
    return np.flipud(rgb).copy()  # OpenGL rows run bottom-up


SOIL_RGBA = (0.45, 0.27, 0.13, 1.0)  # darker than the terrain's colour


def add_columns(scene: mujoco.MjvScene, columns: np.ndarray,
                rgba: tuple[float, float, float, float] = SOIL_RGBA) -> int:
    """Add boxes (rows of centre x, y, z, half sizes, yaw, as ``soil_columns`` gives them) to
    a scene after ``mjv_updateScene``; returns how many fitted in the scene's ``maxgeom``."""
    added = 0
    for c in np.asarray(columns, dtype=float).reshape(-1, 7):
        if scene.ngeom >= scene.maxgeom:
            break
        cy, sy = float(np.cos(c[6])), float(np.sin(c[6]))
        mat = np.array([cy, -sy, 0.0, sy, cy, 0.0, 0.0, 0.0, 1.0])
        mujoco.mjv_initGeom(scene.geoms[scene.ngeom], int(mujoco.mjtGeom.mjGEOM_BOX),
                            c[3:6], c[0:3], mat, np.array(rgba, dtype=np.float32))
        scene.ngeom += 1
        added += 1
    return added


def render_png(sim_or_model: ExcavatorSimulation | mujoco.MjModel, path: str | Path,
               width: int = 960, height: int = 540, data: mujoco.MjData | None = None,
               bucket_soil: np.ndarray | None = None,
               **camera: float | tuple[float, float, float]) -> Path:
    """Render ``sim_or_model`` (a simulation, or a model + ``data``) to a PNG file at ``path``.

    ``camera`` takes ``lookat``, ``distance``, ``azimuth``, ``elevation`` (see
    :func:`render_rgb`); ``bucket_soil`` draws the bucket's soil. Returns the path written.
    """
    if isinstance(sim_or_model, mujoco.MjModel):
        model = sim_or_model
        if data is None:
            data = mujoco.MjData(model)
            if model.nkey:
                mujoco.mj_resetDataKeyframe(model, data, 0)
            mujoco.mj_forward(model, data)
    else:
        model, data = sim_or_model.model, sim_or_model.data
    rgb = render_rgb(model, data, width, height, bucket_soil=bucket_soil,
                     **camera)  # type: ignore[arg-type]
    import matplotlib.image

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    matplotlib.image.imsave(out, rgb)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: render the default excavator (optionally at given joint angles) to a PNG."""
    parser = argparse.ArgumentParser(description="Render the simulated excavator to a PNG.")
    parser.add_argument("output", type=Path, help="PNG file to write")
    parser.add_argument("--width", type=int, default=960)
    parser.add_argument("--height", type=int, default=540)
    parser.add_argument("--azimuth", type=float, default=-120.0, help="[deg]")
    parser.add_argument("--elevation", type=float, default=-20.0, help="[deg]")
    parser.add_argument("--distance", type=float, default=14.0, help="[m]")
    parser.add_argument("--config", type=Path, default=None, help="sim parameter file")
    args = parser.parse_args(argv)
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.simulation import ExcavatorSimulation

    sim = ExcavatorSimulation(load_sim_config(args.config))
    out = render_png(sim, args.output, args.width, args.height, azimuth=args.azimuth,
                     elevation=args.elevation, distance=args.distance)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
