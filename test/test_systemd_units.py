"""The systemd units of deploy/systemd/ for a HIL host, checked without systemd running.

- ``systemd-analyze verify`` accepts every unit (skipped where systemd-analyze is missing);
- every ExecStart, with the example environment file's values, names an executable of this
  package (a console script) or an existing program, and its arguments parse as the program
  parses them (the bridge's parameters through its own loader, the launch arguments through the
  launch files' table, redis-server by starting it);
- the units apply the demo's real-time set-up (fair slice, SCHED_FIFO within LimitRTPRIO=,
  Nice=/CPUWeight= for what is only watched), restart with limits, stop with SIGINT, and are
  ordered; the files are installed (setup.py) and documented (docs/plc_bridge.md);
- the redis-server, virtual PLC and bridge units' commands, run as systemd would run them (bash,
  the environment file, no systemd), bring the bridge up against that Redis and PLC with the
  fair slice on every thread; SIGINT (their KillSignal=) ends each with code 0.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers import EVENT_WAIT_S, free_port, redis_server_binary, wait_for
from test_launch_files import console_scripts, installed_patterns

from excavator_common import hang_watchdog, realtime
from excavator_hil import launch_support

REPO = Path(__file__).resolve().parents[1]
UNITS_DIR = REPO / "deploy" / "systemd"
ENV_FILE = UNITS_DIR / "excavator_hil.env"
UNITS = sorted(UNITS_DIR.glob("*.service"))
TARGET = "excavator-hil.target"
# units whose process is a ROS node or ros2 launch: stopped like a terminal's Ctrl-C
ROS_UNITS = {"excavator-hil-bridge.service", "excavator-hil-sim.service",
             "excavator-hil-dashboard.service", "excavator-hil-virtual-plc.service"}
SETUP_PREFIX = 'source "${EXCAVATOR_HIL_SETUP:?set it in /etc/excavator_hil/excavator_hil.env}"'


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> values (a key may repeat) of a unit file."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def read_env(path: Path = ENV_FILE) -> dict[str, str]:
    """The variables of an EnvironmentFile= (VAR=value lines, # comments)."""
    env = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: {line!r} is not VAR=value"
            env[key.strip()] = value.strip()
    return env


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}: {values}"
    return values[0]


def bash_script(unit: dict[str, dict[str, list[str]]]) -> str:
    """The script of ``ExecStart=/bin/bash -c '...'`` as bash gets it (systemd's ``$$`` is a
    ``$``; systemd's quoting of these lines is the shell's)."""
    argv = shlex.split(one(unit, "Service", "ExecStart").replace("$$", "$"))
    assert argv[:2] == ["/bin/bash", "-c"] and len(argv) == 3, argv
    return argv[2]


def command(unit: dict[str, dict[str, list[str]]], env: dict[str, str]) -> list[str]:
    """What the unit's bash execs, with the environment file's variables expanded as bash
    expands them (quoted: one word; unquoted: split)."""
    script = bash_script(unit)
    setup, sep, cmd = script.partition(" && exec ")
    assert sep and setup == SETUP_PREFIX, script

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        assert name in env, f"the unit uses ${{{name}}}, which the environment file does not set"
        return env[name]

    return shlex.split(re.sub(r"\$\{(\w+)(?::\?[^}]*)?\}", value, cmd))


def unit_env(tmp: Path, **overrides: str) -> dict[str, str]:
    """The example environment file's values, with paths that exist here."""
    return {**read_env(), "PLC_PARAMS": str(REPO / "config" / "plc.yaml"),
            "STATE_DIRECTORY": str(tmp), **overrides}


def test_there_are_the_units_of_a_hil_rig() -> None:
    assert {p.name for p in UNITS} == {
        "excavator-hil-redis.service", "excavator-hil-virtual-plc.service",
        "excavator-hil-bridge.service", "excavator-hil-sim.service",
        "excavator-hil-dashboard.service"}
    assert (UNITS_DIR / TARGET).is_file() and ENV_FILE.is_file()


