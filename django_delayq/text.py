"""Strings every supported database can store, at sizes a page can show.

Two kinds of ``str`` pass Python's type checks but not a database: a NUL
character (``"\\x00"``), which PostgreSQL refuses in ``text`` and ``jsonb``
(``DataError``, which also breaks the caller's transaction), and a lone
surrogate (``"\\ud800"``, what decoding bytes with ``surrogateescape`` leaves
behind), which is not Unicode at all and cannot be encoded as UTF-8 for any
database. Both are refused before anything is written, with the place named.

Text shown to a person is cut to a size a page or a terminal can show
(:func:`clipped`, :func:`short_repr`), and text anyone may have written
shown with its unprintable characters escaped (:func:`printable`).
"""

from __future__ import annotations

from .exceptions import DelayQueueException


def check_text(value: str, where: str, error: type[DelayQueueException]) -> str:
    """Return ``value`` if a database can store it; else raise ``error``
    naming ``where`` (``"args[0]"``, ``"key="``...)."""
    if "\x00" in value:
        raise error(
            f"{where} contains a NUL character ('\\x00') at position "
            f"{value.index(chr(0))}, which PostgreSQL cannot store; remove it, "
            f"or pass binary data encoded (e.g. base64)."
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(
                f"{where} contains a lone surrogate ({value[exc.start]!r}) at "
                f"position {exc.start}, which is not valid Unicode text; it "
                f"usually comes from bytes decoded with errors='surrogateescape'. "
                f"Decode them properly, or pass them encoded (e.g. base64)."
            ) from None
    return value


def short_repr(value: object, limit: int = 200) -> str:
    """``repr(value)`` for an error message, cut after ``limit`` characters;
    a huge int is described instead, as its digits say nothing (and past
    4,300 of them Python refuses to print it, also inside a list)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} holding an int too large to print"
    return text if len(text) <= limit else f"{text[:limit]}..."


def printable(text: str, limit: int = 200) -> str:
    """``text`` for a terminal or a line of a log, where it may come from
    anyone who can write to Redis (a worker's name in its heartbeat).

    Each character that is not printable (ESC, which drives a terminal; NUL;
    a line break, which forges a line; a bidirectional override...) is
    written as ``repr`` writes it, and a backslash doubled, so that nothing
    passes for an escape. Past ``limit`` characters the rest is cut, and
    counted.
    """
    if len(text) <= limit and text.isprintable() and "\\" not in text:
        return text
    shown: list[str] = []
    size = 0
    for index, char in enumerate(text):
        piece = (
            "\\\\" if char == "\\" else char if char.isprintable() else repr(char)[1:-1]
        )
        if size + len(piece) > limit:
            # Whole escapes only: a cut one would read as another character.
            return "".join(shown) + f"...[{len(text) - index:,} more characters]"
        shown.append(piece)
        size += len(piece)
    return "".join(shown)


#: The most of an attempt's error message (``"Type: message"``) a row keeps.
MAX_ERROR_CHARS = 4_000
#: The most of an attempt's traceback a row keeps.
MAX_TRACEBACK_CHARS = 32_000


def clipped(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters; else its start and its
    end with a marker saying how much was cut between them.

    Both ends stay because both matter: an error starts with its type, a
    traceback ends with the exception and the frame that raised it.
    """
    if len(text) <= limit:
        return text
    # Room for the marker at its longest (no more than len(text) can be cut),
    # so that the result never exceeds the limit and the count is exact.
    keep = max(limit - len(_marker(len(text))), 0)
    head = keep // 2
    tail = keep - head
    return text[:head] + _marker(len(text) - keep) + text[len(text) - tail :]


def _marker(cut: int) -> str:
    return f"\n[... {cut:,} characters cut ...]\n"
