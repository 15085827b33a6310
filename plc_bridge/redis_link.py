"""The Redis side: one MGET of the control keys, one MSET of the monitor keys, wake-ups.

Clients come from ``redis.Redis.from_url`` (``redis://``, ``rediss://`` for TLS, credentials as
``redis://user:password@host``; TLS options as URL query arguments, e.g.
``?ssl_ca_certs=/etc/ssl/ca.pem``), with short socket timeouts and redis-py's own retries off:
a failure is reported to the loop at once, which writes a stop to the PLC, and a
``Reconnector`` thread builds a new client with back-off.

Wake-up on change: a listener thread with its own connection subscribes to
(1) keyspace notifications ``__keyspace@<db>__:plc.control.*`` (the bridge adds the ``K$``
flags to ``notify-keyspace-events`` at connect when ``configure_keyspace_events`` is true; on a
managed Redis without CONFIG, enable them there), and (2) the plain channel
``notify_channel`` that writers may PUBLISH to instead. Either sets the loop's wake event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from plc_bridge.config import BridgeConfig
from plc_bridge.reconnect import Backoff, Reconnector
from plc_bridge.redis_keys import CONTROL_PREFIX


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

    def __init__(self, config: BridgeConfig):
        self.config = config
        self.client: redis.Redis | None = None
        self.reconnects = 0
        self.last_error = ""
        self.lost_since_s: float | None = None
        self._ever_connected = False
        self._reconnector: Reconnector[redis.Redis] = Reconnector(
            self._connect, Backoff(config.reconnect_min, config.reconnect_max,
                                   config.reconnect_jitter), "redis")

    @property
    def connected(self) -> bool:
        return self.client is not None

    def _connect(self) -> redis.Redis:
        cfg = self.config
        client = make_client(cfg.redis_url, cfg.redis_timeout, max(cfg.redis_timeout, 0.5))
        try:
            client.ping()
            if cfg.wake_on_change and cfg.configure_keyspace_events:
                enable_keyspace_events(client)
        except BaseException:
            client.close()
            raise
        return client

    def poll(self, now_s: float) -> bool:
        if self.client is not None:
            return True
        client = self._reconnector.poll(now_s)
        if client is None:
            self.last_error = self._reconnector.last_error or self.last_error
            return False
        self.client = client
        self.lost_since_s = None
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        return True

    def lost(self, error: BaseException | str) -> None:
        self.last_error = str(error)
        client, self.client = self.client, None
        if self.lost_since_s is None:
            self.lost_since_s = time.monotonic()
        if client is not None:
            with contextlib.suppress(Exception):  # already broken
                client.close()

    def mget(self, keys: tuple[str, ...]) -> list[bytes | None] | None:
        client = self.client
        if client is None:
            return None
        try:
            return client.mget(keys)
        except (redis.RedisError, OSError) as e:
            self.lost(f"MGET: {type(e).__name__}: {e}")
            return None

    def mset(self, mapping: Mapping[str, str]) -> bool:
        client = self.client
        if client is None:
            return False
        try:
            client.mset(mapping)
        except (redis.RedisError, OSError) as e:
            self.lost(f"MSET: {type(e).__name__}: {e}")
            return False
        return True

    def close(self) -> None:
        self.lost("closed")


class WakeListener:
    """Sets ``event`` on every change of a ``plc.control.*`` key or message on the channel."""

    def __init__(self, config: BridgeConfig, event: threading.Event):
        self.config = config
        self.event = event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-wake", daemon=True)
        self.connected = False
        self.notifications = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        cfg = self.config
        backoff = Backoff(cfg.reconnect_min, cfg.reconnect_max, cfg.reconnect_jitter)
        while not self._stop.is_set():
            client = None
            try:
                client = make_client(cfg.redis_url, 1.0, max(cfg.redis_timeout, 0.5))
                db = int(client.connection_pool.connection_kwargs.get("db", 0) or 0)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(f"__keyspace@{db}__:{CONTROL_PREFIX}*")
                pubsub.subscribe(cfg.notify_channel)
                self.connected = True
                backoff.reset()
                self.event.set()   # re-read at once after (re)subscribing
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=0.2)
                    if msg is not None:
                        self.notifications += 1
                        self.event.set()
            except (redis.RedisError, OSError):
                self.connected = False
                self.event.set()   # let the loop see the outage now, not at the next tick
                self._stop.wait(backoff.next_delay())
            finally:
                if client is not None:
                    with contextlib.suppress(Exception):  # already broken
                        client.close()
