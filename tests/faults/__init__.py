"""Fault-injection scenarios: real processes, real servers, injected faults.

Each scenario drains the queue and checks the design's invariants I1-I7 with
one checker (``invariants.py``; the faults and their bounds are described in
docs/guide/faults.md). Run with ``pytest tests/faults`` or ``make faults``.
"""
