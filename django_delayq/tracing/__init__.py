"""OpenTelemetry traces of the tasks (:mod:`.spans`).

Native instrumentation through the OpenTelemetry API, on whenever
``opentelemetry-api`` is installed (``pip install
'django-delayq[opentelemetry]'``): ``schedule()`` records a ``create`` span
and keeps its trace context in the task's metadata; each run of the task,
minutes or days later and in another process, records a ``process`` span
linked to it. Spans are recorded and exported only where the project set up
the OpenTelemetry SDK (:func:`recording`); without the API installed,
nothing here is imported and each hook costs one flag test.
"""

from .spans import ENABLED, created, processing, recording

__all__ = ["ENABLED", "created", "processing", "recording"]
