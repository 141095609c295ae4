"""Django settings used only to import django-delayq while building the docs.

Autodoc imports the models, which need a configured Django. Nothing here
connects to a database or to Redis during the build.
"""

from __future__ import annotations

SECRET_KEY = "docs-only-not-secret"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_delayq",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DELAYQ = {"REDIS_URL": "redis://127.0.0.1:6379/0"}
