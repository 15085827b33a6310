"""The Redis side: one MGET of the control keys, one MSET of the monitor keys, wake-ups.

Clients come from ``redis.Redis.from_url`` (``redis://``, ``rediss://`` for TLS, credentials as
``redis://user:password@host``; TLS options as URL query arguments, e.g.
``?ssl_ca_certs=/etc/ssl/ca.pem``), with short socket timeouts and redis-py's own retries off:
a failure is reported to the loop at once, which writes a stop to the PLC, and a
``Reconnector`` thread builds a new client with back-off. The loop keeps one connection of
that client for itself and sends the MGET (packed once) and the MSET on it directly: the
client's per-command pool, retry and observability layers cost ~25 us a command. The MSET's
reply is not waited for: it is read just before the next cycle's MGET reply (same connection,
in order), so a cycle does not spend a Redis round trip on it; an error or a lost connection
shows up at that MGET (one cycle later) and counts as a Redis loss like any other.

Wake-up on change (``Waker``): a subscription connection receives (1) keyspace notifications
``__keyspace@<db>__:plc.control.*`` (the bridge adds the ``K$`` flags to
``notify-keyspace-events`` at connect when ``configure_keyspace_events`` is true; on a managed
Redis without CONFIG, enable them there), and (2) messages on the plain channel
``notify_channel`` that writers may PUBLISH to instead. The loop thread itself sleeps in
``select()`` on that socket, so a change wakes it directly. The notifications' content is never
needed (the cycle's MGET reads the keys), so on a wake-up the socket is emptied with raw
non-blocking ``recv`` calls instead of parsing each message with redis-py (~60-90 us of Python
per wake-up, on the Redis -> PLC path, measured with ``bench/bridge.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket
import ssl
import time
from collections.abc import Callable, Mapping

import redis
from redis.backoff import NoBackoff
from redis.client import PubSub
from redis.connection import AbstractConnection
from redis.retry import Retry

from plc_bridge.config import BridgeConfig, redact_url
from plc_bridge.reconnect import Backoff, Reconnector
from plc_bridge.redis_keys import CONTROL_PREFIX

STABLE_S = 1.0   # a connection up this long resets the reconnect back-off


def describe_error(e: BaseException, config: BridgeConfig) -> str:
    """redis-py's own text (``invalid username-password pair``, ``CERTIFICATE_VERIFY_FAILED``)
    with the exception type, the server and, for a timeout, the parameter to raise."""
    text = f"{type(e).__name__}: {e}".rstrip(": ")
    where = redact_url(config.redis_url)
    if isinstance(e, redis.TimeoutError | socket.timeout):
        text += (f" (no reply from {where} within redis_timeout_s = {config.redis_timeout_s:g} s / "
                 f"redis_connect_timeout_s = {config.redis_connect_timeout_s:g} s; raise them, "
                 f"e.g. --redis-timeout 0.5, on a slow link or TLS terminator)")
    else:
        text += f" ({where})"
    return text


def make_client(url: str, timeout_s: float, connect_timeout_s: float) -> redis.Redis:
    """A client that fails fast: ``timeout_s`` per reply, ``connect_timeout_s`` for the TCP (and
    TLS) handshake, no retries inside redis-py."""
    return redis.Redis.from_url(url, socket_timeout=timeout_s,
                                socket_connect_timeout=connect_timeout_s,
                                retry=Retry(NoBackoff(), 0), health_check_interval=0)


def enable_keyspace_events(client: redis.Redis) -> bool:
    """Add ``K$`` to ``notify-keyspace-events``; False when CONFIG is not permitted."""
    try:
        flags = str(client.config_get("notify-keyspace-events").get(
            "notify-keyspace-events", ""))
        wanted = "".join(sorted(set(flags) | ({"K", "$"} if "A" not in flags else {"K"})))
        if set(wanted) != set(flags):
            client.config_set("notify-keyspace-events", wanted)
        return True
    except redis.ResponseError:
        return False


class RedisLink:
    """The loop's Redis connection with non-blocking reconnect."""

    def __init__(self, config: BridgeConfig, clock: Callable[[], float] = time.monotonic):
        """``clock``: the bridge's monotonic time [s] (the one passed to ``poll``)."""
        self.config = config
        self._clock = clock
        self.client: redis.Redis | None = None
        self._conn: AbstractConnection | None = None   # the loop's own connection of client
        self._packed: dict[tuple[str, ...], list[bytes]] = {}   # MGET commands, packed once
        self._unread = 0   # MSET replies not read yet (they precede the next MGET's reply)
        self.reconnects = 0
        self.last_error = ""
        self.lost_since_s: float | None = None
        self._ever_connected = False
        self._connected_since: float | None = None
        # called in the connect thread with the new client before the loop adopts it (the
        # bridge writes its current stop status there: no stale "running" after an outage)
        self.on_connect: Callable[[redis.Redis], None] | None = None
        self._reconnector: Reconnector[tuple[redis.Redis, AbstractConnection]] = Reconnector(
            self._connect, Backoff(config.reconnect_min_s, config.reconnect_max_s,
                                   config.reconnect_jitter), "redis", clock)

    @property
    def connected(self) -> bool:
        return self.client is not None

    def _connect(self) -> tuple[redis.Redis, AbstractConnection]:
        cfg = self.config
        # the handshake (TCP, TLS, AUTH) and the first replies get the connect timeout; the
        # loop's connection then gets redis_timeout_s
        client = make_client(cfg.redis_url, cfg.redis_connect_timeout_s,
                             cfg.redis_connect_timeout_s)
        try:
            client.ping()
            if cfg.wake_on_change and cfg.configure_keyspace_events:
                enable_keyspace_events(client)
            if self.on_connect is not None:
                self.on_connect(client)
            conn = client.connection_pool.get_connection()   # connected, AUTH/TLS done
            conn.socket_timeout = cfg.redis_timeout_s
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                sock.settimeout(cfg.redis_timeout_s)
        except (redis.RedisError, OSError) as e:
            client.close()
            raise ConnectionError(describe_error(e, cfg)) from e
        except BaseException:
            client.close()
            raise
        return client, conn

    def poll(self, now_s: float) -> bool:
        if self.client is not None:
            if self._connected_since is not None and now_s - self._connected_since >= STABLE_S:
                self._connected_since = None
                self._reconnector.healthy()
            return True
        got = self._reconnector.poll(now_s)
        if got is None:
            if self._reconnector.last_error:
                self.last_error = self._reconnector.last_error.removeprefix("ConnectionError: ")
            elif not self.last_error:
                self.last_error = (f"connecting to {redact_url(self.config.redis_url)} (no reply "
                                   f"yet; redis_connect_timeout_s = "
                                   f"{self.config.redis_connect_timeout_s:g} s)")
            return False
        self.client, self._conn = got
        self._connected_since = now_s
        self.lost_since_s = None
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        return True

    def lost(self, error: BaseException | str) -> None:
        self.last_error = describe_error(error, self.config) if isinstance(
            error, BaseException) else str(error)
        if self._connected_since is not None:   # failed soon after connecting
            self._reconnector.flapped(self._clock())
        self._connected_since = None
        client, self.client = self.client, None
        conn, self._conn = self._conn, None
        self._unread = 0
        if self.lost_since_s is None:
            self.lost_since_s = self._clock()
        with contextlib.suppress(Exception):  # already broken
            if conn is not None:
                conn.disconnect()
            if client is not None:
                client.close()

    def mget(self, keys: tuple[str, ...]) -> list[bytes | None] | None:
        conn = self._conn
        if conn is None:
            return None
        packed = self._packed.get(keys)
        if packed is None:
            packed = self._packed[keys] = conn.pack_command("MGET", *keys)
        try:
            conn.send_packed_command(packed, check_health=False)
            self._read_unread(conn)
            reply = conn.read_response()
        except (redis.RedisError, OSError) as e:
            self.lost(f"MGET: {describe_error(e, self.config)}")
            return None
        if not isinstance(reply, list) or len(reply) != len(keys):
            self.lost(f"MGET: unexpected reply {reply!r:.80}")
            return None
        return reply

    def mset(self, mapping: Mapping[str, str], wait: bool = False,
             expiring: Mapping[str, str] | None = None, ttl_ms: int = 0,
             delete: tuple[str, ...] = ()) -> bool:
        """Send one MSET of ``mapping`` (if any), a ``SET key value PX ttl_ms`` per ``expiring``
        key and one DEL of ``delete``, in one send; their replies are read with the next MGET's,
        or now with ``wait``."""
        conn = self._conn
        if conn is None:
            return False
        commands: list[tuple[str, ...]] = []
        if mapping:
            commands.append(("MSET", *itertools.chain.from_iterable(mapping.items())))
        for key, value in (expiring or {}).items():
            commands.append(("SET", key, value, "PX", str(max(1, int(ttl_ms)))))
        if delete:
            commands.append(("DEL", *delete))
        if not commands:
            return True
        try:
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            self._unread += len(commands)
            if wait or self._unread > len(commands):
                self._read_unread(conn)
        except (redis.RedisError, OSError) as e:
            self.lost(f"MSET: {describe_error(e, self.config)}")
            return False
        return True

    def _read_unread(self, conn: AbstractConnection) -> None:
        """Read the replies of the MSETs sent so far (an error reply raises)."""
        while self._unread:
            self._unread -= 1
            conn.read_response()

    def close(self) -> None:
        self.lost("closed")


