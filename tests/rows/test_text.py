"""Clipping stored text: within the limit, both ends kept, the cut counted."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from django_delayq.text import clipped


def test_text_within_the_limit_is_kept_whole():
    assert clipped("ValueError: short", 100) == "ValueError: short"


def test_longer_text_keeps_its_start_and_end_and_says_how_much_was_cut():
    text = "ValueError: " + "x" * 10_000 + " the end"
    out = clipped(text, 200)
    assert len(out) <= 200
    assert out.startswith("ValueError: xxx")
    assert out.endswith("xxx the end")
    assert "\n[... 9,8" in out


@given(text=st.text(min_size=0, max_size=3000), limit=st.integers(60, 2000))
def test_the_marker_counts_exactly_what_is_missing(text, limit):
    out = clipped(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
        return
    [marker] = re.findall(r"\n\[\.\.\. ([\d,]+) characters cut \.\.\.\]\n", out)
    head, _, tail = out.partition(f"\n[... {marker} characters cut ...]\n")
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + int(marker.replace(",", "")) + len(tail) == len(text)
