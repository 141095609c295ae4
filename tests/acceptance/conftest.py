"""Fixtures of the acceptance tests."""

from __future__ import annotations

from tests.acceptance.processes import processes

__all__ = ["processes"]