class Waker:
    """Owned by the loop thread: ``wait(timeout)`` sleeps in ``select()`` on the subscription
    socket and a self-pipe, so a Redis change wakes the loop with no thread hand-off.

    Subscribes to ``__keyspace@<db>__:plc.control.*`` and ``notify_channel``. Other threads
    call ``notify()`` (stop, lifecycle changes). The subscription connects in a ``Reconnector``
    thread; while it is down the loop still runs on its tick. A broken subscription wakes the
    loop at once, so a Redis outage is seen without waiting for the tick.
    """

    def __init__(self, config: BridgeConfig, enabled: bool = True):
        self.config = config
        self.enabled = enabled
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._client: redis.Redis | None = None
        self._pubsub: PubSub | None = None
        self._sock: socket.socket | None = None   # the subscription's socket, non-blocking
        self.wakeups = 0                           # wake-ups by the subscription
        self._reconnector: Reconnector[tuple[redis.Redis, PubSub]] = Reconnector(
            self._connect, Backoff(config.reconnect_min_s, config.reconnect_max_s,
                                   config.reconnect_jitter), "redis-wake")

    @property
    def subscribed(self) -> bool:
        return self._pubsub is not None

    def _connect(self) -> tuple[redis.Redis, PubSub]:
        cfg = self.config
        client = make_client(cfg.redis_url, cfg.redis_connect_timeout_s,
                             cfg.redis_connect_timeout_s)
        try:
            db = int(client.connection_pool.connection_kwargs.get("db", 0) or 0)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.psubscribe(f"__keyspace@{db}__:{CONTROL_PREFIX}*")
            pubsub.subscribe(cfg.notify_channel)
            # redis-py only sent the commands; from here on the socket is ours to drain raw
            sock = pubsub.connection._sock if pubsub.connection is not None else None
            if sock is None:
                raise redis.ConnectionError("subscription connected without a socket")
            sock.setblocking(False)
        except BaseException:
            client.close()
            raise
        return client, pubsub

    def notify(self) -> None:
        if self._w < 0:   # closed: the loop has ended (never write to a recycled fd number)
            return
        with contextlib.suppress(OSError):   # pipe full: already woken
            os.write(self._w, b"!")

    def _drop(self) -> None:
        pubsub, client = self._pubsub, self._client
        self._pubsub = self._client = self._sock = None
        with contextlib.suppress(Exception):  # already broken
            if pubsub is not None:
                pubsub.close()
            if client is not None:
                client.close()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True when woken by a change, a notify or an outage."""
        if self.enabled and self._pubsub is None:
            got = self._reconnector.poll(time.monotonic())
            if got is not None:
                self._client, self._pubsub = got
                self._sock = self._pubsub.connection._sock if self._pubsub.connection else None
                return True            # (re)subscribed: changes may have been missed
        fds = [self._r]
        sock = self._sock
        if sock is not None:
            fds.append(sock.fileno())
        readable, _, _ = select.select(fds, [], [], max(0.0, timeout_s))
        woke = False
        if self._r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._r, 64):
                    pass
            woke = True
        if sock is not None and sock.fileno() in readable:
            woke = True
            self.wakeups += 1
            self._discard(sock)
        return woke

    def take_pending(self) -> bool:
        """True (and the notifications consumed) when a change arrived since the last wait:
        the loop then reads the control keys again at once."""
        sock = self._sock
        if sock is None:
            return False
        readable, _, _ = select.select([sock], [], [], 0.0)
        if not readable:
            return False
        self.wakeups += 1
        self._discard(sock)
        return True

    def _discard(self, sock: socket.socket) -> None:
        """Empty the subscription socket without parsing; drop it when Redis closed it."""
        try:
            while True:
                if not sock.recv(65536):
                    raise ConnectionError("Redis closed the subscription")
        except (BlockingIOError, ssl.SSLWantReadError):
            return                     # emptied (TLS: no complete record left)
        except OSError:                # reset, closed, TLS error: resubscribe in the background
            self._drop()

    def close(self) -> None:
        self._drop()
        fds, (self._r, self._w) = (self._r, self._w), (-1, -1)
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
