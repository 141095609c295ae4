"""The documented path of django-delayq's Django Tasks backend:

``TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQueueBackend"}}``

The integration lives in :mod:`django_delayq.contrib.tasks`. The exceptions
a failed result names keep this module as their path
(``exception_class_path == "django_delayq.backends.TaskCancelled"``), so
results stored by any version read back the same.
"""

from __future__ import annotations

from .contrib.tasks.backend import DelayQueueBackend, lookup
from .contrib.tasks.results import AttemptAborted, TaskCancelled

__all__ = ["AttemptAborted", "DelayQueueBackend", "TaskCancelled", "lookup"]
