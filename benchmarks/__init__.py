"""django-delayq's benchmarks: each figure beside a baseline from the same run.

``scenarios/`` holds what is measured (one module, one command each),
``peers/`` the other delay queues measured the same way, and ``harness/``
what runs them and writes docs/benchmarks.md. See README.md here.
"""
