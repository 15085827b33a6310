"""The chaos soak of the whole rig (bench/soak.py): a seeded fault schedule, the records of a
run, the invariants checked over them, the report. docs/benchmarks.md, "Chaos soak"."""
