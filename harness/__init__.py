"""
harness/: what the exercises and studies run in, above the drafters of beyond/: their flags and
models (common), the report (report), how long each stage takes (stages), drafters by name
(registry), the benchmark, the batch curve and the command line behind `python
speculative.py` (decode). Module by module: docs/DESIGN.md.
"""
