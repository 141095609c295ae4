"""The supervisor tests start real worker processes."""

from tests.acceptance.processes import processes

__all__ = ["processes"]
