"""What runs the scenarios and the peers and turns their figures into the report.

``run_all`` is ``python -m benchmarks``; ``child`` runs each measurement in a
process of its own; ``report`` renders docs/benchmarks.md; ``stats`` holds
the percentiles; ``settings`` and ``benchapp`` are the Django project the
scenarios run in, with the task functions they measure.
"""
