"""The demo's progress bar: redraws on a terminal, one line per phase in CI logs."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """One line that redraws itself on a terminal, one line per phase otherwise (CI logs)."""

    def __init__(self, total_s: float, stream: Any = sys.stdout, label: str = ""):
        # label: which machine (several run at once: one line per phase, never a redraw)
        self.total = max(total_s, 1e-9)
        self.stream = stream
        self.label = f"{label}: " if label else ""
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) and not label
        self._last_phase = ""

    def update(self, t: float, phase: str, detail: str = "") -> None:
        frac = min(max(t / self.total, 0.0), 1.0)
        if self.tty:
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r[{bar:<30}] {frac * 100:5.1f}% {phase:<10} {detail:<40}")
            self.stream.flush()
        elif phase != self._last_phase:
            self.stream.write(f"{self.label}[{frac * 100:5.1f}%] {phase} {detail}\n")
            self.stream.flush()
        self._last_phase = phase

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
