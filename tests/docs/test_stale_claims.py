"""Kinds of statement the docs once got wrong, held to the code's behaviour.

- After a Redis restart, a failover or a ``FLUSHALL``, the dispatcher
  rebuilds the index at once: a task is not "a sweep interval late" then.
  The sweep interval bounds the lateness only in the cases the faults page
  names (the outbox, a crash between a commit and its Redis write, a
  snapshot loaded without a restart, a failback, evictions, a task that lost
  its worker too and waits for the visibility timeout). A paragraph
  elsewhere that pairs a restart or failover with a sweep interval must
  name one of those cases.
- Every migration after the initial one is described in the upgrading guide:
  existing installations read there what ``migrate`` will do to them.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs_text import DOCS, pages, prose

FAULTS_PAGE = DOCS / "guide" / "faults.md"
UPGRADING_PAGE = DOCS / "guide" / "upgrading.md"
MIGRATIONS = DOCS.parent / "django_delayq" / "migrations"

SWEEP_INTERVAL = re.compile(
    r"sweep(er's)? interval|the (sweeper's )?next (sweep|pass)", re.I
)
RECOVERY_EVENT = re.compile(
    r"restart|fail(s|ed)? ?over|FLUSHALL|back empty|loses? (its )?data", re.I
)
#: The cases the faults page bounds by a sweep interval.
SWEEP_BOUNDED_CASES = re.compile(
    r"outbox|between (its|a) commit|DEBUG RELOAD|snapshot|failback|evict"
    r"|visibility timeout|VISIBILITY_TIMEOUT",
    re.I,
)


LIST_ITEM = re.compile(r"^\s*(-|\*|\d+\.) ")


def paragraphs(path: Path) -> list[tuple[int, str]]:
    """The page's prose, in paragraphs (a table row is one), with the line
    each starts on."""
    found: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, line in enumerate(prose(path).splitlines(), start=1):
        if line.lstrip().startswith("|"):
            if current:
                found.append((start, " ".join(current)))
                current = []
            found.append((number, line))
        elif line.strip():
            if current and LIST_ITEM.match(line):
                found.append((start, " ".join(current)))
                current = []
            if not current:
                start = number
            current.append(line.strip())
        elif current:
            found.append((start, " ".join(current)))
            current = []
    if current:
        found.append((start, " ".join(current)))
    return found


def waits_for_a_sweep_after_recovery(text: str) -> bool:
    return bool(
        SWEEP_INTERVAL.search(text)
        and RECOVERY_EVENT.search(text)
        and not SWEEP_BOUNDED_CASES.search(text)
    )


def recovery_claims(path: Path) -> list[str]:
    return [
        f"{path.relative_to(DOCS.parent)}:{line}: {text}"
        for line, text in paragraphs(path)
        if waits_for_a_sweep_after_recovery(text)
    ]


def test_no_page_says_recovery_after_a_restart_waits_for_a_sweep():
    stale = [
        claim
        for page in pages()
        if page != FAULTS_PAGE
        for claim in recovery_claims(page)
    ]
    assert not stale, (
        "These paragraphs pair a Redis restart or failover with a sweep "
        "interval, but the dispatcher rebuilds at once (docs/guide/faults.md); "
        "name the case the sweep bounds, or say so:\n" + "\n".join(stale)
    )


def test_the_guard_catches_the_statement_it_was_written_for(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "After a Redis restart the sweeper indexes the tasks again, up to a\n"
        "sweep interval late.\n\n"
        "Loaded without a restart (`DEBUG RELOAD`): one sweep interval.\n"
    )
    claims = [
        text for _, text in paragraphs(page) if waits_for_a_sweep_after_recovery(text)
    ]
    assert claims == [
        "After a Redis restart the sweeper indexes the tasks again, up to a "
        "sweep interval late."
    ]


def test_every_migration_is_described_in_the_upgrading_guide():
    text = UPGRADING_PAGE.read_text()
    described = {int(number) for number in re.findall(r"\b0(\d{3})\b", text)}
    missing = sorted(
        path.stem
        for path in MIGRATIONS.glob("0*.py")
        if path.stem != "0001_initial" and int(path.stem[:4]) not in described
    )
    assert not missing, (
        f"docs/guide/upgrading.md does not describe {missing}: add what each "
        "does to an existing installation under 'What existing installations "
        "must do'."
    )
