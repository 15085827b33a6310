"""``excavator-hil``: the user CLI (demo, IK, tools).

Each sub-command imports what it needs when it runs, so ``excavator-hil ik`` works without
MuJoCo or ROS installed.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable, Sequence

from excavator_common import supervisor_watch

# Sample bucket-tip targets in base_link [m] with bucket pitch [rad]: a dig cycle's key points.
SAMPLE_TARGETS: tuple[tuple[str, tuple[float, float, float], float], ...] = (
    ("approach", (6.05, 0.0, 1.19), 0.52),
    ("dig", (4.29, 0.0, -1.34), -0.26),
    ("curl", (4.87, 0.0, -0.95), 0.79),
    ("lift", (5.09, 0.0, 1.85), 1.31),
    ("swing 90 deg", (0.0, 5.09, 1.85), 1.31),
    ("dump", (0.0, 5.68, 2.41), 0.61),
    ("out of reach", (9.0, 0.0, 0.0), 0.0),  # shows a rejection with its reason
)


def _cmd_ik(args: argparse.Namespace) -> int:
    from excavator_kinematics.errors import KinematicsError, fmt_number
    from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
    from excavator_kinematics.inverse_kinematics import InverseKinematics

    geometry = ExcavatorGeometry.from_yaml(args.geometry) if args.geometry else default_geometry()
    ik = InverseKinematics(geometry)
    if args.target is not None:
        x, y, z = args.target
        cases: Sequence[tuple[str, tuple[float, float, float], float]] = [
            ("target", (x, y, z), args.pitch)]
    else:
        cases = SAMPLE_TARGETS
    lo, hi = ik.linkage.joint_limits["arm"]
    print(f"closed-form IK, wrist reach {ik.reach_range_m[0]:.2f}..{ik.reach_range_m[1]:.2f} m, "
          f"arm joint {math.degrees(lo):.1f}..{math.degrees(hi):.1f} deg")
    header = (f"{'case':<14}{'target x,y,z [m]':>22}{'pitch':>7} | {'swing':>7}{'boom':>7}"
              f"{'arm':>8}{'bucket':>8} [deg] | {'ext boom,arm,bucket [m]':>24} | reached tip")
    print(header)
    print("-" * len(header))
    failures = 0
    for name, target, pitch in cases:
        t = ",".join(f"{fmt_number(v, '.2f'):>6}" for v in target)
        try:
            sol = ik.solve(target, pitch)
        except KinematicsError as exc:
            failures += 1
            print(f"{name:<14}{t:>22}{fmt_number(math.degrees(pitch), '.1f'):>7} | rejected: {exc}")
            continue
        q = [math.degrees(v) for v in sol.q]
        e = ",".join(f"{v:.3f}" for v in sol.extensions)
        tip = ik.fk.tip(sol.q)
        print(f"{name:<14}{t:>22}{math.degrees(pitch):7.1f} | {q[0]:7.1f}{q[1]:7.1f}{q[2]:8.1f}"
              f"{q[3]:8.1f}       | {e:>24} | {tip[0]:.3f},{tip[1]:.3f},{tip[2]:.3f}")
    return 1 if (args.target is not None and failures) else 0


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0.0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number > 0")
    return value


def _cmd_bag_record(args: argparse.Namespace) -> int:
    from excavator_hil.bags.recorder import TF_RATE_HZ, record

    topics = None if args.all else args.topics
    if topics is None and not args.all:
        print("error: name the topics to record, or pass --all")
        return 2
    tf_rate_hz = TF_RATE_HZ if args.tf_rate_hz is None else args.tf_rate_hz
    if args.tf and (tf_rate_hz <= 0 or tf_rate_hz > 1000):
        print(f"error: --tf-rate-hz {tf_rate_hz:g}: give 0 < rate <= 1000 Hz")
        return 2
    return record(args.output, topics, args.storage, args.duration, args.max_messages,
                  args.use_sim_time, tf_rate_hz if args.tf else 0.0)


def _cmd_bag_play(args: argparse.Namespace) -> int:
    from excavator_hil.bags.player import play

    return play(args.bag, args.topics, args.rate, args.loop, args.clock, args.wait_for_subscribers,
                args.follow_clock, args.lead, args.remap, args.pacing_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="excavator-hil", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    for name, text in (
        ("demo", "the main job: a headless dig cycle with every node in its own process "
                 "(--quick for CI, --output DIR)"),
        ("render", "render the simulated excavator to a PNG (offscreen)"),
        ("urdf", "print or write the URDF generated from the geometry"),
        ("soil-plots", "draw the soil force validation plot (paper Fig. 7 style, DiMaio vs "
                       "FEE) and the trench map"),
        ("plc-db-source", "write the TIA Portal DB source (SCL DATA_BLOCK) of the configured "
                          "control and monitor data blocks"),
        ("opcua-certs", "make the OPC UA certificate and key of the bridge, the plant link or "
                        "the virtual PLC (own/, trusted/, rejected/)"),
        ("opcua-user", "add, change or delete a user of the virtual PLC's OPC UA server "
                       "(scrypt hashes, mode 0600)"),
        ("bridge", "run the Redis <-> S7 bridge without ROS"),
        ("virtual-plc", "run the virtual PLC (an S7 server with a vehicle plant)"),
        ("ament-register", "register the pip-installed package in an ament prefix (the venv) "
                           "for ros2 launch / ros2 run"),
        ("dashboard", "browser dashboard: targets, machine, soil, PLC bridge, stop (127.0.0.1)"),
        ("working-ranges", "the ISO 7135 working ranges of the default machine or a preset "
                           "(--machine), against its spec sheet; --plot FILE draws them"),
    ):
        cmd = sub.add_parser(name, help=text, add_help=False)
        cmd.add_argument("rest", nargs=argparse.REMAINDER)
        cmd.set_defaults(func=PASS_THROUGH[name])

    ik = sub.add_parser("ik", help="solve the closed-form IK for a tip target or sample targets")
    ik.add_argument("--target", type=float, nargs=3, metavar=("X", "Y", "Z"),
                    help="bucket tip target in base_link [m]; default: sample dig-cycle targets")
    ik.add_argument("--pitch", type=float, default=0.5,
                    help="bucket pitch [rad]: M->L against the horizontal (default 0.5)")
    ik.add_argument("--geometry", help="geometry YAML (default: config/excavator.yaml)")
    ik.set_defaults(func=_cmd_ik)

    bag = sub.add_parser("bag", help="record and replay rosbag2 bags").add_subparsers(
        dest="bag_command", required=True)
    rec = bag.add_parser("record", help="record topics to a rosbag2 bag (MCAP by default)")
    rec.add_argument("topics", nargs="*", help="topics to record (relative names get a '/')")
    rec.add_argument("--all", action="store_true", help="record every topic that appears")
    rec.add_argument("-o", "--output", required=True, help="bag directory to create")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    rec.add_argument("--duration", type=float, default=0.0,
                     help="stop after this many seconds [s] (0: until Ctrl-C)")
    rec.add_argument("--max-messages", type=int, default=0,
                     help="stop after this many messages (0: no limit)")
    rec.add_argument("--use-sim-time", action="store_true",
                     help="stamp messages with /clock (the simulation's time, as in their "
                          "headers) instead of wall time, like ros2 bag record --use-sim-time")
    rec.add_argument("--tf", action="store_true",
                     help="also write /tf: each machine's URDF (its recorded "
                          "robot_description) at its recorded joint_states, as "
                          "robot_state_publisher would, so the bag shows the machine in "
                          "Foxglove or RViz (docs/bags.md)")
    rec.add_argument("--tf-rate-hz", type=float, default=None,
                     help="with --tf: at most this many /tf per machine per second of bag "
                          "time [Hz] (default 30; viewers interpolate)")
    rec.set_defaults(func=_cmd_bag_record)
    ply = bag.add_parser("play", help="replay a bag into the live graph with its timing")
    ply.add_argument("bag", help="rosbag2 directory (this tool's or ros2 bag record's)")
    ply.add_argument("--topics", nargs="+", help="only these topics")
    ply.add_argument("--rate", type=_positive_float, default=1.0,
                     help="time factor (2.0 plays twice as fast)")
    ply.add_argument("--loop", action="store_true", help="start again at the end")
    ply.add_argument("--clock", action="store_true",
                     help="publish /clock with the bag's time (for use_sim_time nodes)")
    ply.add_argument("--wait-for-subscribers", type=float, default=0.0, metavar="SECONDS",
                     help="wait up to this long for every topic to have a subscriber [s]")
    ply.add_argument("--follow-clock", action="store_true",
                     help="publish each message when the running simulation's /clock reaches "
                          "its bag time (a bag recorded with --use-sim-time, replayed into a "
                          "fresh simulation: reproducible whatever the machine's speed)")
    ply.add_argument("--lead", type=float, default=0.0, metavar="SECONDS",
                     help="with --follow-clock: publish this long before the bag time [s]")
    ply.add_argument("--remap", action="append", default=[], metavar="FROM:=TO",
                     help="publish a recorded topic under another name (repeatable), e.g. "
                          "/teleop/joy_applied:=/joy")
    ply.add_argument("--pacing-report", metavar="FILE",
                     help="write the player's pacing record as CSV: per message its bag stamp, "
                          "when it was due and when it was sent [s from the start]")
    ply.set_defaults(func=_cmd_bag_play)
    return parser


def _module_main(module: str) -> Callable[[argparse.Namespace], int]:
    """A sub-command that hands its arguments to ``module.main(argv)``."""

    def run(args: argparse.Namespace) -> int:
        return int(importlib.import_module(module).main(args.rest) or 0)

    return run


# Sub-commands implemented elsewhere: they parse their own arguments (see their --help).
PASS_THROUGH: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": _module_main("excavator_hil.demo.run"),
    "working-ranges": _module_main("excavator_hil.working_ranges_plot"),
    "render": _module_main("excavator_hil.render"),
    "urdf": _module_main("excavator_sim.urdf"),
    "soil-plots": _module_main("excavator_hil.soil_plots"),
    "plc-db-source": _module_main("plc_bridge.scl_export"),
    "opcua-certs": _module_main("plc_bridge.opcua_pki"),
    "opcua-user": _module_main("plc_bridge.virtual_plc.users"),
    "bridge": _module_main("plc_bridge.bridge.cli"),
    "virtual-plc": _module_main("plc_bridge.virtual_plc.cli"),
    "ament-register": _module_main("excavator_hil.ament_register"),
    "dashboard": _module_main("excavator_hil.dashboard.app"),
    "params-doc": _module_main("excavator_hil.parameters_doc"),
}


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's input (a file, a value), not a bug: shown as one line."""
    from excavator_common.errors import ConfigurationError
    from excavator_hil.errors import HilError
    from excavator_kinematics.errors import KinematicsError

    # every package's configuration error, the kinematics' and this package's own errors
    errors: list[type[BaseException]] = [ConfigurationError, KinematicsError, HilError, OSError]
    try:
        import yaml

        errors.append(yaml.YAMLError)
    except ImportError:  # pragma: no cover - yaml is a dependency
        pass
    try:
        from excavator_sim.errors import SimulationError  # the soil's errors included

        errors.append(SimulationError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


def _refuse_an_option_for_a_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown option where a (sub-)command belongs (``excavator-hil --bogus``,
    ``excavator-hil bag --bogus``): argparse would only say that the command is missing."""
    if "-h" in argv or "--help" in argv:
        return
    at = 1 if argv[:1] == ["bag"] else 0
    if len(argv) > at and argv[at].startswith("-"):
        parser.error(f"unrecognized arguments: {argv[at]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run a sub-command. A bad file or value (missing, not YAML, out of range) ends with one
    ``excavator-hil: error: ...`` line and exit code 2, never a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    supervisor_watch.end_with_supervisor()   # started by the demo or the soak: end with it
    try:
        # argparse's REMAINDER does not capture leading options: hand these over directly.
        if argv and argv[0] in PASS_THROUGH:
            return int(PASS_THROUGH[argv[0]](argparse.Namespace(rest=argv[1:])))
        parser = build_parser()
        _refuse_an_option_for_a_command(parser, argv)
        args = parser.parse_args(argv)
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except _user_errors() as exc:
        message = " ".join(str(exc).split())  # YAML errors span several lines
        print(f"excavator-hil: error: {message}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
