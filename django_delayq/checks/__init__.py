"""Django system checks: their ids, the configuration checks and the
deployment checks (``check --deploy``).

Nothing is imported here: :mod:`~django_delayq.checks.ids` is imported by the
configuration (each problem found in ``DELAYQ`` carries its id), which the
checks themselves read, so the checks are registered by the app config
(:mod:`django_delayq.apps`) from their own modules.
"""
