"""``plc_bridge_core``: run the Redis <-> S7 bridge without ROS (own process).

    python -m plc_bridge.bridge.cli --redis-url redis://127.0.0.1:6379/0 --plc-port 1102

Every option overrides the parameter of the same name in the config file (``--cycle-hz``:
``cycle_hz``, ``--plc-timeout``: ``plc_timeout_s``; units as in docs/configuration.md).
SIGINT/SIGTERM stop the loop; its last act writes a stop to the PLC. Prints
``PLC_BRIDGE READY`` when running.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from excavator_common.node_args import split_ros_args
from plc_bridge.bridge.core import BridgeCore
from plc_bridge.config import MODELS, load_config
from plc_bridge.errors import BridgeConfigError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="plc_bridge_core", description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="parameter file (default config/plc.yaml)")
    p.add_argument("--redis-url", dest="redis_url", default=None)
    p.add_argument("--plc-host", dest="plc_host", default=None)
    p.add_argument("--plc-port", dest="plc_port", type=int, default=None)
    p.add_argument("--rack", type=int, default=None)
    p.add_argument("--slot", type=int, default=None)
    p.add_argument("--model", choices=MODELS, default=None)
    p.add_argument("--cycle-hz", dest="cycle_hz", type=float, default=None)
    p.add_argument("--heartbeat-timeout", dest="heartbeat_timeout_s", type=float, default=None,
                   help="[s] (parameter heartbeat_timeout_s)")
    p.add_argument("--redis-timeout", dest="redis_timeout_s", type=float, default=None,
                   help="[s] socket timeout of each Redis round trip (parameter redis_timeout_s)")
    p.add_argument("--redis-connect-timeout", dest="redis_connect_timeout_s", type=float,
                   default=None, help="[s] TCP + TLS + AUTH handshake of a (re)connect")
    p.add_argument("--plc-timeout", dest="plc_timeout_s", type=float, default=None,
                   help="[s] socket timeout of each S7 request (parameter plc_timeout_s)")
    p.add_argument("--monitor-ttl", dest="monitor_ttl_s", type=float, default=None,
                   help="[s] expiry of the liveness keys (parameter monitor_ttl_s)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # started by ros2 run: the ROS arguments are not ours
    args = vars(build_parser().parse_args(split_ros_args(argv)[0]))
    path = args.pop("config")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        config = load_config(path, args)
        core = BridgeCore(config)
    except BridgeConfigError as e:
        print(f"plc_bridge: {e}", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    core.start()
    print(f"PLC_BRIDGE READY model={config.model} plc={config.plc_host}:{config.plc_port} "
          f"cycle_hz={config.cycle_hz:g} redis_timeout_s={config.redis_timeout_s:g} "
          f"plc_timeout_s={config.plc_timeout_s:g}", flush=True)
    while not done.wait(0.2):
        if not core.loop_alive:   # the loop failed (it wrote a stop first)
            print(f"plc_bridge: loop ended: {core.failed}", file=sys.stderr)
            return 1
    core.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
