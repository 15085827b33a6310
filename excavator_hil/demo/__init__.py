"""The headless dig-cycle demo: the process stack, the operator, the dig cycle, the summary."""
