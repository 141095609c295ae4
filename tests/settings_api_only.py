"""The test settings of an API-only project: no admin, whose autodiscovery
imports django-delayq's admin (and so its API) in every process that loads
the apps. A process under these settings imports of django-delayq only what
its own code imports."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django.contrib.admin"]
# No URLs: the test URLconf routes to the admin.
ROOT_URLCONF = __name__
urlpatterns: list[object] = []
