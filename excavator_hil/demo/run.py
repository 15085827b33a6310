"""``excavator-hil demo``: a headless dig cycle, its parts in processes of their own over real DDS.

What runs (all on 127.0.0.1, nothing installed beyond the venv):
- a throwaway ``redis-server`` (the operational layer's key store),
- ``virtual_plc`` (a real S7 server; ``--plant closed``, the default: its speed loops drive the
  simulated machine, ``plant_mode external``; ``--plant standalone``: its built-in first-order
  plant),
- ``plc_bridge`` (Redis <-> S7 through the skid-steer model; publishes ``plc/wheel_states``),
- ``plant_link`` (closed: the PLC's ``plant_in`` / ``plant_out`` blocks <-> ``plant/sensors``,
  ``imu``, ``plant/actuation``),
- ``sim_node`` (MuJoCo; closed: ``drive_mode plant``, the drive train and terramechanics under
  the PLC's actuation; standalone: its tracks follow the PLC's measured track speeds, remapped
  from ``plc/wheel_states``) with ``ik_node`` in its process (``excavator_hil.node_container``:
  a Python process with rclpy fewer), ``soil_node`` (with ``--soil-node``),
- the bag's recorder (an MCAP bag of the run; a thread of this process, or ``excavator-hil bag
  record`` with ``recorder_in_process`` false, as the soak runs it),
- this process: the operator. It drives the tracks through Redis (with the ARTOF heartbeat),
  then walks the bucket tip through the dig cycle by publishing ``target_pose`` (IK targets)
  paced by the simulation's ``/clock`` (sim_node runs with ``use_sim_time:=true``, which makes
  it publish ``/clock``), shows a progress bar, and writes the summary, a rendered PNG and the
  force plot next to the bag.

With the loop closed (one machine) the drive is a path (``excavator_hil.demo.drive_path``):
from 21 m behind the dig site over firm ground and a 0.8 m ridge with 10 deg flanks, dry sand
on its uphill flank, to the dig site. ``drive_loop.png`` plots the PLC's set-point against the
measured speed per track, the slip, the torques and the pitch; the summary gives the
steady-state error, the speed held up the slope, the peak slip and the time at the torque
limit.

``--machine <preset>`` (config/machines/): the machine simulated. A wheeled one (issue 28)
drives a path suited to it instead (:mod:`excavator_hil.demo.wheeled_path`: Ackermann an S of
two turns, 4WD4WS a diagonal crab), with the bridge's, the virtual PLC's and the plant link's
``model`` its own (``ackermann`` / ``4wd4ws``) and the bridge's vehicle geometry the machine's
(:func:`excavator_hil.machine_match.bridge_overrides_for_machine`); ``drive_loop.png`` then
plots each wheel's measured speed against the PLC's set-point and each steering angle against
the model's inverse, and the summary gives them per leg. Then it digs as the tracked machine
does (the same upper carriage). A preset that does not exist, one whose linkage is not the
default (the dig cycle is planned for it), a wheeled one with ``--plant standalone``,
``--machines`` or ``--joystick`` is refused before anything starts, naming the choices.

``--machines N`` (N > 1): N machines side by side, ``spacing`` apart along y (namespaces
``exc1`` ...), each with its own virtual PLC, bridge (Redis database k of the one server),
sim_node and ik_node, digging its own trench in one terrain (one soil_node serving all, see
``launch/fleet.launch.py``); machine 1's sim_node owns ``/clock``, the others follow it. One
operator per machine digs at the same time; one summary per machine (``summary.json``:
``machines`` by namespace), force plot and rendering per machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from excavator_common.dds_profile import use_project_profile
from excavator_common.hang_watchdog import HangWatchdog
from excavator_hil.demo.clock_watch import SimulationStalledError
from excavator_hil.demo.drive_path import DrivePath
from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.summary import DemoSummary
from excavator_hil.demo.wheeled_path import WheeledPath
from excavator_hil.errors import HilConfigError
from excavator_hil.local_services import (
    LocalRedisServer,
    ManagedProcess,
    free_port,
    stop_together,
    wait_for,
)

if TYPE_CHECKING:
    from excavator_hil.bags.recorder import RecorderThread

MachineSummaries = dict[str, DemoSummary]
# [s] the demo's stop and its outputs (render, plots), at most: ~20-40 s on a loaded host
STOP_DEADLINE_S = 300.0

# RECORDER_FIRST: a stack stops its recorder first and waits for it. Its drain (bags/recorder.py)
# ends each topic at a message sent after the stop, which a reliable topic delivers only after
# every earlier one: all that was sent before is then in the bag. Stopped together, a publisher
# that ended first took along what it had not yet delivered to a recorder a busy host held up
# (the chaos soak's bag lacked the last 1.4 s of soil/wrench).
MAX_DEMO_MACHINES = 4
MIN_SPACING_M = 8.0   # the dig cycle's dump pile lies ~3-4 m to the machine's left
# --joystick: teleop_node's command_delay_s [s of sim time]: a command's time to reach sim_node,
# which waits for it (the lockstep below), so it need not cover a loaded host's stalls; short,
# as each command is computed from the state this long before it acts (0.2 s dug the live
# session's 0.26 m^3; 0.5 s spilled half of it on the swing) ...
JOY_COMMAND_DELAY_S = 0.2
# ... and sim_node's command_lockstep_timeout_s [s of wall time]: the longest wait for a
# starved operator or teleop_node before the simulation runs on alone
JOY_LOCKSTEP_TIMEOUT_S = 10.0

# robot_description (latched) and --tf: the bag shows the machine in Foxglove as it is
RECORDED_TOPICS = ("joint_states", "joint_command", "target_pose", "bucket_pose", "soil/wrench",
                   "soil/bucket_load", "plc/wheel_states", "odom", "robot_description")
# the closed loop's topics too (the plant link <-> sim_node)
HIL_TOPICS = ("plant/actuation", "plant/sensors", "imu")
# recorded once: one terrain for every machine (the soil_node of the root namespace); its cloud
# (soil/heightmap, PointCloud2: Foxglove and RViz draw it) at its heightmap_rate_hz while it
# changes
SHARED_TOPICS = ("soil/heightmap",)


def demo_machine(options: DemoOptions) -> dict[str, Any]:
    """The bridge parameters the demo's ``options.machine`` needs (``{}`` for a tracked machine:
    the skid_steer model; a wheeled one: its ``model`` and ``vehicle.<model>.*``), after the
    start-up checks; a :class:`HilConfigError` naming the choices when the demo cannot run it."""
    from excavator_hil.machine_match import check_launch_machine
    from excavator_sim.errors import SimConfigError
    from excavator_sim.machines import available_machines, load_machine

    if not options.machine:
        return {}
    runnable = [m for m in available_machines() if load_machine(m).geometry_data is None]
    try:
        preset = load_machine(options.machine)
    except SimConfigError as exc:
        raise HilConfigError(f"--machine: {exc}; the demo runs the default machine (no "
                             f"--machine) or {', '.join(runnable)}") from None
    if preset.geometry_data is not None:
        raise HilConfigError(
            f"--machine {options.machine}: its linkage is its own ({preset.source}) and the "
            f"demo's dig cycle is planned for the default one; the demo runs the default "
            f"machine (no --machine) or {', '.join(runnable)}")
    if preset.undercarriage is not None:
        model = preset.undercarriage.vehicle_model
        for given, why in ((options.plant != "closed", "--plant standalone"),
                           (options.machines > 1, "--machines"),
                           (options.joystick, "--joystick")):
            if given:
                raise HilConfigError(
                    f"--machine {options.machine} is a wheeled machine ({model}): its demo "
                    f"drives one machine through the PLC's speed and steering loops (the loop "
                    f"closed); leave out {why}")
    # the bridge's model and vehicle geometry for it (a model that fits no bridge model, or a
    # geometry the bridge refuses, is an error naming the mismatch and the fix)
    return check_launch_machine(options.machine, "", "skid_steer")


def _ros_environment() -> None:
    """Keep DDS on loopback and off the user's default domain unless they chose otherwise."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    os.environ.setdefault("MUJOCO_GL", "egl")


