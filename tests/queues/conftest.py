"""The pausing tests start real worker processes too."""

from tests.acceptance.processes import processes

__all__ = ["processes"]
