from __future__ import annotations

import importlib.util

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DelayQueueConfig(AppConfig):
    name = "django_delayq"
    label = "django_delayq"
    verbose_name = _("Delay queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Wiring only: no settings are read and no connection is opened here.
        from django.core.checks import register
        from django.core.signals import setting_changed

        from . import conf
        from .checks import config, deploy

        register(config.check_settings, "django_delayq")
        register(config.check_tasks, "django_delayq")
        register(config.check_databases, "django_delayq")
        register(config.check_database_vendor, "django_delayq")
        register(config.check_tasks_framework, "django_delayq")
        register(config.check_periodic, "django_delayq")
        register(config.check_middleware, "django_delayq")
        register(config.check_celery_eager, "django_delayq")
        # Needs the database and Redis: run by `check --database` and by
        # `migrate`, as Django's own database checks are.
        register(config.check_key_prefix_owner, "django_delayq", "database")
        # Asks the server which it is (MySQL or MariaDB, which version): a
        # database check only, so that checks run by tag alone never connect.
        register(config.check_database_server, "database")
        register(deploy.check_deployment, "django_delayq", deploy=True)
        setting_changed.connect(conf.reset, dispatch_uid="django_delayq.conf.reset")
        setting_changed.connect(
            _reset_connections, dispatch_uid="django_delayq.connection.reset"
        )
        # A worker runs the ticks of DELAYQ["PERIODIC"] entries whose
        # function is no @task: it finds them in the setting by name. First,
        # as the cheaper look-up (the setting, read once per change).
        from . import registry
        from .recurring.declared import task_from_setting

        registry.add_fallback(task_from_setting)
        _install_tasks_backend()
        _connect_sentry()


def _reset_connections(**kwargs: object) -> None:
    if kwargs.get("setting") in ("DELAYQ", "CACHES"):
        from .store import connection

        connection.reset()


def _connect_sentry() -> None:
    """Report to Sentry once it is initialised, when sentry-sdk is installed
    (as Sentry enables its framework integrations by default): connects
    receivers that do nothing until then. Costs a look-up otherwise."""
    if importlib.util.find_spec("sentry_sdk") is None:
        return
    from .contrib.sentry.receivers import connect

    connect()


def _install_tasks_backend() -> None:
    """Let workers run tasks enqueued through Django's Tasks framework.

    Only when the framework is installed (Django 6, or the django-tasks
    backport): imports and connects receivers, no I/O.
    """
    from .contrib.tasks import compat as tasks_compat

    if tasks_compat.AVAILABLE:
        from .contrib.tasks.bridge import install

        install()