class DemoMachine:
    """One machine of the demo: its namespace ("" when alone), place, PLC ports, Redis database
    and sim_node parameters."""

    def __init__(self, index: int, count: int, spacing_m: float,
                 grid_params: dict[str, float | int],
                 path: DrivePath | WheeledPath | None = None):
        self.index = index
        self.ns = f"exc{index + 1}" if count > 1 else ""
        self.y_m = index * spacing_m
        self.db = index
        self.plc_port = free_port()
        self.plc_control_port = free_port()
        # where the bridge reaches the PLC: the PLC itself, or a hop on the link (the soak's
        # fault-injecting proxy)
        self.bridge_plc_port = self.plc_port
        self.virtual_plc_args: list[str] = []   # more options of its virtual PLC
        # the closed loop's drive over soft soil and a ridge, or a wheeled machine's legs
        self.path = path
        self.sim_overrides: dict[str, float | int | str] = (
            {"initial.base_y_m": self.y_m, **grid_params} if count > 1 else {})
        if path is not None:      # its start, soft patch and the stretched grid's height field
            self.sim_overrides.update({**grid_params, **path.sim_parameters()})

    @property
    def label(self) -> str:
        return self.ns or "machine"

    def ros(self) -> list[str]:
        """--ros-args of this machine's nodes: its namespace and frame prefix."""
        args = ["--ros-args", "--log-level", "warn"]
        return [*args, "-r", f"__ns:=/{self.ns}"] if self.ns else args


