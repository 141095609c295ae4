"""One module per measured scenario, each runnable on its own.

``python -m benchmarks.scenarios.<name> --help``; each prints a table, or with
``--json`` its figures as JSON on its last line of output, which
``python -m benchmarks`` collects into the report.
"""
