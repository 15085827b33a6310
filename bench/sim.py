"""Benchmark: physics steps per second and real-time factor of the excavator simulation core.

Cases, all on the same model in this process (one core; run with nothing else busy):
- ``physics``: the machine sweeping between two poses, terrain contact off, the core's normal
  stepping (``sim.step(n)``: the outer loop every 10 ms, ``mj_step(m, d, 10)`` in C between).
- ``physics+state``: as ``physics`` plus the state a node publishes at 100 Hz (joint_state,
  bucket pose and twist) read every 10 ms.
- ``contact``: terrain contact on, the terrain raised so the bucket digs into it during the sweep.
- ``baseline``: the naive way, one Python call per physics step (control update + ``mj_step``
  every 1 ms), same model and motion.
- ``seed-style``: the upstream app's actuation on the same model (bodies, joints, loops, base
  servos): the three cylinders and the swing driven by plain MuJoCo ``velocity`` actuators with
  the upstream gains (KennyVilella/excavator_simulator_mujoco, model/excavator/template/
  excavator.xml: kv 7e5 swing and boom, 1e5 arm and bucket, ctrlrange +-0.5, no force limit),
  MuJoCo's ``Euler`` integrator, 1 ms; the same sweep through a proportional loop on the rod
  positions every 10 ms (``mj_step(m, d, 10)``). Watched for divergence (MuJoCo's bad-qacc
  warning, non-finite or runaway state, loops torn open): the step where it diverged is
  reported instead of a rate.
- ``machine:<preset>`` (``--machines``, issue 28): each machine preset with its drive train
  (``drive_mode`` plant) on the ``contact`` case's terrain and sweep, its drives actuated as a
  PLC does (tracks: sprocket torques; wheels: wheel torques and steering rates), the direction
  reversed with each pose so that it stays on the mound; ``tracked`` is the default machine.
  Each preset's RTF is also given as a ratio to the tracked machine's, measured in the same
  round.
- ``node+contact`` (when rclpy is importable): the real ``SimNode`` in this process at
  ``real_time_factor 0`` publishing joint_states, /clock, bucket pose/twist at 100 Hz and
  markers at 20 Hz, terrain contact on with the same mound, spun for ``--node-seconds`` of wall
  time while alternating the two poses.

Also timed: ``ExcavatorSimulation()`` construction (best of ``--repeat``) and ``SimNode()``
construction (once, the first node of the process).

Usage: ``.venv/bin/python bench/sim.py [--seconds 20] [--repeat 3] [--node-seconds 5]``.
Last line: JSON with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import mujoco
import numpy as np

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.hydraulics import CYLINDER_ACTUATORS, SWING_ACTUATOR, damper_name
from excavator_sim.model_builder import build_spec, finish_model, loop_residuals
from excavator_sim.sim_config import load_sim_config
from excavator_sim.simulation import ExcavatorSimulation, model_options

POSES = ({"swing": 0.6, "boom": 0.7, "arm": -1.6, "bucket": 1.2},
         {"swing": -0.6, "boom": 0.3, "arm": -0.9, "bucket": 2.0})


def run(sim: ExcavatorSimulation, sim_seconds: float, chunk: int, read_state: bool) -> float:
    """Simulate ``sim_seconds``, switching pose every 3 s; returns wall seconds."""
    steps = round(sim_seconds / sim.timestep)
    per_pose = round(3.0 / sim.timestep)
    done = 0
    start = time.perf_counter()
    while done < steps:
        if done % per_pose == 0:
            sim.set_joint_targets(POSES[(done // per_pose) % 2])
        sim.step(chunk)
        done += chunk
        if read_state:
            sim.joint_state()
            sim.bucket_pose()
            sim.bucket_twist()
    return time.perf_counter() - start


def make(contact: bool, machine: str | None = None) -> ExcavatorSimulation:
    overrides: dict[str, object] = {"terrain.contact": contact}
    if machine is not None:
        overrides["drive_mode"] = "plant"
    sim = ExcavatorSimulation(load_sim_config(overrides=overrides, machine=(
        None if machine in (None, TRACKED) else machine)))
    if contact:
        # A mound under the bucket's path: the teeth cut 0.1-0.35 m into it.
        g = sim.terrain.grid
        i0, i1 = round((3.0 - g.x0) / g.cell_size), round((7.5 - g.x0) / g.cell_size)
        j0, j1 = round((-4.0 - g.y0) / g.cell_size), round((4.0 - g.y0) / g.cell_size)
        sim.terrain.set_region(i0, j0, np.full((i1 - i0, j1 - j0), 1.2))
    return sim


TRACKED = "tracked"   # --machines: the default machine, on its tracks
DRIVE_TORQUE_NM = {"tracks": 3000.0, "wheels": 800.0}   # per sprocket / per driven wheel
STEER_RATE_RAD_S = 0.1


def actuate(sim: ExcavatorSimulation, forward: bool) -> None:
    """The PLC's actuation of the machine's drives: forward or back, steering one way or the
    other (wheeled)."""
    from excavator_sim.drivetrain.vehicle import DriveCommand
    from excavator_sim.drivetrain.wheeled import WheeledCommand

    sign = 1.0 if forward else -1.0
    if sim.wheeled is None:
        t = sign * DRIVE_TORQUE_NM["tracks"]
        sim.set_drive_command(DriveCommand(t, t, enable=True, brake=False))
        return
    p = sim.wheeled.params
    sim.set_wheeled_command(WheeledCommand(
        torques_nm=tuple(sign * DRIVE_TORQUE_NM["wheels"] for _ in p.driven),
        steer_rates_rad_s=tuple(sign * STEER_RATE_RAD_S for _ in p.steered),
        enable=True, brake=False))


def run_machine(sim: ExcavatorSimulation, sim_seconds: float) -> float:
    """As :func:`run` (contact, state read every 10 ms) with the drives actuated; wall [s]."""
    steps = round(sim_seconds / sim.timestep)
    per_pose = round(3.0 / sim.timestep)
    chunk = 10
    done = 0
    start = time.perf_counter()
    while done < steps:
        if done % per_pose == 0:
            k = done // per_pose
            sim.set_joint_targets(POSES[k % 2])
            actuate(sim, forward=k % 2 == 0)
        sim.step(chunk)
        done += chunk
        sim.joint_state()
        sim.bucket_pose()
        sim.bucket_twist()
    return time.perf_counter() - start


# Upstream velocity gains [N s/m] (swing [N m s/rad]) and command range [m/s] ([rad/s]).
SEED_KV = {"swing": 7e5, "boom_cylinder": 7e5, "arm_cylinder": 1e5, "bucket_cylinder": 1e5}
SEED_CTRL = 0.5
SEED_GAIN_1_S = 12.0  # the outer loop's proportional gain, as the core's position_gain_1_s
DIVERGED_LOOP_M = 0.05  # a loop torn open this far, or a speed above 100 m/s: diverged


def make_seed_style() -> tuple[mujoco.MjModel, mujoco.MjData, Linkage, dict[str, int]]:
    """The same model with the upstream actuation: plain velocity servos, Euler, 1 ms."""
    config = load_sim_config(overrides={"terrain.contact": False})
    geometry = default_geometry()
    linkage = Linkage(geometry)
    options = model_options(config)
    spec = build_spec(geometry, linkage, options, config.hydraulics.tracks.track_width_m)
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_EULER
    spec.option.timestep = 0.001
    for name in (*CYLINDER_ACTUATORS, SWING_ACTUATOR):
        act = spec.actuator(name)
        act.set_to_velocity(kv=SEED_KV[name])
        act.dyntype = mujoco.mjtDyn.mjDYN_NONE
        act.actlimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = [-SEED_CTRL, SEED_CTRL]
    for name in CYLINDER_ACTUATORS:  # no valve damping, no joint force clamp upstream
        spec.delete(spec.actuator(damper_name(name)))
        spec.joint(name).actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
    built = finish_model(spec, linkage, options)
    model = built.model
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_forward(model, data)
    adr = {n: built.qpos_adr[n] for n in (*CYLINDER_ACTUATORS, SWING_ACTUATOR)}
    adr.update({f"act_{n}": built.actuator_id[n] for n in (*CYLINDER_ACTUATORS, SWING_ACTUATOR)})
    return model, data, linkage, adr


def run_seed_style(sim_seconds: float) -> dict[str, float | int | None]:
    """The sweep on the seed-style model; wall time, or the step at which it diverged."""
    model, data, linkage, adr = make_seed_style()
    chunk = 10
    steps = round(sim_seconds / model.opt.timestep)
    per_pose = round(3.0 / model.opt.timestep)
    axes = (*CYLINDER_ACTUATORS, SWING_ACTUATOR)
    targets: dict[str, float] = {}
    diverged_at: int | None = None
    reason = ""
    worst_loop = 0.0
    done = 0
    start = time.perf_counter()
    settled_error = 0.0  # largest rod error [m] after 3 s at a pose: the sag under gravity
    while done < steps:
        if done % per_pose == 0:
            if targets:
                settled_error = max(settled_error, *(abs(targets[a] - float(data.qpos[adr[a]]))
                                                     for a in CYLINDER_ACTUATORS))
            pose = POSES[(done // per_pose) % 2]
            ext = linkage.extensions(pose["boom"], pose["arm"], pose["bucket"])
            targets = {**dict(zip(CYLINDER_ACTUATORS, (float(e) for e in ext), strict=True)),
                       SWING_ACTUATOR: pose["swing"]}
        qpos = data.qpos
        for axis in axes:
            error = targets[axis] - float(qpos[adr[axis]])
            data.ctrl[adr[f"act_{axis}"]] = min(max(SEED_GAIN_1_S * error, -SEED_CTRL),
                                                SEED_CTRL)
        mujoco.mj_step(model, data, chunk)
        done += chunk
        bad_qacc = int(data.warning[mujoco.mjtWarning.mjWARN_BADQACC].number)
        speed = float(np.max(np.abs(data.qvel)))
        loop = float(loop_residuals(model, data).max())
        if bad_qacc or not math.isfinite(speed) or speed > 100.0 or loop > DIVERGED_LOOP_M:
            diverged_at = done
            reason = (f"MuJoCo bad qacc warning x{bad_qacc}" if bad_qacc else
                      f"max |qvel| {speed:.3g}, loop residual {loop:.3g} m")
            break
        worst_loop = max(worst_loop, loop)
    wall = time.perf_counter() - start
    simulated = done * model.opt.timestep
    return {"steps_per_s": done / wall, "rtf": simulated / wall, "sim_s": simulated,
            "wall_s": wall, "diverged_at_step": diverged_at, "diverged_reason": reason,
            "max_loop_residual_m": worst_loop, "settled_rod_error_m": settled_error}


def run_node(wall_seconds: float) -> dict[str, float] | None:
    """SimNode at real_time_factor 0 with contact on; None without rclpy."""
    try:
        import rclpy

        from excavator_sim.sim_node import SimNode
    except ImportError:
        return None
    rclpy.init(args=["--ros-args", "-p", "real_time_factor:=0.0", "-p", "terrain.contact:=true",
                      "-p", "use_sim_time:=true"])   # /clock published, as in the demo
    t0 = time.perf_counter()
    node = SimNode()  # parameters, model build + compile, URDF, publishers
    construct = time.perf_counter() - t0
    g = node.sim.terrain.grid
    i0, i1 = round((3.0 - g.x0) / g.cell_size), round((7.5 - g.x0) / g.cell_size)
    j0, j1 = round((-4.0 - g.y0) / g.cell_size), round((4.0 - g.y0) / g.cell_size)
    node.sim.terrain.set_region(i0, j0, np.full((i1 - i0, j1 - j0), 1.2))
    t0_sim = node.sim.time
    start = time.perf_counter()
    node.sim.set_joint_targets(POSES[0])
    pose = 1
    while time.perf_counter() - start < wall_seconds:
        if node.sim.time - t0_sim >= 3.0 * pose:
            node.sim.set_joint_targets(POSES[pose % 2])
            pose += 1
        rclpy.spin_once(node, timeout_sec=0.0)
    wall = time.perf_counter() - start
    simulated = node.sim.time - t0_sim
    contacts = int(node.sim.data.ncon)
    node.destroy_node()
    rclpy.try_shutdown()
    return {"steps_per_s": simulated / node.sim.timestep / wall, "rtf": simulated / wall,
            "sim_s": simulated, "wall_s": wall, "contacts_at_end": contacts,
            "construct_s": construct}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated time per case")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--node-seconds", type=float, default=5.0,
                        help="wall time of the node case (0 skips it)")
    parser.add_argument("--machines", default=f"{TRACKED},wheeled_ackermann_11t,wheeled_4ws_11t",
                        help="machine presets of the per-machine case, comma-separated "
                             f"({TRACKED!r}: the default machine; empty: skip the case)")
    args = parser.parse_args()
    machines = [m for m in args.machines.split(",") if m]
    results: dict[str, dict[str, float]] = {}
    # Start-up: ExcavatorSimulation() = model build (MjSpec) + compile + initial state.
    construct = math.inf
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ExcavatorSimulation(load_sim_config())
        construct = min(construct, time.perf_counter() - t0)
    print(f"{'construct':14s} ExcavatorSimulation() {construct * 1e3:.1f} ms")
    cases = (("baseline", False, 1, False), ("physics", False, 10, False),
             ("physics+state", False, 10, True), ("contact", True, 10, True))
    # Best of --repeat fresh runs (the machines are shared, the minimum is the cost), the cases
    # interleaved within each round so that they see the same background load.
    walls = {name: math.inf for name, *_ in cases}
    sims: dict[str, ExcavatorSimulation] = {}
    seed: dict[str, float | int | None] = {}
    for _ in range(args.repeat):
        for name, contact, chunk, read_state in cases:
            seconds = args.seconds if name != "baseline" else min(args.seconds, 10.0)
            sims[name] = make(contact)
            walls[name] = min(walls[name], run(sims[name], seconds, chunk, read_state))
        for machine in machines:
            name = f"machine:{machine}"
            sims[name] = make(True, machine)
            walls[name] = min(walls.get(name, math.inf), run_machine(sims[name], args.seconds))
        if seed.get("diverged_at_step") is None:
            # As long as the physics case (at least one full 3 s pose hold).
            trial = run_seed_style(max(args.seconds, 6.1))
            if (not seed or trial["diverged_at_step"] is not None
                    or trial["wall_s"] < seed["wall_s"]):
                seed = trial
    for name, *_ in cases:
        seconds = args.seconds if name != "baseline" else min(args.seconds, 10.0)
        sim, wall = sims[name], walls[name]
        steps = seconds / sim.timestep
        contacts = int(sim.data.ncon)
        results[name] = {"steps_per_s": steps / wall, "rtf": seconds / wall,
                         "sim_s": seconds, "wall_s": wall, "contacts_at_end": contacts,
                         "max_loop_residual_m": sim.constraint_residual()}
        print(f"{name:14s} {steps / wall:10.0f} steps/s  RTF {seconds / wall:7.1f}  "
              f"({seconds:.0f} s simulated in {wall:.2f} s, {contacts} contacts at the end)")
    for machine in machines:
        name = f"machine:{machine}"
        sim, wall = sims[name], walls[name]
        results[name] = {"steps_per_s": args.seconds / sim.timestep / wall,
                         "rtf": args.seconds / wall, "sim_s": args.seconds, "wall_s": wall,
                         "contacts_at_end": int(sim.data.ncon),
                         "max_loop_residual_m": sim.constraint_residual()}
        print(f"{name:14s} RTF {args.seconds / wall:7.1f}  ({args.seconds:.0f} s simulated in "
              f"{wall:.2f} s, drives actuated, contact on)")
    results["seed-style"] = seed
    if seed["diverged_at_step"] is None:
        print(f"{'seed-style':14s} {seed['steps_per_s']:10.0f} steps/s  RTF {seed['rtf']:7.1f}  "
              f"({seed['sim_s']:.1f} s simulated in {seed['wall_s']:.2f} s; Euler, velocity "
              f"servos; rods sag {seed['settled_rod_error_m'] * 1e3:.1f} mm after 3 s)")
    else:
        print(f"{'seed-style':14s} DIVERGED at step {seed['diverged_at_step']} "
              f"({seed['sim_s']:.3f} s simulated): {seed['diverged_reason']}")
    node = run_node(args.node_seconds) if args.node_seconds > 0 else None
    if node is not None:
        results["node+contact"] = node
        print(f"{'construct':14s} SimNode() {node['construct_s'] * 1e3:.1f} ms (first node of "
              "the process: includes rclpy's one-time costs)")
        print(f"{'node+contact':14s} {node['steps_per_s']:10.0f} steps/s  RTF {node['rtf']:7.1f}  "
              f"({node['sim_s']:.1f} s simulated in {node['wall_s']:.2f} s, "
              f"{node['contacts_at_end']} contacts at the end)")
    base = results["baseline"]["rtf"]
    summary = {
        "timestep_s": 0.001,
        "rtf_physics": round(results["physics"]["rtf"], 1),
        "rtf_physics_state_100hz": round(results["physics+state"]["rtf"], 1),
        "rtf_contact": round(results["contact"]["rtf"], 1),
        "rtf_node_contact_100hz": round(node["rtf"], 1) if node else None,
        "rtf_baseline_step_per_call": round(base, 1),
        "speedup_vs_baseline": round(results["physics"]["rtf"] / base, 2),
        "rtf_baseline_seed_style": (round(seed["rtf"], 1) if seed["diverged_at_step"] is None
                                    else None),
        "seed_style_diverged_at_step": seed["diverged_at_step"],
        "speedup_vs_seed_style": (round(results["physics"]["rtf"] / seed["rtf"], 2)
                                  if seed["diverged_at_step"] is None else None),
        "construct_simulation_s": round(construct, 4),
        "construct_sim_node_s": round(node["construct_s"], 4) if node else None,
        "rtf_machine": {m: round(results[f"machine:{m}"]["rtf"], 1) for m in machines},
        "rtf_machine_vs_tracked": (
            {m: round(results[f"machine:{m}"]["rtf"] / results[f"machine:{TRACKED}"]["rtf"], 2)
             for m in machines} if TRACKED in machines else None),
        "goal_rtf_physics": 50.0,
        "goal_rtf_node_contact": 20.0,
        "cases": results,
    }
    print(f"physics-only RTF {summary['rtf_physics']} vs one-step-per-call baseline {base:.1f}: "
          f"x{summary['speedup_vs_baseline']}; vs seed-style (Euler, velocity servos) "
          + (f"{summary['rtf_baseline_seed_style']}: x{summary['speedup_vs_seed_style']}"
             if seed["diverged_at_step"] is None
             else f"diverged at step {seed['diverged_at_step']}"))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