def _ros_param(name: str, value: object) -> str:
    """``name:=value`` for a ``-p`` (strings quoted as YAML, so a name stays a string)."""
    return f"{name}:={value!r}" if not isinstance(value, str) else f"{name}:='{value}'"


def _soil_file(folder: Path, terrain: dict[str, float]) -> Path:
    """The shipped config/soil.yaml with ``terrain`` (``terrain.*`` keys) set, written to
    ``folder`` (for sim_node's in-process soil, which reads a file)."""
    import yaml

    from excavator_common.paths import config_file

    data = yaml.safe_load(config_file("soil.yaml").read_text())
    section = data["/**"]["ros__parameters"]["terrain"]
    for key, value in terrain.items():
        section[key.split(".", 1)[1]] = value
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "soil_drive_path.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def process_layout(options: DemoOptions) -> dict[str, list[str]]:
    """The command prefix of each group of processes (the HIL host set-up of
    docs/plc_bridge.md): ``bridge`` (virtual PLC, plc_bridge), ``redis``, ``sim`` (sim_node,
    soil_node, ik_node, teleop_node) and ``background`` (the recorder; the operator, this
    process, lowers its own priority in :func:`run_demo`). The rules are
    ``excavator_common.realtime.command_prefixes``, the same the launch files apply."""
    from excavator_common.realtime import ProcessSetup, command_prefixes

    return command_prefixes(ProcessSetup(
        rt_priority=options.rt_priority, background_nice=options.background_nice,
        bridge_slice_ms=options.bridge_slice_ms, pin_cpus=options.pin_cpus))


