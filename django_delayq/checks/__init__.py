"""Django system checks: their ids, the configuration checks and the
deployment checks (``check --deploy``).

Nothing is imported here: the checks are registered by the app config
(:mod:`django_delayq.apps`) from their own modules. Their ids are defined
with the settings (:mod:`django_delayq.conf.check_ids`), whose problems
carry them; :mod:`~django_delayq.checks.ids` shows them here too.
"""
