"""The virtual PLC's control channel: JSON lines over a loopback TCP port.

Tests and tools in another process inspect the virtual PLC and inject faults through it. One
request per line, one response per line::

    {"cmd": "status"}                          -> plant, faults, watchdog, last control values
    {"cmd": "faults", "fault": true, ...}      -> set any of fault estop freeze_alive ready auto
                                                  stall nan_feedback freeze_plant_out cpu_stop;
                                                  returns the flags
    {"cmd": "link", "up": false}               -> stop (or restart) the S7 server
    {"cmd": "opcua", "up": false}              -> stop (or start again) the OPC UA server only,
                                                  the process and its S7 server staying up;
                                                  returns opcua_up, its open subscriptions
                                                  and stop_writes ({"cmd": "opcua"}: only
                                                  report them; "stop_writes": "bad" or
                                                  "accept" sets what a write to a CPU in
                                                  STOP gets)
    {"cmd": "writes", "since": 12.5}           -> control-DB writes with monotonic t >= since,
                                                  each with the guard's verdict ("refused")
    {"cmd": "reads", "since": 12.5}            -> monitor-DB reads [t, alive] since then
    {"cmd": "plant_writes", "since": 12.5}     -> HIL: plant_in writes (decoded, with t)
    {"cmd": "plant_reads", "since": 12.5}      -> HIL: plant_out reads [t, seq] since then
    {"cmd": "plant_out_writes", "since": 12.5} -> HIL: the PLC's plant_out writes [t, seq]
    {"cmd": "modes", "since": 12.5}            -> HIL: the program's mode changes [t, mode],
                                                  the one in force at since first
    {"cmd": "shutdown"}                        -> the CLI exits

Responses: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``. The channel
binds to 127.0.0.1 only: it is a test hook, not a PLC interface.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from plc_bridge.virtual_plc.server import VirtualPlc

if TYPE_CHECKING:   # the OPC UA server (asyncua) is imported only when one is served
    from plc_bridge.virtual_plc.opcua_server import OpcUaServer


class ControlServer:
    """Serves the control channel of ``plc`` on 127.0.0.1:``port`` (0 = any free port)."""

    def __init__(self, plc: VirtualPlc, port: int = 0, on_shutdown: Callable[[], None] | None
                 = None):
        self.plc = plc
        self.opcua: OpcUaServer | None = None   # set by the CLI once its OPC UA server runs
        self._on_shutdown = on_shutdown
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for line in self.rfile:
                    if not line.strip():
                        continue
                    reply = outer.dispatch(line)
                    self.wfile.write(json.dumps(reply).encode() + b"\n")
                    self.wfile.flush()

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="virtual-plc-control")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def dispatch(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
            cmd = req.pop("cmd")
            if cmd == "status":
                result: Any = self.plc.status()
            elif cmd == "faults":
                result = self.plc.set_faults(**req)
            elif cmd == "link":
                if req.get("up", True):
                    self.plc.link_up()
                else:
                    self.plc.link_down()
                result = {"link_up": self.plc.status()["link_up"],
                          "started_at": self.plc.started_at}
            elif cmd == "opcua":
                if self.opcua is None:
                    raise ValueError("this virtual PLC serves no OPC UA (start it with "
                                     "--opcua-port)")
                if "stop_writes" in req:
                    from plc_bridge.virtual_plc.opcua_server import STOP_WRITES
                    if req["stop_writes"] not in STOP_WRITES:
                        raise ValueError(f"stop_writes {req['stop_writes']!r}: one of "
                                         f"{', '.join(STOP_WRITES)}")
                    self.opcua.stop_writes = str(req["stop_writes"])
                if "up" in req:
                    self.opcua.restart(bool(req["up"]))
                result = {"opcua_up": self.opcua.running,
                          "subscriptions": self.opcua.subscriptions(),
                          "stop_writes": self.opcua.stop_writes}
            elif cmd == "writes":
                result = self.plc.writes(float(req.get("since", 0.0)))
            elif cmd == "reads":
                result = self.plc.reads(float(req.get("since", 0.0)))
            elif cmd == "plant_writes":
                result = self.plc.plant_writes(float(req.get("since", 0.0)))
            elif cmd == "plant_reads":
                result = self.plc.plant_reads(float(req.get("since", 0.0)))
            elif cmd == "plant_out_writes":
                result = self.plc.plant_out_writes(float(req.get("since", 0.0)))
            elif cmd == "modes":
                result = self.plc.modes(float(req.get("since", 0.0)))
            elif cmd == "shutdown":
                result = "bye"
                if self._on_shutdown:
                    self._on_shutdown()
            else:
                raise ValueError(f"unknown cmd {cmd!r}; use status faults link opcua writes reads "
                                 f"plant_writes plant_reads plant_out_writes modes shutdown")
            return {"ok": True, "result": result}
        except Exception as e:  # noqa: BLE001 - any failure goes back to the caller
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}


class ControlClient:
    """Talks to a ``ControlServer`` (one persistent connection); ``timeout`` [s] bounds a
    reply unless a call gives its own."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0):
        self._timeout_s = timeout
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._file = self._sock.makefile("rb")

    def call(self, cmd: str, reply_timeout_s: float | None = None, **args: Any) -> Any:
        self._sock.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
        self._sock.settimeout(reply_timeout_s or self._timeout_s)
        try:
            reply = json.loads(self._file.readline())
        finally:
            self._sock.settimeout(self._timeout_s)
        if not reply.get("ok"):
            raise RuntimeError(f"virtual PLC {cmd}: {reply.get('error')}")
        return reply["result"]

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.call("status")   # the server's JSON reply
        return result

    def faults(self, **flags: bool) -> dict[str, bool]:
        result: dict[str, bool] = self.call("faults", **flags)   # the server's JSON reply
        return result

    def link(self, up: bool) -> dict[str, Any]:
        result: dict[str, Any] = self.call("link", up=up)   # the server's JSON reply
        return result

    def opcua(self, up: bool | None = None, stop_writes: str | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {} if up is None else {"up": up}
        if stop_writes is not None:
            args["stop_writes"] = stop_writes
        reply_timeout_s = None
        if up is not None:   # the reply waits for the server's stop or start, however long
            from plc_bridge.virtual_plc.opcua_server import START_TIMEOUT_S, STOP_TIMEOUT_S

            reply_timeout_s = max(START_TIMEOUT_S, STOP_TIMEOUT_S) + self._timeout_s
        result: dict[str, Any] = self.call(   # the server's JSON reply
            "opcua", reply_timeout_s=reply_timeout_s, **args)
        return result

    def writes(self, since: float = 0.0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("writes", since=since)   # the server's JSON reply
        return result

    def reads(self, since: float = 0.0) -> list[list[float]]:
        result: list[list[float]] = self.call("reads", since=since)   # the server's JSON reply
        return result

    def plant_writes(self, since: float = 0.0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("plant_writes", since=since)   # JSON reply
        return result

    def plant_reads(self, since: float = 0.0) -> list[list[float]]:
        result: list[list[float]] = self.call("plant_reads", since=since)   # JSON reply
        return result

    def plant_out_writes(self, since: float = 0.0) -> list[list[float]]:
        result: list[list[float]] = self.call("plant_out_writes", since=since)   # JSON reply
        return result

    def modes(self, since: float = 0.0) -> list[tuple[float, str]]:
        result = self.call("modes", since=since)   # JSON reply: [[t, mode], ...]
        return [(float(t), str(m)) for t, m in result]

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass
