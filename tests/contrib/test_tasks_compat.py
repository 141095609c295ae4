"""The Tasks framework's names are found by what a release defines, not by
its version: the backport renames its exceptions from one release to the
next, without aliases."""

from __future__ import annotations

import types

import pytest

from django_delayq.contrib.tasks.compat import first_of


def _exceptions_module(**names: type[Exception]) -> types.ModuleType:
    module = types.ModuleType("django_tasks.exceptions")
    for name, value in names.items():
        setattr(module, name, value)
    return module


class Old(Exception):
    pass


class New(Exception):
    pass


@pytest.mark.parametrize(
    ("defined", "found"),
    [
        ({"InvalidTaskError": Old}, Old),  # django-tasks 0.x
        ({"InvalidTask": New}, New),  # the release that renamed it
        ({"InvalidTask": New, "InvalidTaskError": Old}, New),  # both, in between
    ],
)
def test_either_spelling_is_found(defined, found):
    module = _exceptions_module(**defined)
    assert first_of(module, "InvalidTask", "InvalidTaskError") is found


def test_neither_spelling_is_an_import_error_naming_both():
    """So the framework counts as missing, and the backend says what to
    install, instead of failing with an AttributeError at import."""
    with pytest.raises(ImportError, match="none of InvalidTask, InvalidTaskError"):
        first_of(_exceptions_module(), "InvalidTask", "InvalidTaskError")