class DemoStack:
    """Starts every process of the demo; stops them all (reverse order) on exit."""

    def __init__(self, options: DemoOptions):
        self.options = options
        self.logs = options.output_dir / "logs"
        self.redis = LocalRedisServer(self.logs / "redis")
        # the bridge's model and vehicle parameters for the machine ({} tracked: skid_steer)
        self.bridge_overrides = demo_machine(options)
        self.model = str(self.bridge_overrides.get("model", "skid_steer"))
        n = options.machines
        grid: dict[str, float | int] = {}
        self.soil_params: list[str] = []
        self.soil_file = ""     # with a path and soil_in_process: the soil file with its grid
        path: DrivePath | WheeledPath | None = (
            WheeledPath.for_model(self.model, options.quick) if self.wheeled
            else DrivePath() if options.plant == "closed" and n == 1 else None)
        if path is not None:
            from excavator_hil.fleet import sim_grid_parameters
            from excavator_sim.soil.config import load_soil_config

            stretched = path.soil_grid(load_soil_config().terrain)
            grid = sim_grid_parameters(stretched)
            soil = path.soil_node_parameters(stretched)
            self.soil_params = [a for k, v in soil.items() for a in ("-p", f"{k}:={v!r}")]
            if options.soil_in_process:
                self.soil_file = str(_soil_file(options.output_dir / "logs", soil))
        elif n > 1:
            from excavator_hil.fleet import shared_soil_grid, sim_grid_parameters
            from excavator_sim.soil.config import load_soil_config

            shared = shared_soil_grid(load_soil_config().terrain, n, options.spacing_m)
            grid = sim_grid_parameters(shared)
            self.soil_params = ["-p", f"terrain.centre_y_m:={shared.centre_y_m!r}",
                                "-p", f"terrain.size_y_m:={shared.size_y_m!r}"]
        self.machines = [DemoMachine(k, n, options.spacing_m, grid, path) for k in range(n)]
        self.procs: dict[str, ManagedProcess] = {}

    @property
    def wheeled(self) -> bool:
        """A wheeled machine (its bridge model not skid_steer)."""
        return self.model != "skid_steer"

    @property
    def plc_port(self) -> int:          # the first machine's (one-machine callers)
        return self.machines[0].plc_port

    @property
    def plc_control_port(self) -> int:
        return self.machines[0].plc_control_port

    def redis_url(self, machine: DemoMachine) -> str:
        return f"{self.redis.url.rsplit('/', 1)[0]}/{machine.db}"

    def _start(self, name: str, module: str, args: list[str],
               prefix: Sequence[str] = ()) -> ManagedProcess:
        proc = ManagedProcess(module, args, log_dir=self.logs, prefix=prefix)
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        layout = process_layout(self.options)
        self.redis.prefix = layout["redis"]
        self.redis.start()
        for m in self.machines:
            self._start_machine(m, layout)
        ros = ["--ros-args", "--log-level", "warn"]
        if len(self.machines) == 1:
            if not self.options.soil_in_process:
                self._start("soil_node", "excavator_sim.soil.soil_node",
                            [*ros, *self.soil_params], layout["sim"])
        else:   # one terrain: one soil_node serving every machine
            self._start("soil_node", "excavator_sim.soil.soil_node",
                        [*ros, "-p", f"machines:={','.join(m.ns for m in self.machines)}",
                         "-p", "use_sim_time:=true", *self.soil_params], layout["sim"])
        if self.options.joystick:  # Joy from the operator (a scripted session)
            # on simulated time: the Joys are stamped with it, and their age is judged on it
            # (max_command_age_s; on wall time they would be 1.7e9 s old). The scripted session
            # is a thread of this process: a Joy it sends late is the host starving the demo,
            # not a link holding it up, so 1 s as the replay tests allow (the default 0.25 s
            # dropped every Joy of a run on a slow hour of the CI machine: nothing was dug).
            # Scheduled (command_delay_s, input_lockstep; sim_node's command lockstep): the
            # session acts at its stamps, so the dig is the same on any host (answered on
            # arrival, a starved teleop_node or operator cut the moves short: ci73 dug half)
            self._start("teleop_node", "excavator_kinematics.teleop_node",
                        [*ros, "-p", "joy_timeout_s:=2.0", "-p", "use_sim_time:=true",
                         "-p", "max_command_age_s:=1.0",
                         "-p", f"command_delay_s:={JOY_COMMAND_DELAY_S}",
                         "-p", "input_lockstep:=true"], layout["sim"])
        if not self.options.recorder_in_process:  # else run_demos' RecorderThread
            bag, topics = self.recording()
            self._start("bag_record", "excavator_hil.cli",
                        # sim time: the bag's timestamps and /clock on replay share the header
                        # stamps' time base
                        ["bag", "record", *topics, "-o", str(bag), "--use-sim-time",
                         "--tf"], layout["background"])

    def recording(self) -> tuple[Path, list[str]]:
        """The bag of the run (an old one removed) and the topics it records."""
        bag = self.options.output_dir / "dig_bag"
        if bag.exists():
            import shutil

            shutil.rmtree(bag)
        # the loop's topics with one machine (its drive is the one analysed; a fleet's bag
        # stays the size it was: the recorder keeps up with N machines' 100 Hz topics)
        hil = self.options.plant == "closed" and len(self.machines) == 1
        recorded = RECORDED_TOPICS + (HIL_TOPICS if hil else ())
        return bag, [*(f"{m.ns}/{t}" if m.ns else t for m in self.machines for t in recorded),
                     *SHARED_TOPICS]

    def _start_machine(self, m: DemoMachine, layout: dict[str, list[str]]) -> None:
        rt = str(self.options.rt_priority)
        key = f"{m.ns}/" if m.ns else ""
        ros = m.ros()
        prefix = ["-p", f"frame_prefix:={m.ns}/"] if m.ns else []
        closed = self.options.plant == "closed"
        model = self.model
        # a wheeled machine's geometry, steering end stops and wheel speeds for the model
        vehicle = {k: v for k, v in self.bridge_overrides.items() if k.startswith("vehicle.")}
        self._start(f"{key}virtual_plc", "plc_bridge.virtual_plc.cli",
                    ["--port", str(m.plc_port), "--control-port", str(m.plc_control_port),
                     "--model", model, "--rt-priority", rt,
                     *(f"--vehicle={k.split('.')[-1]}={v}" for k, v in vehicle.items()),
                     "--plant-mode", "external" if closed else "internal",
                     *m.virtual_plc_args], layout["bridge"])
        self._start(f"{key}plc_bridge", "plc_bridge.bridge.node",
                    [*ros, "-p", f"redis_url:={self.redis_url(m)}", "-p", "plc_host:=127.0.0.1",
                     "-p", f"plc_port:={m.bridge_plc_port}", "-p", f"model:={model}",
                     *(["--params-file", str(self._vehicle_file(vehicle))] if vehicle else []),
                     "-p", "autostart:=true", "-p", f"rt_priority:={rt}", *prefix],
                    layout["bridge"])
        # The soil model is the ground while digging (stiffness, shear failure, load); rigid
        # height-field contact would hold the bucket on the surface. use_sim_time: sim_node
        # publishes /clock only then (machine 1; the others follow it), and the operator
        # paces the dig cycle by it. soil_in_process (one machine): the soil core runs inside
        # sim_node (exact coupling) and no soil_node is started.
        in_process = self.options.soil_in_process and not m.ns
        # closed: the drive train under the plant link's plant/actuation; standalone: the
        # tracks follow the PLC's reported speeds
        drive = (["-p", "drive_mode:=plant"] if closed else
                 ["-p", "drive_mode:=kinematic", "-r", "track_command:=plc/wheel_states"])
        sim = [*ros, "-p", "real_time_factor:=1.0", "-p", "terrain.contact:=false",
               "-p", "use_sim_time:=true", *drive,
               *(["-p", _ros_param("machine", self.options.machine)]
                 if self.options.machine else []),
               "-p", f"soil_in_process:={str(in_process).lower()}", *prefix]
        if in_process and self.soil_file:
            sim += ["-p", f"soil_params_file:={self.soil_file}"]
        if m.ns:
            sim += ["-p", f"follow_clock:={'true' if m.index else 'false'}",
                    "-r", "soil/terrain_patch:=/soil/terrain_patch"]
        if self.options.joystick:  # wait for the scripted session's commands (above)
            sim += ["-p", f"command_lockstep_timeout_s:={JOY_LOCKSTEP_TIMEOUT_S}"]
        sim += [a for k, v in m.sim_overrides.items() for a in ("-p", _ros_param(k, v))]
        if self.options.ik_in_sim_process:
            # ik_node in sim_node's process (excavator_hil.node_container): one Python process
            # with rclpy fewer, ~35-40 MiB PSS (issue 32); its solve of a target takes 0.13 ms
            # between the simulation's 10 ms periods
            self._start(f"{key}sim_node+ik_node", "excavator_hil.node_container",
                        ["sim_node", *sim, "--", "ik_node", *ros, *prefix], layout["sim"])
        else:
            self._start(f"{key}sim_node", "excavator_sim.sim_node", sim, layout["sim"])
            self._start(f"{key}ik_node", "excavator_kinematics.ik_node", [*ros, *prefix],
                        layout["sim"])
        if closed:   # the PLC's plant blocks <-> the simulation, on the PLC the bridge uses
            self._start(f"{key}plant_link", "plc_bridge.plant_link.node",
                        [*ros, "-p", "plc_host:=127.0.0.1", "-p", f"plc_port:={m.plc_port}",
                         "-p", f"model:={model}", "-p", f"rt_priority:={rt}"],
                        layout["bridge"])

    def _vehicle_file(self, vehicle: dict[str, Any]) -> Path:
        """The bridge's ``vehicle.<model>.*`` in a parameter file (a ``-p`` rule cannot name
        ``vehicle.4wd4ws.*``: a token may not begin with a digit)."""
        import yaml

        nested: dict[str, Any] = {}
        for key, value in vehicle.items():
            _, model, name = key.split(".", 2)
            nested.setdefault(model, {})[name] = value
        self.logs.mkdir(parents=True, exist_ok=True)
        path = self.logs / "bridge_vehicle.yaml"
        path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"vehicle": nested}}}))
        return path

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if not proc.alive():
                tail = "\n".join(proc.log().splitlines()[-15:])
                raise RuntimeError(f"{name} exited with code {proc.proc.returncode}; last log "
                                   f"lines ({proc.log_path}):\n{tail}")

    def stall_diagnosis(self) -> str:
        """Each simulation process as seen from outside while its /clock stands, which tells
        a simulation that stood from one that stepped while this process stopped hearing it."""
        sims = {name: p for name, p in self.procs.items() if "sim_node" in name}
        seen = "; ".join(f"{name} (pid {p.pid}): {p.activity()}" for name, p in sims.items())
        return (f"Seen from outside: {seen}. A simulation that uses CPU time stepped on: "
                "this process stopped hearing it (a DDS transport fault, docs/deployment.md)")

    def stop(self) -> None:
        recorder = self.procs.get("bag_record")
        if recorder is not None:
            # the recorder first, the stack still running (RECORDER_FIRST)
            recorder.stop(timeout=15.0)
        # then all at once: one by one took the sum of their shutdowns
        stop_together([p for name, p in reversed(list(self.procs.items()))
                       if name != "bag_record"], timeout=15.0)
        self.redis.stop()


