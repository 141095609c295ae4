"""What the long-running commands share: logging set-up and signal handling."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def configure_logging(verbosity: int) -> None:
    """Map ``-v`` to the package's log level; add a handler if the project has none."""
    logger = logging.getLogger("django_delayq")
    logger.setLevel(_LEVELS.get(verbosity, logging.INFO))
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
        )
        logger.addHandler(handler)


def stop_on_signals(stop: Callable[[], None], what: str) -> None:
    """SIGTERM or SIGINT once: ``stop()`` gracefully; a second one: exit now."""
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            logging.getLogger("django_delayq").warning(
                "%s: %s received, finishing what is in flight (send it again to "
                "exit at once)",
                what,
                name,
            )
            stop()
        else:
            # Work in flight is abandoned: its transactions roll back and its
            # stream entries stay pending, so another worker reclaims them.
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