def test_systemd_analyze_verify_accepts_every_unit(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here (Debian: apt install systemd)")
    out = subprocess.run([tool, "verify", *map(str, UNITS), str(UNITS_DIR / TARGET)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "" and out.stderr.strip() == "", (
        out.stdout + out.stderr)


def test_systemd_analyze_verify_finds_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a misspelt key and a bad Restart= value are reported."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here (Debian: apt install systemd)")
    text = (UNITS_DIR / "excavator-hil-bridge.service").read_text()
    broken = tmp_path / "excavator-hil-bridge.service"
    broken.write_text(text.replace("Restart=on-failure", "Restart=sometimes")
                      .replace("KillSignal=", "KilSignal="))
    out = subprocess.run([tool, "verify", str(broken)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert "sometimes" in out.stderr and "KilSignal" in out.stderr, out.stderr


def test_every_variable_is_set_and_the_env_file_only_sets_what_is_used() -> None:
    env = read_env()
    used = set()
    for path in UNITS:
        used |= set(re.findall(r"\$\{(\w+)", bash_script(read_unit(path))))
    system = {"STATE_DIRECTORY"}   # set by systemd (StateDirectory=)
    assert used - set(env) - system == set()
    # the ROS environment of every node, and what the venv install needs, is there too
    process_env = {"ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "RMW_IMPLEMENTATION",
                   hang_watchdog.ENV}
    assert process_env <= set(env)
    assert set(env) - used - process_env == set()
    # the nodes take the watchdog's value (a value they refuse would stop every unit at start)
    assert hang_watchdog.timeout_from_environment(env) == 30.0
    assert "#AMENT_PREFIX_PATH=" in ENV_FILE.read_text()   # the venv alternative, documented


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_unit_restarts_with_limits_stops_cleanly_and_belongs_to_the_rig(path: Path) -> None:
    unit = read_unit(path)
    assert one(unit, "Unit", "PartOf") == TARGET
    assert one(unit, "Install", "WantedBy") == TARGET
    assert one(unit, "Service", "EnvironmentFile") == "/etc/excavator_hil/excavator_hil.env"
    assert one(unit, "Service", "Restart") in ("always", "on-failure")
    assert int(one(unit, "Unit", "StartLimitBurst")) >= 2
    assert int(one(unit, "Unit", "StartLimitIntervalSec")) > 0
    assert float(one(unit, "Service", "RestartSec")) > 0
    assert one(unit, "Service", "User") == "excavator-hil"
    if path.name in ROS_UNITS:
        assert one(unit, "Service", "KillSignal") == "SIGINT"   # the nodes' clean stop
    if path.name in ROS_UNITS - {"excavator-hil-sim.service"}:
        # exit code 2 is a refused configuration: restarting would only repeat it
        assert one(unit, "Service", "RestartPreventExitStatus") == "2"


def test_units_are_ordered_along_the_path_to_the_plc() -> None:
    bridge = read_unit(UNITS_DIR / "excavator-hil-bridge.service")
    after = one(bridge, "Unit", "After").split()
    assert {"excavator-hil-redis.service", "excavator-hil-virtual-plc.service",
            "network-online.target"} <= set(after)
    # the bridge's own fail-safe covers Redis and the PLC going away: ordering, no Requires=
    assert "Requires" not in bridge["Unit"] and "BindsTo" not in bridge["Unit"]
    sim = read_unit(UNITS_DIR / "excavator-hil-sim.service")
    assert "excavator-hil-bridge.service" in one(sim, "Unit", "After").split()
    assert one(sim, "Service", "KillMode") == "mixed"   # SIGINT to ros2 launch, which stops
    dash = read_unit(UNITS_DIR / "excavator-hil-dashboard.service")
    assert "excavator-hil-sim.service" in one(dash, "Unit", "After").split()


def test_units_apply_the_demos_real_time_set_up() -> None:
    env = read_env()
    rt = int(env["RT_PRIORITY"])
    lo, hi = realtime.FAIR_SLICE_MS_RANGE
    assert lo <= float(env["FAIR_SLICE_MS"]) <= hi
    assert float(env["FAIR_SLICE_MS"]) == launch_support.FAIR_SLICE_MS   # the demo's value
    for name in ("redis", "virtual-plc", "bridge"):   # the Redis -> PLC path: the fair slice
        unit = read_unit(UNITS_DIR / f"excavator-hil-{name}.service")
        cmd = command(unit, unit_env(Path("/tmp")))
        assert cmd[:4] == ["python3", "-m", "excavator_common.realtime", "--fair-slice-ms"]
    for name in ("virtual-plc", "bridge"):   # they switch to SCHED_FIFO themselves
        unit = read_unit(UNITS_DIR / f"excavator-hil-{name}.service")
        assert int(one(unit, "Service", "LimitRTPRIO")) >= rt, f"{name}: LimitRTPRIO < {rt}"
    redis = read_unit(UNITS_DIR / "excavator-hil-redis.service")   # the demo's chrt -f
    assert one(redis, "Service", "CPUSchedulingPolicy") == "fifo"
    assert int(one(redis, "Service", "CPUSchedulingPriority")) == rt
    dash = read_unit(UNITS_DIR / "excavator-hil-dashboard.service")   # only watched
    # its threads niced by itself (--nice), Fast DDS's spared: no Nice=, which nices them all
    assert not dash.get("Service", {}).get("Nice")
    assert f"--nice {launch_support.BACKGROUND_NICE} " in " ".join(
        dash["Service"]["ExecStart"])
    assert int(one(dash, "Service", "CPUWeight")) < 100   # below the default 100 of the others
    sim = read_unit(UNITS_DIR / "excavator-hil-sim.service")
    assert "realtime:=auto" in command(sim, unit_env(Path("/tmp")))


def _check_realtime_prefix(cmd: list[str]) -> list[str]:
    if cmd[:3] != ["python3", "-m", "excavator_common.realtime"]:
        return cmd
    try:
        _, inner = realtime.parse_command(cmd[3:])
    except SystemExit:
        raise AssertionError(f"excavator_common.realtime refuses {cmd[3:]}") from None
    return inner


def _ros_parameters(args: list[str]) -> tuple[str, dict[str, object], str]:
    """(params file, -p overrides typed as rcl types them, namespace) of ``--ros-args ...``."""
    from excavator_common.parameter_files import check_ros_arguments

    check_ros_arguments(args)
    params, overrides, ns = "", {}, ""
    it = iter(args)
    assert next(it) == "--ros-args"
    for arg in it:
        if arg == "--params-file":
            params = next(it)
        elif arg == "-p":
            name, _, value = next(it).partition(":=")
            overrides[name] = yaml.safe_load(value)
        elif arg == "-r":
            rule = next(it)
            assert rule.startswith("__ns:=/"), rule
            ns = rule.partition(":=")[2]
        else:
            raise AssertionError(f"unexpected ROS argument {arg!r}")
    return params, overrides, ns


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_exec_start_names_an_executable_and_its_arguments_parse(path: Path,
                                                                tmp_path: Path) -> None:
    unit = read_unit(path)
    env = unit_env(tmp_path, REDIS_PORT=str(free_port()))
    cmd = _check_realtime_prefix(command(unit, env))
    exe = Path(cmd[0]).name
    if cmd[0].startswith(env["EXCAVATOR_HIL_LIB"] + "/"):
        assert exe in console_scripts(), f"{exe} is no console script of setup.py"
    if exe == "virtual_plc":
        from plc_bridge.virtual_plc.cli import build_parser

        args = build_parser().parse_args(cmd[1:])
        assert (args.port, args.rt_priority, args.control_port) == (
            int(env["PLC_PORT"]), int(env["RT_PRIORITY"]), -1)   # no fault-injection channel
        assert args.config == env["PLC_PARAMS"]
    elif exe == "plc_bridge":
        from plc_bridge.config import load_config

        params, overrides, _ = _ros_parameters(cmd[1:])
        assert params == env["PLC_PARAMS"]
        assert overrides.pop("use_sim_time") in (True, False)
        config = load_config(params, overrides)   # the node's own checks: names, ranges, rules
        assert config.rt_priority == int(env["RT_PRIORITY"])
        assert (config.plc_host, config.plc_port) == (env["PLC_HOST"], int(env["PLC_PORT"]))
    elif exe == "dashboard":
        from excavator_hil.dashboard.app import build_parser as dashboard_parser

        split = cmd.index("--ros-args")
        args = dashboard_parser().parse_args(cmd[1:split])
        assert args.host == "127.0.0.1" and args.port == int(env["DASHBOARD_PORT"])
        assert _ros_parameters(cmd[split:])[2] == "/" + env["EXCAVATOR_HIL_NAMESPACE"]
    elif exe == "ros2":
        assert cmd[1:2] == ["launch"], cmd
        rest = [a for a in cmd[2:] if a != "--noninteractive"]
        package, file, *args = rest
        assert package == "excavator_hil" and file in launch_support.LAUNCH_FILES
        assert (REPO / "launch" / file).is_file()
        declared = {a.name: a for a in launch_support.arguments_of(file)}
        given = dict(a.split(":=", 1) for a in args)
        for name, value in given.items():
            assert name in declared, f"{file} has no argument {name}"
            choices = declared[name].choices
            assert not choices or value in choices, f"{name}:={value} is not one of {choices}"
        launch_support.RespawnPolicy.parse(given.get("respawn", "false"), "2", "5", "60")
    elif cmd[0] == env["REDIS_SERVER"]:
        # redis-server parses its own options: start it with them (on a free port, in tmp)
        proc = subprocess.Popen([redis_server_binary(), *cmd[1:]], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            import redis

            client = redis.Redis(port=int(env["REDIS_PORT"]), socket_timeout=1.0)
            wait_for(lambda: proc.poll() is not None or _pings(client), EVENT_WAIT_S,
                     "redis-server with the unit's options")
            assert proc.poll() is None, proc.communicate()[0]
            assert client.config_get("save")["save"] == ""   # no persistence
            assert client.config_get("bind")["bind"] == "127.0.0.1"
        finally:
            proc.terminate()
            proc.wait(EVENT_WAIT_S)
    else:
        raise AssertionError(f"{path.name}: unknown command {cmd}")


def _pings(client: object) -> bool:
    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not up yet
        return False


def test_the_units_are_installed_and_documented() -> None:
    from fnmatch import fnmatch

    patterns = installed_patterns()
    for path in [*UNITS, UNITS_DIR / TARGET, ENV_FILE]:
        rel = str(path.relative_to(REPO))
        assert any(fnmatch(rel, pat) for pat in patterns), f"setup.py does not install {rel}"
    doc = (REPO / "docs" / "plc_bridge.md").read_text()
    for path in [*UNITS, UNITS_DIR / TARGET, ENV_FILE]:
        assert path.name in doc, f"docs/plc_bridge.md does not mention {path.name}"


# --- the units' commands, run as systemd runs them ----------------------------------------------
@pytest.fixture
def ament_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from excavator_hil.ament_register import register

    prefix = tmp_path_factory.mktemp("ament_prefix")
    register(prefix)
    return prefix / "lib" / "excavator_hil"


class UnitProcess:
    """A unit's ExecStart run as systemd runs it: ``/bin/bash -c SCRIPT`` with the environment
    file's variables (here: this checkout's venv and ports free on loopback), no systemd."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path):
        unit = read_unit(UNITS_DIR / f"excavator-hil-{name}.service")
        self.log_path = log_dir / f"{name}.log"
        extra = dict(e.split("=", 1) for v in unit["Service"].get("Environment", [])
                     for e in v.split())
        full = {**os.environ, **env, **{k: v for k, v in extra.items()
                                        if k not in ("ROS_LOG_DIR", "ROS_HOME")}}
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(["/bin/bash", "-c", bash_script(unit)], env=full,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """KillSignal=SIGINT; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(EVENT_WAIT_S)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(EVENT_WAIT_S)
            self._log.close()


@pytest.fixture
def units() -> Iterator[list[UnitProcess]]:
    started: list[UnitProcess] = []
    yield started
    for u in reversed(started):
        u.stop()


def test_the_path_to_the_plc_comes_up_from_the_units_commands(
        tmp_path: Path, ament_lib: Path, units: list[UnitProcess]) -> None:
    """redis-server, the virtual PLC and the bridge from their units' commands: the bridge
    reaches both (its status in that Redis: waiting for the operational layer's heartbeat),
    and every thread of the three runs with the fair slice where the kernel supports it."""
    import redis

    from plc_bridge import redis_keys as keys

    support = realtime.host_support(20)
    activate = tmp_path / "setup.bash"   # what the venv's bin/activate does that matters here
    activate.write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n'
                        f'export PYTHONPATH="{REPO}${{PYTHONPATH:+:$PYTHONPATH}}"\n')
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    env = unit_env(tmp_path, EXCAVATOR_HIL_SETUP=str(activate), EXCAVATOR_HIL_LIB=str(ament_lib),
                   REDIS_PORT=str(free_port()), PLC_PORT=str(free_port()),
                   STATE_DIRECTORY=str(redis_dir), ROS_DOMAIN_ID=os.environ["ROS_DOMAIN_ID"],
                   ROS_LOG_DIR=str(tmp_path / "ros_log"),
                   # SCHED_FIFO only where this user may (systemd's LimitRTPRIO= is not here)
                   RT_PRIORITY="20" if support.fifo else "0",
                   REDIS_SERVER=redis_server_binary())
    env["REDIS_URL"] = f"redis://127.0.0.1:{env['REDIS_PORT']}/0"
    for name in ("redis", "virtual-plc", "bridge"):
        units.append(UnitProcess(name, env, tmp_path))
    client = redis.Redis.from_url(env["REDIS_URL"], decode_responses=True, socket_timeout=2.0)

    def status() -> str | None:
        for u in units:
            assert u.proc.poll() is None, f"{u.log_path.name} ended:\n{u.log()}"
        try:
            return client.get(keys.BRIDGE_STATUS)
        except redis.RedisError:
            return None

    wait_for(lambda: status() == "stopped:waiting_heartbeat", EVENT_WAIT_S,
             lambda: f"the bridge up (status {status()}):\n{units[2].log()}\n{units[1].log()}")
    if support.fair_slice:
        for u in units:
            slices = {realtime.current_fair_slice(int(t.name))
                      for t in Path(f"/proc/{u.proc.pid}/task").glob("*")}
            slices.discard(None)   # threads under SCHED_FIFO have no slice
            assert slices <= {float(env["FAIR_SLICE_MS"]) / 1e3}, (u.log_path.name, slices)
    if support.fifo:   # the virtual PLC switches itself (redis-server: systemd's directive)
        assert os.sched_getscheduler(units[1].proc.pid) == os.SCHED_FIFO
    for u in reversed(units):
        assert u.stop() == 0, u.log()
    units.clear()
