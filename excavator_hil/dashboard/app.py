"""``excavator-hil dashboard`` / ``ros2 run excavator_hil dashboard``: the browser dashboard.

    excavator-hil dashboard [--port 8080] [--redis-url redis://127.0.0.1:6379/0]
    excavator-hil dashboard --host 0.0.0.0 --token "$(openssl rand -hex 16)"
    ros2 run excavator_hil dashboard --ros-args -r __ns:=/exc1
    excavator-hil dashboard --machine exc2 --redis-url redis://127.0.0.1:6379/1   # a fleet
    excavator-hil dashboard --machine-redis exc1=redis://127.0.0.1:6379/0 \
        --machine-redis exc2=redis://127.0.0.1:6379/1          # each machine's bridge

Binds 127.0.0.1 by default. Any other interface needs ``--token`` (or the environment variable
``EXCAVATOR_HIL_DASHBOARD_TOKEN``): the page is then only served to ``/?token=...``. Prints
``DASHBOARD READY <url>`` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

from excavator_common import realtime
from excavator_common.node_args import ArgumentParser, split_ros_args

TOKEN_ENV = "EXCAVATOR_HIL_DASHBOARD_TOKEN"
MIN_TOKEN_CHARS = 16


class InterruptedStartUp(logging.Filter):
    """Drops uvicorn's report of a lifespan cancelled by a Ctrl-C during start-up.

    A SIGINT after uvicorn began serving but before the start-up hook replaced its handlers is
    held by uvicorn and raised again once it has stopped: asyncio's own SIGINT handler then
    cancels the lifespan task, and uvicorn logs "Exception in 'lifespan' protocol" with the
    CancelledError's traceback (seen on a loaded CI host at 3 s into the start-up). When the
    cancel reaches Starlette's lifespan instead, Starlette sends the traceback as the text of
    ``lifespan.startup.failed`` / ``lifespan.shutdown.failed`` and uvicorn logs that text, with no
    exception attached (a calm CI host at 3 s). The stop is the one asked for, not an error;
    any other exception is still logged."""

    ENDS = ("asyncio.exceptions.CancelledError", "CancelledError", "KeyboardInterrupt")

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            return False
        text = record.getMessage().rstrip()
        return not (text.startswith("Traceback") and text.splitlines()[-1].strip() in self.ENDS)


def build_parser(prog: str = "excavator-hil dashboard") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog,
                       description="browser dashboard: targets, machine, soil, PLC bridge; "
                                   "docs/dashboard.md",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=__doc__.split("\n\n", 1)[1] + "\nROS arguments (the machine's "
                       "namespace, remaps, --log-level) follow --ros-args,\nup to an optional "
                       "--:\n  " + prog + " --ros-args -r __ns:=/exc1 --log-level warn\n")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1; any other needs --token)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p.add_argument("--token", default=os.environ.get(TOKEN_ENV, ""),
                   help=f"access token (>= {MIN_TOKEN_CHARS} characters; default ${TOKEN_ENV})")
    p.add_argument("--redis-url", default=None,
                   help="Redis of the PLC bridge (default: redis_url of --plc-config)")
    p.add_argument("--plc-config", default=None,
                   help="bridge parameter file: model, envelope, keys (default config/plc.yaml)")
    p.add_argument("--model", default=None, choices=("skid_steer", "ackermann", "4wd4ws"),
                   help="vehicle model of the bridge (default: model of --plc-config)")
    p.add_argument("--soil-config", default=None,
                   help="soil_node parameter file: the terrain grid (default config/soil.yaml)")
    p.add_argument("--geometry", default=None,
                   help="excavator geometry YAML (default config/excavator.yaml)")
    p.add_argument("--machine", default="",
                   help="the machine of a fleet served at start, by namespace (exc2 or /exc2; "
                        "default: the dashboard's own namespace); the page's selector lists "
                        "the machines on the graph and switches between them")
    p.add_argument("--redis-machine", default="",
                   help="the machine whose PLC bridge --redis-url reaches (default: --machine, "
                        "or the own namespace): Drive works while that machine is chosen")
    p.add_argument("--machine-redis", action="append", default=[], metavar="NS=URL",
                   help="a fleet: machine NS's bridge is on Redis URL (repeat per machine; "
                        "replaces --redis-url/--redis-machine): the PLC panel and Drive follow "
                        "the machine chosen")
    p.add_argument("--refresh-hz", type=float, default=10.0,
                   help="machine view refresh per browser tab [Hz] (1..30, default 10)")
    p.add_argument("--redis-period", type=float, default=0.2,
                   help="period of the dashboard's MGET of the bridge keys [s] (0.05..5)")
    p.add_argument("--nice", type=int, default=10,
                   help="niceness of the dashboard's threads (0..19, default 10; Fast DDS's "
                        "own excepted, so that its reception never stands): below the "
                        "control path, which runs at 0, so a busy page yields the CPU to it")
    return p


def _fail(message: str) -> int:
    print(f"excavator-hil dashboard: error: {message}", file=sys.stderr, flush=True)
    return 2


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    # the `dashboard` executable (ros2 run) or `excavator-hil dashboard` (argv handed over)
    prog = "dashboard" if argv is None else "excavator-hil dashboard"
    argv = list(sys.argv[1:] if argv is None else argv)
    own, ros_args = split_ros_args(argv)
    args = build_parser(prog).parse_args(own)

    if not 1 <= args.port <= 65535:
        return _fail(f"--port {args.port} outside 1..65535")
    if not 1.0 <= args.refresh_hz <= 30.0:
        return _fail(f"--refresh-hz {args.refresh_hz:.6g} outside 1..30 Hz")
    if not 0.05 <= args.redis_period <= 5.0:
        return _fail(f"--redis-period {args.redis_period:.6g} outside 0.05..5 s")
    if not 0 <= args.nice <= 19:
        return _fail(f"--nice {args.nice} outside 0..19 (0: as the control path; 19: lowest)")
    from excavator_common.machines import machine_namespace

    for option, value in (("--machine", args.machine), ("--redis-machine", args.redis_machine)):
        if value:
            try:
                machine_namespace(value)
            except ValueError as exc:
                return _fail(f"{option}: {exc}")
    machine_redis: dict[str, str] = {}
    for entry in args.machine_redis:
        name, sep, redis_url = entry.partition("=")
        if not sep or not redis_url.strip():
            return _fail(f"--machine-redis {entry!r}: give NS=URL, e.g. "
                         "exc2=redis://127.0.0.1:6379/1")
        try:
            ns = machine_namespace(name)
        except ValueError as exc:
            return _fail(f"--machine-redis: {exc}")
        if ns in machine_redis:
            return _fail(f"--machine-redis: {ns} is given twice; one bridge per machine")
        machine_redis[ns] = redis_url.strip()
    args.machine_redis_map = machine_redis
    if not _is_loopback(args.host) and not args.token:
        return _fail(f"--host {args.host} is not a loopback address: set --token (at least "
                     f"{MIN_TOKEN_CHARS} characters, or ${TOKEN_ENV}) so only holders of "
                     "the token can drive the machine, or keep the default 127.0.0.1")
    if args.token and len(args.token) < MIN_TOKEN_CHARS:
        return _fail(f"--token has {len(args.token)} characters, fewer than "
                     f"{MIN_TOKEN_CHARS}: use e.g. `openssl rand -hex 16`")
    try:
        with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((args.host, args.port))
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port} ({exc.strerror}): pick another "
                     "--port or stop what uses it")

    from excavator_common.errors import ConfigurationError

    try:   # --nice, or the background's variable where it asks for more (a launch's group)
        args.nice = max(args.nice, realtime.background_nice_from_environment())
    except ConfigurationError as exc:
        return _fail(str(exc))
    from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
    from plc_bridge.config import load_config

    try:
        geometry = (ExcavatorGeometry.from_yaml(args.geometry) if args.geometry
                    else default_geometry())
        overrides = {"model": args.model, "redis_url": args.redis_url}
        plc = load_config(args.plc_config, overrides)
        from excavator_sim.soil.config import load_soil_config

        terrain = load_soil_config(args.soil_config).terrain
    except (ConfigurationError, OSError, ValueError) as exc:
        return _fail(str(exc))
    return serve(args, geometry, plc, terrain, ros_args)


def serve(args: argparse.Namespace, geometry: object, plc: object, terrain: object,
          ros_args: list[str]) -> int:
    # NiceGUI takes a PYTEST_CURRENT_TEST in the environment for its own screen tests (it then
    # ignores host/port): a dashboard started from a test run is a normal server.
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    from excavator_common.heap import map_large_blocks

    # the terrain grid (0.8 MB a message) mapped and unmapped each time: in the heap it grew
    # the process by a grid now and then (+8 MiB in the soak's two minutes; excavator_common.heap)
    map_large_blocks()
    from nicegui import app, ui

    from excavator_hil.dashboard.adapter import RedisLink, RosLink
    from excavator_hil.dashboard.core import (
        BridgeWatch,
        DriveLimits,
        SideView,
        TargetChecker,
        TerrainGrid,
    )
    from excavator_hil.dashboard.web import Dashboard, TokenGate, build_page

    checker = TargetChecker(geometry)  # type: ignore[arg-type]
    limits = DriveLimits.for_model(plc.model, plc.max_longitudinal_m_s,  # type: ignore[attr-defined]
                                   plc.max_lateral_m_s, plc.max_angular_rad_s)  # type: ignore[attr-defined]
    t = terrain
    grid = TerrainGrid.from_cells(t.x0, t.y0, t.cell_xy_m, t.nx, t.ny)  # type: ignore[attr-defined]
    ros = RosLink(checker, grid, ros_args, machine=args.machine)
    # its participant exists: every thread of the process, also one started already (a
    # supervisor watch), at least --nice, all but Fast DDS's (a shared-memory listener that
    # stands 1 s is taken for dead); the threads started later (web, Redis) inherit it.
    # Raising the niceness needs no privilege; a nicer thread keeps its own.
    realtime.apply_background_nice(args.nice)
    from excavator_common.machines import machine_namespace

    # the bridges: each fleet machine's (--machine-redis), or the one of --redis-url
    urls: dict[str, str] = args.machine_redis_map or {
        machine_namespace(args.redis_machine) if args.redis_machine else ros.machine:
        plc.redis_url}  # type: ignore[attr-defined]
    bridges = {m: RedisLink(url, BridgeWatch(plc.wheels, plc.steering),  # type: ignore[attr-defined]
                            limits, plc.notify_channel,  # type: ignore[attr-defined]
                            period_s=args.redis_period) for m, url in urls.items()}
    bridge_machine = ros.machine if ros.machine in bridges else next(iter(bridges))
    bridge = bridges[bridge_machine]
    dash = Dashboard(checker, SideView(geometry), ros, bridge,  # type: ignore[arg-type]
                     plc.model, refresh_hz=args.refresh_hz,  # type: ignore[attr-defined]
                     bridge_machine=bridge_machine, bridges=bridges)

    if args.token:
        app.add_middleware(TokenGate, token=args.token)
    shown = "localhost" if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{shown}:{args.port}/" + (f"?token={args.token}" if args.token else "")

    @ui.page("/")
    def _index() -> None:
        build_page(dash)

    def _on_signal(_signum: int, _frame: object) -> None:
        # first SIGINT/SIGTERM: a graceful stop; ros2 launch's second SIGINT is ignored
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        app.shutdown()

    def _ready() -> None:
        # uvicorn's own handlers re-raise the signal after its shutdown (a traceback on exit):
        # replaced here, inside the running server
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
        # the start-up hook runs before uvicorn listens: announce once a connection succeeds
        probe_host = "127.0.0.1" if args.host in ("0.0.0.0", "localhost") else (
            "::1" if args.host == "::" else args.host)

        def announce() -> None:
            for _ in range(600):
                try:
                    socket.create_connection((probe_host, args.port), timeout=1.0).close()
                except OSError:
                    time.sleep(0.05)
                    continue
                print(f"DASHBOARD READY {url}", flush=True)
                return
            print(f"excavator-hil dashboard: not listening on {args.host}:{args.port} after 30 s",
                  file=sys.stderr, flush=True)

        threading.Thread(target=announce, daemon=True, name="dashboard-ready").start()

    closed: list[bool] = []

    def _shutdown() -> None:
        # ros2 launch sends SIGINT twice on Ctrl-C: the second must not interrupt the cleanup
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not closed:
            closed.append(True)
            for link in bridges.values():
                link.close(stop=True)
            ros.close()
            # what the subscriptions cost: messages in, and how many of them were decoded
            print(f"dashboard: messages received {ros.received}, decoded {ros.decoded}",
                  flush=True)

    app.on_startup(_ready)
    app.on_shutdown(_shutdown)
    # Until _ready has put its own handlers in place, a SIGINT raises KeyboardInterrupt here
    # (caught below: the links closed by `finally`), not the quiet exit of the start-up
    # (excavator_hil.node_entry), which would skip the cleanup once links are open.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.getLogger("uvicorn.error").addFilter(InterruptedStartUp())
    try:
        ui.run(host=args.host, port=args.port, title="excavator_hil dashboard", reload=False,
               show=False, show_welcome_message=False, favicon="🚜",
               uvicorn_logging_level="warning", binding_refresh_interval=0.1,
               reconnect_timeout=10.0)
    except KeyboardInterrupt:
        pass   # uvicorn re-raises the SIGINT it has already handled (graceful shutdown done)
    finally:
        _shutdown()
    return 0


if __name__ == "__main__":
    # main() has closed the links: no interpreter teardown (excavator_common.process_exit)
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
