"""Every page of the documentation stays short enough to read as one kind
of page (a tutorial, a topic guide, a how-to guide or a reference page):
600 lines at most; a longer page is split by kind."""

from __future__ import annotations

import pytest

from tests.support.docs_text import DOCS, pages

MAX_LINES = 600


def test_the_pages_are_found():
    found = {page.relative_to(DOCS).as_posix() for page in pages()}
    assert {"index.md", "quickstart.md", "guide/running.md"} <= found


@pytest.mark.parametrize(
    "page", pages(), ids=lambda page: page.relative_to(DOCS).as_posix()
)
def test_a_page_is_at_most_600_lines(page):
    lines = len(page.read_text().splitlines())
    assert lines <= MAX_LINES, f"{page.relative_to(DOCS)}: {lines} lines"