def run_demo(options: DemoOptions, own_process: bool = False) -> DemoSummary:
    """Run the whole demo; returns the (first) machine's summary (also in ``summary.json``).
    ``own_process``: see :func:`run_demos`."""
    return next(iter(run_demos(options, own_process).values()))


def run_demos(options: DemoOptions, own_process: bool = False) -> MachineSummaries:
    """Run the demo with ``options.machines`` machines digging at once; their summaries by
    label (``machine`` alone, else the namespaces), also written to ``summary.json``.
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
    summaries: MachineSummaries = {}
    wall0 = time.monotonic()
    use_project_profile()   # before the first participant: Fast DDS reads it then
    rclpy.init()
    operators: list[DemoOperator] = []
    recorder: RecorderThread | None = None
    try:
        stack.start()
        # The operator (this process) is off the real-time paths (its targets follow the
        # simulation's /clock; a heartbeat it misses by 0.75 s stops the tracks, fail-safe):
        # its threads are niced once its nodes exist (below), all but Fast DDS's own, which
        # must not stand for a second (realtime.nice_threads_at_least). Not with --joystick:
        # the scripted Joy stream stands for an operator's hands, and teleop_node stops the
        # machine when it pauses for joy_timeout_s.
        background = own_process and not options.joystick
        if options.recorder_in_process:
            from excavator_hil.bags.recorder import RecorderThread

            bag, topics = stack.recording()
            # sim time: the bag's timestamps and /clock on replay share the header stamps'
            # time base; niced as the recorder's process was (the background group)
            recorder = RecorderThread(bag, topics, use_sim_time=True,
                                      nice=options.background_nice)

        def check_alive() -> None:
            stack.check_alive()
            if recorder is not None and not recorder.alive():
                raise RuntimeError(f"the bag's recorder ended: {recorder.error!r}")
        for m in stack.machines:
            url = stack.redis_url(m)
            if options.joystick:
                from excavator_hil.demo.joystick_operator import JoystickDemoOperator

                operators.append(JoystickDemoOperator(url, m.plc_control_port, options,
                                                      sim_overrides=m.sim_overrides,
                                                      path=m.path
                                                      if isinstance(m.path, DrivePath)
                                                      else None))
            elif isinstance(m.path, WheeledPath):
                from excavator_hil.demo.wheeled_operator import WheeledDemoOperator

                operators.append(WheeledDemoOperator(url, m.plc_control_port, options,
                                                     options.machine, m.path,
                                                     sim_overrides=m.sim_overrides))
            else:
                operators.append(DemoOperator(url, m.plc_control_port, options, namespace=m.ns,
                                              sim_overrides=m.sim_overrides, path=m.path))
            operators[-1].preset = options.machine   # its rendering and drive geometry
        if background:
            # after the children started (they would inherit it) and the participant's
            # threads exist, before this process's own threads start (they inherit it)
            realtime.nice_threads_at_least(options.background_nice)
        executor = rclpy.executors.SingleThreadedExecutor()
        for operator in operators:
            executor.add_node(operator)
        spin = threading.Thread(target=_spin_until_shutdown, args=(executor,), daemon=True)
        spin.start()
        print(f"demo: output in {options.output_dir}/ (process logs in {stack.logs}/)")

        def up() -> bool:
            check_alive()   # a process that died fails the start-up at once
            return all(o.ready() for o in operators)
        wait_for(up, options.startup_timeout_s, lambda: "the stack to come up (" + "; ".join(
            f"{m.label}: {o.waiting_for()}" for m, o in zip(stack.machines, operators,
                                                            strict=True)) + ")", period=0.1)
        if own_process:
            realtime.quiet_gc()   # start-up objects frozen: no full collection over them mid-run
        run_wall0, run_sim0 = time.monotonic(), operators[0].sim_time
        try:
            _run_all(operators, check_alive)
        except SimulationStalledError as exc:
            raise SimulationStalledError(f"{exc}. {stack.stall_diagnosis()}") from exc
        for m, operator in zip(stack.machines, operators, strict=True):
            summary = operator.summary()
            summary.real_time_factor = ((operator.sim_time - run_sim0)
                                        / (time.monotonic() - run_wall0))
            summaries[m.label] = summary
    finally:
        # The stop may not hang: this process waits in rclpy's teardown holding the GIL if Fast
        # DDS 3.2 deadlocks there (docs/deployment.md), and nothing in Python can notice. A
        # deadline (a C thread) prints every thread's stack and ends it (exit 1) instead.
        stop_deadline = HangWatchdog(STOP_DEADLINE_S) if own_process else None
        if stop_deadline is not None:
            stop_deadline.arm()
        for operator in operators:
            operator.close()
        try:
            if recorder is not None:   # the recorder first, the stack still running
                recorder.stop()        # (RECORDER_FIRST)
        finally:
            # this process's participant leaves first, while its peers still run: its teardown
            # never races their departure, the race of that deadlock (a node that hangs there
            # instead has its own watchdog and stop_together's SIGKILL)
            rclpy.try_shutdown()
            stack.stop()
    for summary in summaries.values():
        summary.wall_time_s = time.monotonic() - wall0
    _write_outputs(options, summaries, dict(zip([m.label for m in stack.machines], operators,
                                                strict=False)))
    if stop_deadline is not None:
        stop_deadline.stop()
    return summaries


def _run_all(operators: list[Any], check_alive: Any) -> None:
    """Every operator's run at once, one thread each; the first failure is raised (the others
    see the dead process or finish)."""
    if len(operators) == 1:
        operators[0].run(check_alive)
        return
    errors: list[BaseException] = []

    def run(operator: Any) -> None:
        try:
            operator.run(check_alive)
        except BaseException as exc:  # noqa: BLE001 - re-raised below in the main thread
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(o,), daemon=True) for o in operators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _spin_until_shutdown(executor: Any) -> None:
    from rclpy.executors import ExternalShutdownException

    with contextlib.suppress(ExternalShutdownException):  # rclpy.shutdown() ends the demo
        executor.spin()


def _write_outputs(options: DemoOptions, summaries: MachineSummaries,
                   operators: dict[str, Any]) -> None:
    from excavator_common.heap import release_free_pages

    out = options.output_dir
    alone = len(summaries) == 1
    for label, summary in summaries.items():
        summary.outputs["bag"] = str(out / "dig_bag")
        operator = operators.get(label)
        if operator is None:
            continue
        suffix = "" if alone else f"_{label}"
        # The demo's end is its process's peak (issue 32), in this order: the stack has
        # stopped, and what the run built and dropped (messages, samples) is free but still in
        # this process's heap, so it goes back to the system first; the picture next (the
        # software renderer's ~230 MiB at its peak), then its freed heap back too, and the
        # plots last (matplotlib stays loaded). The other order peaked ~45 MiB higher.
        release_free_pages()
        png = out / f"final_pose{suffix}.png"
        try:
            operator.render_final(png)
            summary.outputs["rendered scene"] = str(png)
        except Exception as exc:  # noqa: BLE001 - a missing GL must not lose the run's results
            print(f"demo: rendering skipped ({type(exc).__name__}: {exc})")
        release_free_pages()
        plot = out / f"soil_forces{suffix}.png"
        operator.plot_forces(plot)
        summary.outputs["force plot"] = str(plot)
        drive_plot = out / f"drive_loop{suffix}.png"
        if operator.plot_drive(drive_plot):
            summary.outputs["drive loop plot"] = str(drive_plot)
    if alone:
        data: dict[str, Any] = asdict(next(iter(summaries.values())))
    else:
        data = {"machines": {label: asdict(s) for label, s in summaries.items()}}
    (out / "summary.json").write_text(json.dumps(data, indent=2, default=float))
    for summary in summaries.values():
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
    parser.add_argument("--bridge-slice-ms", type=float, default=DemoOptions.bridge_slice_ms,
                        metavar="MS", help="fair-scheduler time slice 0.1..100 ms of the "
                        "bridge, the virtual PLC and redis-server (Linux >= 6.12; no privilege "
                        "needed); 0 = the kernel's default (default "
                        f"{DemoOptions.bridge_slice_ms:g})")
    soil = parser.add_mutually_exclusive_group()
    soil.add_argument("--soil-in-process", dest="soil_in_process", action="store_true",
                      default=None,
                      help="run the soil model inside sim_node (exact coupling: every bucket "
                           "pose answered within its period; one machine): the default")
    soil.add_argument("--soil-node", dest="soil_in_process", action="store_false",
                      default=None,
                      help="run the soil model in soil_node, its own process, over DDS (a "
                           "late answer is left out) instead of inside sim_node")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="pin the bridge, the virtual PLC and redis-server to the last CPU "
                             "and sim/soil/ik to the others (hosts with >= 2 CPUs)")
    parser.add_argument("--machines", type=int, default=1, metavar="N",
                        help="N machines side by side digging at once in one terrain, each "
                             f"with its own PLC and bridge (1..{MAX_DEMO_MACHINES})")
    parser.add_argument("--plant", choices=("closed", "standalone"), default="closed",
                        help="closed (default): hardware in the loop, the simulated machine is "
                             "the virtual PLC's plant (plant link, drive train, terramechanics; "
                             "one machine drives over soft soil and a ridge); standalone: the "
                             "virtual PLC's built-in plant, the simulated tracks following it")
    parser.add_argument("--machine", default="", metavar="PRESET",
                        help="the machine simulated: a preset of config/machines/ (or a preset "
                             "file); a wheeled one (wheeled_ackermann_11t, wheeled_4ws_11t) "
                             "drives a path of its own through the bridge's model of it and "
                             "the PLC's speed and steering loops; default the tracked machine")
    parser.add_argument("--spacing", type=float, default=10.0, metavar="M",
                        help="distance between the machines along y [m] (--machines > 1), "
                             f"{MIN_SPACING_M:g}..40")
    args = parser.parse_args(argv)
    if not 0 <= args.background_nice <= 19:
        parser.error(f"--background-nice {args.background_nice} is outside 0..19: 0 keeps the "
                     "recorder and the operator at normal priority, 10 lowers them")
    from excavator_common.realtime import FAIR_SLICE_MS_RANGE

    lo, hi = FAIR_SLICE_MS_RANGE
    if args.bridge_slice_ms != 0 and not lo <= args.bridge_slice_ms <= hi:
        parser.error(f"--bridge-slice-ms {args.bridge_slice_ms:g} is outside {lo:g}..{hi:g} ms "
                     "(the kernel's range); 0 leaves the kernel's default slice")
    if not 1 <= args.machines <= MAX_DEMO_MACHINES:
        parser.error(f"--machines {args.machines} is outside 1..{MAX_DEMO_MACHINES}: each "
                     "machine is a whole stack (about a core at real time)")
    if not MIN_SPACING_M <= args.spacing <= 40.0:
        parser.error(f"--spacing {args.spacing:.6g} m is outside {MIN_SPACING_M:g}..40 m: "
                     "closer, one machine's dump pile lands in the other's trench; further, "
                     "the shared terrain grows beyond what the simulators hold")
    if args.joystick and args.machines > 1:
        parser.error("--joystick drives one machine (one teleop_node, one joystick): leave "
                     "out --machines or --joystick")
    if args.soil_in_process and args.machines > 1:
        parser.error("--soil-in-process runs one machine's soil inside its sim_node; the "
                     "machines of --machines share one soil_node: leave out one of them")
    if not 0 <= args.rt_priority <= 99:
        parser.error(f"--rt-priority {args.rt_priority} is outside 0..99: pick 1..99 for "
                     "SCHED_FIFO or 0 for normal scheduling")
    options = DemoOptions(output_dir=args.output, quick=args.quick, joystick=args.joystick,
                          rt_priority=args.rt_priority, background_nice=args.background_nice,
                          bridge_slice_ms=args.bridge_slice_ms,
                          pin_cpus=args.pin_cpus,
                          # by default inside sim_node; a fleet's machines share soil_node
                          soil_in_process=args.soil_in_process is not False
                          and args.machines == 1,
                          machines=args.machines, spacing_m=args.spacing, plant=args.plant,
                          machine=args.machine)
    if args.quick:
        options.time_scale = 0.6
        options.drive_distance_m = 0.5
    try:
        demo_machine(options)   # before anything starts: a machine the demo cannot run
    except HilConfigError as exc:
        parser.error(str(exc))
    summaries = run_demos(options, own_process=True)
    for label, summary in summaries.items():
        if len(summaries) > 1:
            print(f"--- {label} ---")
        print(summary.text())
    return 0


