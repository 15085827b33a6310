"""excavator_common.node_thread: a node spun by a daemon thread (the dashboard's, the benches'
and these tests' probes). Its thread must outlive a subscription destroyed by another thread
while a spin builds its wait set: rclpy raises ``InvalidHandle`` there, and a thread that ended
on it left the node deaf for the rest of the process (a dashboard switching machines, a test
probe: every later wait of a fresh-clone CI run's module timed out)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import EVENT_WAIT_S
from rclpy.exceptions import InvalidHandle
from std_msgs.msg import Float64

from excavator_common.node_thread import NodeThread


@pytest.fixture
def node_thread():
    t = NodeThread("node_thread_test")
    yield t
    t.close()


def _delivers(t: NodeThread) -> bool:
    got: list[float] = []
    t.node.create_subscription(Float64, "delivery", lambda m: got.append(m.data), 10)
    pub = t.node.create_publisher(Float64, "delivery", 10)
    deadline = time.monotonic() + EVENT_WAIT_S
    while not got and time.monotonic() < deadline:
        pub.publish(Float64(data=1.0))
        time.sleep(0.05)
    return bool(got)


def test_a_spin_that_meets_a_destroyed_entity_goes_on(node_thread: NodeThread) -> None:
    raised = threading.Event()
    node_thread.start(spin_timeout_s=0.01)
    spin_once: Any = node_thread.executor.spin_once

    def spin_once_meeting_a_destroyed_entity(*args: Any, **kwargs: Any) -> None:
        if not raised.is_set():   # as rclpy raises it from a destroyed subscription's event
            raised.set()
            raise InvalidHandle("cannot use Destroyable because destruction was requested")
        spin_once(*args, **kwargs)

    node_thread.executor.spin_once = spin_once_meeting_a_destroyed_entity
    assert raised.wait(EVENT_WAIT_S)
    assert node_thread._thread is not None and node_thread._thread.is_alive()
    assert _delivers(node_thread)


def test_subscriptions_come_and_go_under_a_spinning_thread(node_thread: NodeThread) -> None:
    """The real race, for a few seconds: it ended the old thread within ~2,000 rounds here."""
    node_thread.start(spin_timeout_s=0.0)
    pub = node_thread.node.create_publisher(Float64, "churn", 10)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        subs = [node_thread.node.create_subscription(Float64, "churn", lambda m: None, 10)
                for _ in range(10)]
        pub.publish(Float64(data=1.0))
        for s in subs:
            node_thread.node.destroy_subscription(s)
    assert node_thread._thread is not None and node_thread._thread.is_alive()
    assert _delivers(node_thread)


def test_an_error_in_a_callback_still_ends_the_thread(node_thread: NodeThread) -> None:
    """Only the destroyed-entity race is survived: a callback's bug stays loud."""
    errors: list[BaseException] = []
    hook = threading.excepthook
    threading.excepthook = lambda a: errors.append(a.exc_value)   # type: ignore[assignment]
    try:
        def bug(_msg: Float64) -> None:
            raise ValueError("a callback's bug")

        node_thread.node.create_subscription(Float64, "bug", bug, 10)
        pub = node_thread.node.create_publisher(Float64, "bug", 10)
        node_thread.start(spin_timeout_s=0.01)
        deadline = time.monotonic() + EVENT_WAIT_S
        while not errors and time.monotonic() < deadline:
            pub.publish(Float64(data=1.0))
            time.sleep(0.05)
    finally:
        threading.excepthook = hook
    assert errors and isinstance(errors[0], ValueError)
    assert node_thread._thread is not None
    node_thread._thread.join(2.0)
    assert not node_thread._thread.is_alive()
