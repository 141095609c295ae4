"""What the reference pages say that needs the servers to check: the bounds
of every command option (a value just past one is refused, the bound itself
is run), and the Redis commands the pages say django-delayq sends.

tests/docs/test_claims.py checks the rest of the prose's facts.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import pytest
import redis
from django.core.management import CommandError, call_command

from django_delayq.management.processes import process_options
from tests.docs.test_claims import COMMAND_NAMES, command_section
from tests.support.docs_text import DOCS, inline_code
from tests.support.redis_acl import COMMANDS

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Bound:
    command: str
    option: str  # "--batch-size"
    low: float | None  # None: the page says there is no bound
    low_included: bool | None
    high: float | None
    integer: bool

    @property
    def dest(self) -> str:
        return self.option[2:].replace("-", "_")

    def __str__(self) -> str:
        return f"{self.command} {self.option}"


#: How the commands' page words a bound, and what it means:
#: (low, low included, high).
_WORDINGS = [
    (r"from (\d[\d.]*) to (\d[\d.]*)", lambda m: (float(m[1]), True, float(m[2]))),
    (
        r"more than (\d[\d.]*) and at most (\d[\d.]*)",
        lambda m: (float(m[1]), False, float(m[2])),
    ),
    (r"0 or more", lambda m: (0.0, True, None)),
    (r"a positive (?:whole )?number", lambda m: (0.0, False, None)),
    (r"no upper bound", lambda m: (None, None, None)),
]


def readings() -> dict[str, list[Bound]]:
    """Each option of the page with a bound -> every bound its paragraph
    states (one, unless the paragraph contradicts itself)."""
    found: dict[str, list[Bound]] = {}
    for command in COMMAND_NAMES:
        section = command_section(command)
        for match in re.finditer(
            r"^`(--[\w-]+) (N|SECONDS|MiB)`\n: (.*?)(?=\n\n|\n`|\Z)",
            section,
            re.M | re.S,
        ):
            option, unit, text = match[1], match[2], " ".join(match[3].split())
            integer = unit in ("N", "MiB")
            for wording, meaning in _WORDINGS:
                for said in re.finditer(wording, text):
                    low, included, high = meaning(said)
                    found.setdefault(f"{command} {option}", []).append(
                        Bound(command, option, low, included, high, integer)
                    )
    return found


def documented_bounds() -> list[Bound]:
    return [
        said[0]
        for said in readings().values()
        if len(said) == 1 and said[0].low is not None
    ]


BOUNDS = documented_bounds()
#: The worker's options that make it a supervisor: their bounds are
#: checked by the command's own validation, without starting processes.
SUPERVISOR = {"--processes", "--max-tasks-per-child", "--max-memory-per-child"}
SUPERVISOR_WITH_GRACE = {*SUPERVISOR, "--grace-period"}


def test_the_page_gives_each_option_one_bound():
    contradictions = {
        option: said for option, said in readings().items() if len(said) != 1
    }
    assert contradictions == {}
    documented = {str(bound) for bound in BOUNDS}
    assert {
        "delayq_dispatch --batch-size",
        "delayq_dispatch --lease-ttl",
        "delayq_worker --concurrency",
        "delayq_worker --prefetch",
        "delayq_worker --group-size",
        "delayq_worker --group-budget",
        "delayq_worker --processes",
        "delayq_worker --max-tasks-per-child",
        "delayq_worker --max-memory-per-child",
        "delayq_worker --grace-period",
        "delayq_worker --visibility-timeout",
        "delayq_sweep --interval",
        "delayq_status --overdue",
    } <= documented


def _run(bound: Bound, value: float) -> None:
    """The command with the option at ``value``: once, where it loops."""
    value = int(value) if bound.integer else value
    if bound.option in SUPERVISOR_WITH_GRACE:
        process_options(
            {
                "processes": 1,
                "max_tasks_per_child": None,
                "max_memory_per_child": None,
                "grace_period": None,
                "once": False,
                bound.dest: value,
            }
        )
        return
    out = io.StringIO()
    if bound.command == "delayq_status":
        # It exits with its verdict: healthy, or degraded (no process runs).
        with pytest.raises(SystemExit) as verdict:
            call_command(bound.command, **{bound.dest: value}, stdout=out)
        assert verdict.value.code in (0, 1), out.getvalue()
        return
    if bound.command == "delayq_tasks":
        # It acts on the tasks its filters name: listing them changes none.
        call_command(bound.command, "list", **{bound.dest: value}, stdout=out)
        return
    call_command(bound.command, **{bound.dest: value}, once=True, stdout=out)


def _outside(bound: Bound) -> list[float]:
    step = 1 if bound.integer else 0.001
    values = [bound.low - step if bound.low_included else bound.low]
    if bound.high is not None:
        values.append(bound.high + step)
    return values


@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_a_value_past_a_documented_bound_is_refused(bound, redis_client):
    for value in _outside(bound):
        with pytest.raises(CommandError) as refused:
            _run(bound, value)
        # The message names the option, as the user wrote it or nearly.
        message = str(refused.value).replace("_", "-")
        assert bound.option[2:] in message, (bound, value, message)


@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_a_documented_bound_is_accepted(bound, redis_client):
    values = [bound.low] if bound.low_included else []
    if bound.high is not None:
        values.append(bound.high)
    if not bound.low_included and bound.high is None:
        values.append(bound.low + 1)
    for value in values:
        _run(bound, value)


# -- the Redis commands -------------------------------------------------------

#: Pages that say which commands django-delayq sends.
PAGES = [
    DOCS / "reference" / "redis.md",
    DOCS / "reference" / "redis-scripts.md",
    DOCS / "reference" / "idle-costs.md",
    DOCS / "reference" / "logging.md",
    DOCS / "guide" / "running.md",
    DOCS / "howto" / "run-locally.md",
    DOCS / "howto" / "health-checks.md",
    DOCS / "howto" / "pause-a-queue.md",
]
#: Commands with subcommands, named as ``CLIENT|SETNAME`` in an ACL.
CONTAINERS = {"client", "xgroup", "xinfo", "script", "config", "acl", "cluster"}
#: Commands the pages name that django-delayq does not send through its
#: ACL user, and why they are named.
NOT_SENT = {
    "auth": "the connection logs in with the URL's credentials; needs no grant",
    "client|setinfo": "redis-py is asked not to send it",
    "cluster|slots": "sent by redis-py's cluster client to learn the slots",
    "config": "what the deploy checks read (CONFIG GET), outside the ACL",
    "flushall": "a fault the sweeper repairs",
    "flushdb": "a data loss the dispatcher notices (the epoch marker gone)",
    "script|flush": "an operator's command that looks like a restart",
    "multi": "pipelines are not MULTI transactions",
    "script": "never sent: a missing script is sent again with EVAL",
    "acl|setuser": "the operator creates the user",
    "client|list": "what earlier versions sent to stop a worker: grant removed",
    "client|unblock": "what earlier versions sent to stop a worker: grant removed",
    "keys": "the Lua scripts' KEYS[] table",
    "debug": "a log level, not the command",
    "info": "INFO commandstats, which an operator reads",
    "scan": "an operator's clean-up of a killed test run's keys",
    "unlink": "an operator's clean-up of a killed test run's keys",
    "readonly": "the error reply of a demoted primary",
}


def server_commands(client: redis.Redis) -> set[str]:
    """Every command name this Redis knows, subcommands as ``xgroup|create``."""
    return {
        (name.decode() if isinstance(name, bytes) else str(name)).lower()
        for name in client.command_list()
    }


def named_commands(spans: list[tuple[str, str]], known: set[str]) -> dict[str, str]:
    """Each Redis command that inline code (where, code) names -> where."""
    named = {}
    for where, code in spans:
        words = code.replace("|", " ").split()
        if not words or not re.fullmatch(r"[A-Z][A-Z]+", words[0]):
            continue
        command = words[0].lower()
        if command not in known:
            continue  # a reply (NOSCRIPT), an option (NX), a setting
        subcommand = words[1] if len(words) > 1 else ""
        if command in CONTAINERS and re.fullmatch(r"[A-Z]+", subcommand):
            command += "|" + subcommand.lower()
        named.setdefault(command, where)
    return named


def unexplained(named: dict[str, str]) -> dict[str, str]:
    return {
        command: where
        for command, where in named.items()
        if command not in COMMANDS and command not in NOT_SENT
    }


def test_every_redis_command_the_pages_name_is_sent_or_explained(redis_client):
    spans = [
        (f"{page.relative_to(DOCS.parent)}:{line}", code)
        for page in PAGES
        for line, code in inline_code(page)
    ]
    named = named_commands(spans, server_commands(redis_client))
    assert len(named) >= 30
    assert unexplained(named) == {}
    # An explanation no page needs any more goes.
    assert set(NOT_SENT) <= set(named)


def test_a_command_the_code_does_not_send_is_caught(redis_client):
    spans = [("page.md:1", "SCRIPT LOAD"), ("page.md:2", "EVALSHA")]
    named = named_commands(spans, server_commands(redis_client))
    assert unexplained(named) == {"script|load": "page.md:1"}
