"""Reading the Markdown pages of ``docs/`` as text: their fenced blocks and
their inline code, for the tests that hold the prose to the code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})(?P<info>.*)$")
_OPTION = re.compile(r"^:(?P<name>[\w-]+):\s*(?P<value>.*)$")
_INLINE = re.compile(r"(?<!`)`(?P<code>[^`]+)`(?!`)")


@dataclass(frozen=True)
class Fence:
    """A fenced block: its language (``text``, ``ini``...), MyST options."""

    path: Path
    line: int  # of its first line of content
    language: str
    options: dict[str, str]
    body: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(DOCS.parent)}:{self.line}"


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def fences(path: Path) -> Iterator[Fence]:
    """Each fenced block of a page, ```` ```ini ```` and
    ```` ```{code-block} ini ```` alike (``:name:`` lines become options)."""
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        language = info.split("}", 1)[1].strip() if info.startswith("{") else info
        body_start = index + 1
        end = body_start
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = lines[body_start:end]
        options = {}
        while body and (option := _OPTION.match(body[0])):
            options[option["name"]] = option["value"]
            body, body_start = body[1:], body_start + 1
        if body and not body[0].strip() and options:
            body, body_start = body[1:], body_start + 1
        yield Fence(path, body_start + 1, language, options, "\n".join(body) + "\n")
        index = end + 1


def prose(path: Path) -> str:
    """The page without its fenced blocks (their lines left blank, so that
    line numbers stay those of the file)."""
    lines = path.read_text().splitlines()
    inside: str | None = None
    kept = []
    for line in lines:
        match = _FENCE.match(line)
        if inside is None and match is not None:
            inside = match["fence"]
            kept.append("")
        elif inside is not None:
            if line.strip() == inside:
                inside = None
            kept.append("")
        else:
            kept.append(line)
    return "\n".join(kept)


def inline_code(path: Path) -> Iterator[tuple[int, str]]:
    """Each inline code span of the page's prose, with its line, its
    whitespace (a span may wrap) collapsed to single spaces."""
    text = prose(path)
    for match in _INLINE.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, " ".join(match["code"].split())
