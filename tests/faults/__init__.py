"""Fault-injection scenarios: real processes, real servers, injected faults.

Each scenario drains the queue and checks invariants I1-I7 of
docs/DESIGN (see ``invariants.py``). Run with ``pytest tests/faults``.
"""
