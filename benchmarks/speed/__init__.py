"""Timing benchmarks: a step's overhead, rate evaluation, many constraints, time to quality.

Run from the repository root, e.g. ``python -m benchmarks.speed.step_overhead --quick``; each
script's docstring gives its goal and options. Results go to ``benchmarks/results/``.
"""
