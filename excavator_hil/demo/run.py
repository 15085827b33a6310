"""``excavator-hil demo``: a headless dig cycle, every part in its own process over real DDS.

What runs (all on 127.0.0.1, nothing installed beyond the venv):
- a throwaway ``redis-server`` (the operational layer's key store),
- ``virtual_plc`` (a real S7 server with the track drives as its plant),
- ``plc_bridge`` (Redis <-> S7 through the skid-steer model; publishes ``plc/wheel_states``),
- ``sim_node`` (MuJoCo; its tracks follow the PLC's measured track speeds, remapped from
  ``plc/wheel_states``), ``soil_node``, ``ik_node``,
- ``excavator-hil bag record`` (an MCAP bag of the run),
- this process: the operator. It drives the tracks through Redis (with the ARTOF heartbeat),
  then walks the bucket tip through the dig cycle by publishing ``target_pose`` (IK targets)
  paced by the simulation's ``/clock`` (sim_node runs with ``use_sim_time:=true``, which makes
  it publish ``/clock``), shows a progress bar, and writes the summary, a rendered PNG and the
  force plot next to the bag.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.summary import DemoSummary
from excavator_hil.local_services import LocalRedisServer, ManagedProcess, free_port, wait_for

RECORDED_TOPICS = ("joint_states", "joint_command", "target_pose", "bucket_pose", "soil/wrench",
                   "soil/bucket_load", "plc/wheel_states", "odom")


def _ros_environment() -> None:
    """Keep DDS on loopback and off the user's default domain unless they chose otherwise."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    os.environ.setdefault("MUJOCO_GL", "egl")


def process_layout(options: DemoOptions) -> dict[str, list[str]]:
    """The command prefix of each group of processes (the HIL host set-up of
    docs/plc_bridge.md): ``bridge`` (virtual PLC, plc_bridge), ``redis``, ``sim`` (sim_node,
    soil_node, ik_node, teleop_node) and ``background`` (the recorder; the operator, this
    process, lowers its own priority in :func:`run_demo`).

    - ``background_nice`` > 0: the background runs under ``nice -n``: CFS gives the real-time
      paths the CPU first when both wake (the recorder and the operator are not on them);
    - ``rt_priority`` > 0: redis-server under ``chrt -f`` too (the bridge loop and the virtual
      PLC set SCHED_FIFO themselves), as the Redis -> PLC path wakes it twice a command;
    - ``pin_cpus`` on a host with >= 2 CPUs: the bridge, the virtual PLC and redis-server on the
      last CPU, the simulation processes on the others (the background is not pinned).
    """
    layout: dict[str, list[str]] = {"bridge": [], "redis": [], "sim": [], "background": []}
    if options.rt_priority > 0 and shutil.which("chrt"):
        layout["redis"] += ["chrt", "-f", str(options.rt_priority)]
    cpus = sorted(os.sched_getaffinity(0))
    if options.pin_cpus and len(cpus) >= 2 and shutil.which("taskset"):
        rt_cpu, others = str(cpus[-1]), ",".join(str(c) for c in cpus[:-1])
        layout["bridge"] += ["taskset", "-c", rt_cpu]
        layout["redis"] = ["taskset", "-c", rt_cpu, *layout["redis"]]
        layout["sim"] += ["taskset", "-c", others]
    if options.background_nice > 0 and shutil.which("nice"):
        layout["background"] += ["nice", "-n", str(options.background_nice)]
    return layout


