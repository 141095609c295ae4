"""The check ids, at the path the checks documented them under.

They are defined in :mod:`django_delayq.conf.check_ids`, below the settings
that report them, so the configuration never imports the checks.
"""

from __future__ import annotations

from ..conf.check_ids import *  # noqa: F403
