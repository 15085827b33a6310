"""The dashboard's Redis adapter against a real redis-server: the operational layer's writes
(velocity keys, heartbeat, notify), the stop, the exit while driving, Redis lost and back."""

from __future__ import annotations

import time

import redis
from helpers import EVENT_WAIT_S, wait_for

from excavator_hil.dashboard.adapter import RedisLink
from excavator_hil.dashboard.core import BridgeWatch, DriveLimits
from plc_bridge import redis_keys as keys


def _link(url: str) -> RedisLink:
    return RedisLink(url, BridgeWatch(("left", "right"), ()), DriveLimits(3.0, 0.0, 1.5),
                     period_s=0.05, heartbeat_period_s=0.1)


def _heartbeats(client: redis.Redis, seconds: float) -> set[bytes | None]:
    seen = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.add(client.get(keys.HEARTBEAT))
        time.sleep(0.01)
    return seen


def test_drive_stop_and_exit(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    sub = client.pubsub()
    sub.subscribe("plc.control.changed")
    link = _link(redis_server.url)
    try:
        # not driving: nothing is written
        link.set_command(0.5, 0.0, 0.2)
        time.sleep(0.3)
        assert client.get(keys.LONGITUDINAL) is None and client.get(keys.HEARTBEAT) is None

        link.start_driving()
        wait_for(lambda: client.get(keys.LONGITUDINAL) == b"0.5",
                 EVENT_WAIT_S, "the twist in Redis")
        assert client.get(keys.ANGULAR) == b"0.2" and client.get(keys.LATERAL) == b"0"
        seen: set[bytes | None] = set()   # both values, however long a loaded host takes
        wait_for(lambda: seen.add(client.get(keys.HEARTBEAT)) or seen == {b"true", b"false"},
                 EVENT_WAIT_S, lambda: f"the heartbeat must toggle: only {seen} seen")
        wait_for(lambda: sub.get_message(timeout=0.1, ignore_subscribe_messages=True), EVENT_WAIT_S,
                 "a PUBLISH on the bridge's notify channel")

        link.stop()
        wait_for(lambda: client.get(keys.LONGITUDINAL) == b"0", EVENT_WAIT_S, "the stop in Redis")
        assert client.get(keys.ANGULAR) == b"0"
        assert len(_heartbeats(client, 0.5)) == 1, "no heartbeat toggle after a stop"
        link.set_command(1.0, 0.0, 0.0)   # a slider moved after the stop: not forwarded
        time.sleep(0.3)
        assert client.get(keys.LONGITUDINAL) == b"0"

        link.start_driving()
        wait_for(lambda: client.get(keys.LONGITUDINAL) == b"1", EVENT_WAIT_S, "driving again")
        link.close(stop=True)             # the dashboard exits while driving: a stop first
        assert client.get(keys.LONGITUDINAL) == b"0"
        assert len(_heartbeats(client, 0.5)) == 1
    finally:
        link.close(stop=False)


def test_redis_lost_and_back(redis_server):
    link = _link(redis_server.url)
    try:
        client = redis.Redis.from_url(redis_server.url)
        client.mset({keys.BRIDGE_STATUS: "running", keys.counter_key("cycles"): "1"})
        wait_for(lambda: link.view.status == "running", EVENT_WAIT_S, "the bridge status read")
        link.set_command(0.5, 0.0, 0.0)
        link.start_driving()
        wait_for(lambda: client.get(keys.LONGITUDINAL) == b"0.5", EVENT_WAIT_S, "driving")
        redis_server.stop()
        wait_for(lambda: link.view.status == "redis down", EVENT_WAIT_S, lambda: link.view.status)
        assert link.view.bridge_down and "Redis unreachable" in link.view.banner
        link.stop()                       # pressed while Redis is away: kept until it is back
        redis_server.start()
        client = redis.Redis.from_url(redis_server.url)
        wait_for(lambda: client.get(keys.LONGITUDINAL) == b"0", EVENT_WAIT_S,
                 "the stop written once Redis is back")
        assert link.view.status in ("unknown", "redis down")  # a fresh server: no status key
    finally:
        link.close(stop=False)