class DemoStack:
    """Starts every process of the demo; stops them all (reverse order) on exit."""

    def __init__(self, options: DemoOptions):
        self.options = options
        self.logs = options.output_dir / "logs"
        self.redis = LocalRedisServer(self.logs / "redis")
        self.plc_port = free_port()
        self.plc_control_port = free_port()
        self.procs: dict[str, ManagedProcess] = {}

    def _start(self, name: str, module: str, args: list[str],
               prefix: Sequence[str] = ()) -> ManagedProcess:
        proc = ManagedProcess(module, args, log_dir=self.logs, prefix=prefix)
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        layout = process_layout(self.options)
        self.redis.prefix = layout["redis"]
        self.redis.start()
        ros = ["--ros-args", "--log-level", "warn"]
        self._start("virtual_plc", "plc_bridge.virtual_plc_cli",
                    ["--port", str(self.plc_port), "--control-port", str(self.plc_control_port),
                     "--model", "skid_steer",
                     "--rt-priority", str(self.options.rt_priority)], layout["bridge"])
        self._start("plc_bridge", "plc_bridge.bridge_node",
                    [*ros, "-p", f"redis_url:={self.redis.url}", "-p", "plc_host:=127.0.0.1",
                     "-p", f"plc_port:={self.plc_port}", "-p", "model:=skid_steer",
                     "-p", "autostart:=true",
                     "-p", f"rt_priority:={self.options.rt_priority}"], layout["bridge"])
        self._start("sim_node", "excavator_sim.sim_node",
                    # The soil model is the ground while digging (stiffness, shear failure,
                    # load); rigid height-field contact would hold the bucket on the surface.
                    # use_sim_time: sim_node publishes /clock only then, and the operator paces
                    # the dig cycle by it.
                    [*ros, "-p", "real_time_factor:=1.0", "-p", "terrain.contact:=false",
                     "-p", "use_sim_time:=true",
                     "-p", f"soil_in_process:={str(self.options.soil_in_process).lower()}",
                     "-r", "track_command:=plc/wheel_states"], layout["sim"])
        if not self.options.soil_in_process:
            self._start("soil_node", "excavator_sim.soil.soil_node", ros, layout["sim"])
        self._start("ik_node", "excavator_kinematics.ik_node", ros, layout["sim"])
        if self.options.joystick:  # Joy from the operator (a scripted session)
            self._start("teleop_node", "excavator_kinematics.teleop_node",
                        [*ros, "-p", "joy_timeout:=2.0"], layout["sim"])
        bag = self.options.output_dir / "dig_bag"
        if bag.exists():
            import shutil

            shutil.rmtree(bag)
        self._start("bag_record", "excavator_hil.cli",
                    # sim time: the bag's timestamps and /clock on replay share the header
                    # stamps' time base
                    ["bag", "record", *RECORDED_TOPICS, "-o", str(bag), "--use-sim-time"],
                    layout["background"])

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if not proc.alive():
                tail = "\n".join(proc.log().splitlines()[-15:])
                raise RuntimeError(f"{name} exited with code {proc.proc.returncode}; last log "
                                   f"lines ({proc.log_path}):\n{tail}")

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            self.procs[name].stop(timeout=15.0)
        self.redis.stop()


def run_demo(options: DemoOptions, own_process: bool = False) -> DemoSummary:
    """Run the whole demo; returns the summary (also written to ``summary.json``).
    ``own_process`` (the CLI): this process is the operator and nothing else, so it may lower
    its own priority (``background_nice``) and freeze its garbage collector; a caller that
    goes on afterwards (a test) keeps its priority and collector."""
    _ros_environment()
    import rclpy

    from excavator_common import realtime, stall_probe

    stall_probe.start_from_environment("demo_operator")

    from excavator_hil.demo.operator import DemoOperator

    options.output_dir.mkdir(parents=True, exist_ok=True)
    stack = DemoStack(options)
    summary = DemoSummary()
    wall0 = time.monotonic()
    rclpy.init()
    operator: DemoOperator | None = None
    try:
        stack.start()
        # The operator (this process) is off the real-time paths (its targets follow the
        # simulation's /clock; a heartbeat it misses by 0.75 s stops the tracks, fail-safe):
        # lower its priority after the children are started (they would inherit it), before
        # its threads start (Linux nice is per thread, inherited by threads created later).
        # Not with --joystick: the scripted Joy stream stands for an operator's hands, and
        # teleop_node stops the machine when it pauses for joy_timeout.
        if own_process and not options.joystick:
            realtime.lower_priority(options.background_nice)
        if options.joystick:
            from excavator_hil.demo.joystick_operator import JoystickDemoOperator

            operator = JoystickDemoOperator(stack.redis.url, stack.plc_control_port, options)
        else:
            operator = DemoOperator(stack.redis.url, stack.plc_control_port, options)
        executor = rclpy.executors.SingleThreadedExecutor()
        executor.add_node(operator)
        spin = threading.Thread(target=_spin_until_shutdown, args=(executor,), daemon=True)
        spin.start()
        print(f"demo: output in {options.output_dir}/ (process logs in {stack.logs}/)")
        def up() -> bool:
            stack.check_alive()   # a process that died fails the start-up at once
            return operator.ready()
        wait_for(up, options.startup_timeout_s,
                 lambda: f"the stack to come up ({operator.waiting_for()})", period=0.1)
        if own_process:
            realtime.quiet_gc()   # start-up objects frozen: no full collection over them mid-run
        run_wall0, run_sim0 = time.monotonic(), operator.sim_time
        operator.run(stack.check_alive)
        summary = operator.summary()
        summary.real_time_factor = (operator.sim_time - run_sim0) / (time.monotonic() - run_wall0)
    finally:
        if operator is not None:
            operator.close()
        stack.stop()
        rclpy.try_shutdown()
    summary.wall_time_s = time.monotonic() - wall0
    _write_outputs(options, summary, operator)
    return summary


