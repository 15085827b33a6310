"""Ending a node's process once its ``main()`` has cleaned up, without the interpreter's teardown.

After a node has stopped (its executor, context and threads shut down), the interpreter's own
teardown of numpy, MuJoCo, numba/LLVM and rclpy modules adds 0.6-0.9 s on a loaded machine for
nothing, and the teardown of numba's LLVM state beside rclpy's can crash the process (SIGSEGV,
exit code -11) after a clean stop: seen on ``python -m excavator_sim.sim_node`` (soil inside)
and soil_node under the test suite. Both entry routes end here: the console scripts
(``excavator_hil.node_entry``) and ``python -m <node module>``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_without_teardown(code: int | None) -> NoReturn:
    """Write what an ``atexit`` handler of ours would (the stall probe's report), flush what
    is buffered (logging, stdout, stderr) and end the process with ``code``."""
    from excavator_common import stall_probe  # at the end only: the entry stays light

    stall_probe.write_now()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))
