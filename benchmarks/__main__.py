"""``python -m benchmarks``: every scenario and peer in one run, and the report.

The run is :mod:`benchmarks.harness.run_all`; this module only gives it the
short command that ``make bench`` and the docs name.
"""

from __future__ import annotations

import sys

from benchmarks.harness.run_all import main

if __name__ == "__main__":
    sys.exit(main())