def _spin_until_shutdown(executor: Any) -> None:
    from rclpy.executors import ExternalShutdownException

    with contextlib.suppress(ExternalShutdownException):  # rclpy.shutdown() ends the demo
        executor.spin()


def _write_outputs(options: DemoOptions, summary: DemoSummary, operator: Any) -> None:
    out = options.output_dir
    summary.outputs["bag"] = str(out / "dig_bag")
    if operator is not None:
        plot = out / "soil_forces.png"
        operator.plot_forces(plot)
        summary.outputs["force plot"] = str(plot)
        png = out / "final_pose.png"
        try:
            operator.render_final(png)
            summary.outputs["rendered scene"] = str(png)
        except Exception as exc:  # noqa: BLE001 - a missing GL must not lose the run's results
            print(f"demo: rendering skipped ({type(exc).__name__}: {exc})")
    data = asdict(summary)
    (out / "summary.json").write_text(json.dumps(data, indent=2, default=float))
    summary.outputs["summary"] = str(out / "summary.json")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="excavator-hil demo", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("output"), help="output folder")
    parser.add_argument("--quick", action="store_true",
                        help="shortened run (CI): faster legs, shorter drive")
    parser.add_argument("--joystick", action="store_true",
                        help="dig with a scripted joystick session through teleop_node")
    parser.add_argument("--rt-priority", type=int, default=0, metavar="N",
                        help="SCHED_FIFO priority 1..99 for the bridge loop, the virtual PLC and "
                             "redis-server (Linux, needs CAP_SYS_NICE; docs/plc_bridge.md); "
                             "0 = normal")
    parser.add_argument("--background-nice", type=int, default=DemoOptions.background_nice,
                        metavar="N", help="nice value 0..19 for the processes off the real-time "
                        "paths (the recorder, the operator but with --joystick); 0 = same "
                        f"priority as the rest (default {DemoOptions.background_nice})")
    parser.add_argument("--soil-in-process", action="store_true",
                        help="run the soil model inside sim_node (exact, zero-latency "
                             "coupling) instead of soil_node")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="pin the bridge, the virtual PLC and redis-server to the last CPU "
                             "and sim/soil/ik to the others (hosts with >= 2 CPUs)")
    args = parser.parse_args(argv)
    if not 0 <= args.background_nice <= 19:
        parser.error(f"--background-nice {args.background_nice} is outside 0..19: 0 keeps the "
                     "recorder and the operator at normal priority, 10 lowers them")
    if not 0 <= args.rt_priority <= 99:
        parser.error(f"--rt-priority {args.rt_priority} is outside 0..99: pick 1..99 for "
                     "SCHED_FIFO or 0 for normal scheduling")
    options = DemoOptions(output_dir=args.output, quick=args.quick, joystick=args.joystick,
                          rt_priority=args.rt_priority, background_nice=args.background_nice,
                          pin_cpus=args.pin_cpus, soil_in_process=args.soil_in_process)
    if args.quick:
        options.time_scale = 0.6
        options.drive_distance_m = 0.5
    summary = run_demo(options, own_process=True)
    print(summary.text())
    return 0


