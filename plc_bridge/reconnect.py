"""Non-blocking reconnection: connect attempts run in a helper thread, spaced by a capped
exponential back-off with jitter, so the bridge loop never waits for a TCP or TLS handshake."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from plc_bridge.errors import LinkRefusedError

T = TypeVar("T")


class Backoff:
    """Delays ``min_s, 2*min_s, 4*min_s, ...`` capped at ``max_s``, each plus up to
    ``jitter * delay`` of random extra (so several bridges do not retry in lock-step)."""

    def __init__(self, min_s: float, max_s: float, jitter: float, rng: random.Random | None = None):
        self.min_s, self.max_s, self.jitter = min_s, max_s, jitter
        self._rng = rng or random.Random()
        self._delay = min_s

    def next_delay(self) -> float:
        delay = self._delay
        self._delay = min(self._delay * 2.0, self.max_s)
        return delay + self._rng.uniform(0.0, self.jitter * delay)

    def reset(self) -> None:
        self._delay = self.min_s


FLAP_MAX_S = 2.0      # cap of the back-off for a link that fails soon after connecting
REFUSED_RETRY_S = 5.0  # retry period after a connect refused by a check (PDU, reply time)


class Reconnector(Generic[T]):
    """Runs ``connect()`` in a daemon thread when due; the loop polls ``poll(now)``.

    ``poll`` returns a freshly connected resource once (then it is the caller's), else None.
    A failed attempt schedules the next one after ``Backoff.next_delay()``; ``last_error`` keeps
    the reason for the status key. The back-off is *not* reset by a successful connect: the
    owner calls ``healthy()`` once the resource has worked for a while, so a peer that accepts
    connections and then fails every request is retried less and less often (no reconnect
    storm). ``pending`` is True while the first attempt has not ended yet. ``clock``: the
    owner's monotonic time [s], the one it passes to ``poll`` and ``flapped``.
    """

    def __init__(self, connect: Callable[[], T], backoff: Backoff, name: str,
                 clock: Callable[[], float] = time.monotonic):
        self._connect = connect
        self._clock = clock
        self._backoff = backoff
        self._name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._result: T | None = None
        self._next_attempt_s = -math.inf
        self._flap_s = 0.0
        self.last_error = ""
        self.attempts = 0

    def poll(self, now_s: float) -> T | None:
        with self._lock:
            if self._result is not None:
                result, self._result = self._result, None
                return result
            busy = self._thread is not None and self._thread.is_alive()
        if not busy and now_s >= self._next_attempt_s:
            self._next_attempt_s = float("inf")   # set properly when the attempt ends
            self._thread = threading.Thread(target=self._attempt, args=(now_s,),
                                            name=f"reconnect-{self._name}", daemon=True)
            self._thread.start()
        return None

    def healthy(self) -> None:
        """The resource has worked for a while: the next failure retries after ``min_s``."""
        self._backoff.reset()
        self._flap_s = 0.0
        self._next_attempt_s = -math.inf

    def flapped(self, now_s: float) -> None:
        """The resource failed soon after connecting: wait longer each time (doubling up to
        ``FLAP_MAX_S``) before the next attempt, so a peer that accepts and then fails every
        request is not hammered."""
        self._flap_s = min(FLAP_MAX_S, max(2.0 * self._flap_s, self._backoff.min_s))
        self._next_attempt_s = max(self._next_attempt_s, now_s + self._flap_s)

    @property
    def pending(self) -> bool:
        """The first attempt is still running (no result and no error yet)."""
        return self.attempts <= 1 and not self.last_error and self._result is None

    def _attempt(self, started_s: float) -> None:
        self.attempts += 1
        try:
            resource = self._connect()
        except Exception as e:  # noqa: BLE001 - any failure means "try again later"
            self.last_error = f"{type(e).__name__}: {e}"
            delay = REFUSED_RETRY_S if isinstance(e, LinkRefusedError) else \
                self._backoff.next_delay()
            self._next_attempt_s = self._clock() + delay
            return
        with self._lock:
            self._result = resource
        self._next_attempt_s = -math.inf   # a later loss reconnects at once (unless it flapped)
