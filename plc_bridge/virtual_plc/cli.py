"""``virtual_plc``: run the virtual S7 PLC standalone (own process, own port).

    python -m plc_bridge.virtual_plc.cli --port 1102 --model ackermann --control-port 0
    python -m plc_bridge.virtual_plc.cli --port 1102 --plant-mode external   # HIL

Prints ``VIRTUAL_PLC READY port=<s7 port> control_port=<port>`` once both ports listen (the
ports actually bound, also for ``--port 0``); exits cleanly on SIGINT/SIGTERM or a ``shutdown``
on the control channel. A bad option, parameter file or a port that cannot be bound ends with
one message and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from excavator_common import realtime, stall_probe, supervisor_watch
from excavator_common.node_args import split_ros_args
from plc_bridge.config import MODELS, load_config
from plc_bridge.errors import BridgeConfigError
from plc_bridge.parameters import PLANT_MODES
from plc_bridge.virtual_plc.control import ControlServer
from plc_bridge.virtual_plc.server import VirtualPlc


def _port(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r:.40} is not an integer") from None
        if not low <= value <= 65535:
            raise argparse.ArgumentTypeError(
                f"{value:.6g} is outside {low}..65535 (0 = any free port)")
        return value
    return parse


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r:.40} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="virtual_plc", description=__doc__.splitlines()[0],
        epilog="It is no ROS node: ROS arguments (--ros-args ... [--], what ros2 launch and "
               "ros2 run add) are accepted and ignored; options after the closing -- count. "
               "The PLC's data blocks and watchdog: docs/plc_bridge.md.")
    p.add_argument("--host", default="127.0.0.1", help="S7 listen address (default 127.0.0.1)")
    p.add_argument("--port", type=_port(0), default=1102,
                   help="S7 (ISO-on-TCP) port; 102 needs root, default 1102")
    p.add_argument("--model", choices=MODELS, default=None,
                   help="vehicle model (default: 'model' of the config)")
    p.add_argument("--config", default=None, help="the bridge's parameter file: data blocks, "
                   "model, vehicle limits (default config/plc.yaml)")
    p.add_argument("--vehicle", action="append", default=[], metavar="KEY=VALUE",
                   help="a vehicle parameter of the model over the config's (repeatable), e.g. "
                        "wheelbase_m=2.6: the limits of the machine it drives (the launch's "
                        "machine:= sets the bridge's and these alike)")
    p.add_argument("--plant-config", dest="plant_config", default=None,
                   help="the virtual PLC's plant and watchdog (default config/virtual_plc.yaml)")
    p.add_argument("--plant-mode", dest="plant_mode", choices=PLANT_MODES, default=None,
                   help="internal: the built-in plant; external: hardware in the loop, the "
                        "simulated machine is the plant over the plant_in / plant_out DBs "
                        "(default: plant_mode of the plant config)")
    p.add_argument("--rt-priority", type=int, default=0,
                   help="SCHED_FIFO priority 1..99 for the whole process (Linux, needs "
                        "CAP_SYS_NICE); 0 = normal scheduling (default)")
    p.add_argument("--log-size", type=_count(100, 10_000_000), default=50_000, metavar="N",
                   help="control-DB writes and monitor-DB reads kept for the control "
                        "channel's writes/reads (the newest N of each; default 50000, ~5 min "
                        "of a 100 Hz bridge); a long run fetching them often keeps it small")
    p.add_argument("--opcua-port", dest="opcua_port", type=_port(-1), default=-1,
                   help="also serve the blocks over OPC UA on this port (S7-1500 node ids, "
                        "secure endpoints only; 0 = a free port, -1 = off, the default)")
    p.add_argument("--opcua-pki", dest="opcua_pki", default="",
                   help="the OPC UA server's PKI folder (own/, trusted/, rejected/; made by "
                        "excavator-hil opcua-certs --server; default "
                        "~/.local/share/excavator_hil/pki/virtual_plc)")
    p.add_argument("--opcua-users", dest="opcua_users", default=None, metavar="FILE",
                   help="the users that may log in: 'name:scrypt$...' lines, mode 0600, "
                        "written by excavator-hil opcua-user NAME --users-file FILE")
    p.add_argument("--opcua-user-certs", dest="opcua_user_certs", default=None,
                   metavar="DIR", help="X.509 user certificates that may log in: <name>.der "
                   "files (the file name is the user)")
    p.add_argument("--opcua-allow-anonymous", dest="opcua_anonymous", action="store_true",
                   help="accept anonymous logins (off by default, as on a hardened CPU)")
    p.add_argument("--opcua-allow-insecure", dest="opcua_insecure", action="store_true",
                   help="also offer security policy None (a lab only; logged as a warning)")
    p.add_argument("--opcua-min-publishing-ms", dest="opcua_min_pub", type=float,
                   default=100.0, help="minimum publishing interval of subscriptions [ms] "
                   "(a CPU's 'Minimum publishing interval'; default 100)")
    p.add_argument("--opcua-namespace-shift", dest="opcua_shift", type=_count(0, 100),
                   default=0, help="namespaces registered before the Siemens one (0: it is "
                   "at index 3, as on a CPU)")
    p.add_argument("--opcua-stop-writes", dest="opcua_stop_writes", default="accept",
                   choices=("accept", "bad"), help="what an OPC UA write gets while the CPU is "
                   "in STOP: 'accept' (Good, the value lands, no scan takes it: what the "
                   "S7-1500 manual describes; the default) or 'bad' (BadOutOfService)")
    p.add_argument("--control-port", type=_port(-1), default=0,
                   help="loopback JSON control channel port for fault injection (0 = free port,"
                        " -1 = off)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # started by ros2 launch / ros2 run: the ROS arguments are not ours
    args = build_parser().parse_args(split_ros_args(argv)[0])
    try:
        overrides: dict[str, object] = {"model": args.model}
        if args.vehicle:
            model = args.model or load_config(args.config).model
            for item in args.vehicle:
                key, sep, value = item.partition("=")
                try:
                    number = float(value)
                except ValueError:
                    number = math.nan
                if not sep or not key or not math.isfinite(number):
                    raise BridgeConfigError(f"--vehicle {item!r}: give KEY=VALUE with a finite "
                                            f"number, e.g. wheelbase_m=2.6 (vehicle.{model}.*)")
                overrides[f"vehicle.{model}.{key}"] = number
        config = load_config(args.config, overrides, args.plant_config)
    except BridgeConfigError as e:
        print(f"virtual_plc: {e}", file=sys.stderr)
        return 2
    if args.plant_mode is not None:
        config = dataclasses.replace(config, virtual_plc=dataclasses.replace(
            config.virtual_plc, plant_mode=args.plant_mode))
    if args.rt_priority > 0:
        try:   # before any thread starts: the server and plant threads inherit it
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.rt_priority))
        except (OSError, AttributeError) as e:
            print(f"virtual_plc: --rt-priority {args.rt_priority} not applied: {e}",
                  file=sys.stderr)
    stall_probe.start_from_environment("virtual_plc")
    supervisor_watch.end_with_supervisor()
    done = threading.Event()
    plc = VirtualPlc(config, args.host, args.port, write_log_size=args.log_size)
    try:
        plc.start()
    except Exception as e:  # noqa: BLE001 - e.g. port in use, address not local: one message
        print(f"virtual_plc: cannot serve S7 on {args.host}:{args.port}: {e}; choose another "
              f"--port (0 = any free port) or --host", file=sys.stderr)
        return 2
    # start-up objects (modules, config) out of the collector's reach: a full collection over
    # them takes 10-20 ms, long enough to hold up the bridge's S7 request past its 10 ms cycle
    gc.freeze()
    # a request thread waits for the GIL at most 0.5 ms behind the scan or the control channel
    # (CPython's default 5 ms, twice a bridge cycle, showed as 13 ms cycles in the demo)
    realtime.short_gil_slices()
    control = None
    if args.control_port >= 0:
        try:
            control = ControlServer(plc, args.control_port, on_shutdown=done.set)
        except OSError as e:
            plc.stop()
            print(f"virtual_plc: cannot open the control channel on 127.0.0.1:"
                  f"{args.control_port}: {e}; choose another --control-port (0 = any free "
                  f"port, -1 = off)", file=sys.stderr)
            return 2
        control.start()
    # after the control channel: asyncua's address space takes seconds to build on a loaded
    # host; a client that comes early is refused and retries
    opcua = None
    if args.opcua_port >= 0:
        from plc_bridge.opcua_pki import Pki
        from plc_bridge.virtual_plc.opcua_server import OpcUaServer
        from plc_bridge.virtual_plc.users import read_users

        try:
            users = read_users(args.opcua_users) if args.opcua_users else {}
            pki = Pki.of(args.opcua_pki, "virtual_plc")
            opcua = OpcUaServer(plc, host=args.host, port=args.opcua_port, pki=pki,
                                users=users, allow_anonymous=args.opcua_anonymous,
                                allow_insecure=args.opcua_insecure,
                                min_publishing_interval_ms=args.opcua_min_pub,
                                namespace_shift=args.opcua_shift,
                                stop_writes=args.opcua_stop_writes,
                                user_certs={f.stem: f.read_bytes() for f in
                                            sorted(Path(args.opcua_user_certs).glob("*.der"))}
                                if args.opcua_user_certs else None)
            opcua.start()
            if control:
                control.opcua = opcua
            gc.freeze()   # its address space too
        except Exception as e:  # noqa: BLE001 - no key, port in use: one message
            if control:
                control.close()
            plc.stop()
            print(f"virtual_plc: cannot serve OPC UA on {args.host}:{args.opcua_port}: {e}",
                  file=sys.stderr)
            return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    hil = (f" plant_in_db={config.plant_in_db} plant_out_db={config.plant_out_db}"
           if plc.external else "")
    print(f"VIRTUAL_PLC READY port={plc.port} control_port={control.port if control else -1} "
          f"model={config.model} control_db={config.control_db} monitor_db={config.monitor_db} "
          f"plant_mode={config.virtual_plc.plant_mode}{hil}"
          f"{f' opcua_port={opcua.port}' if opcua else ''}", flush=True)
    while not done.wait(0.2):
        pass
    if control:
        control.close()
    if opcua:
        opcua.stop()
    plc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
