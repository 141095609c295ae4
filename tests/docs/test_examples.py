"""The documentation's examples, run against the test Redis and database.

Convention, in the Markdown pages under ``docs/``: a block written as a MyST
``code-block`` whose ``:name:`` starts with ``example-`` is *runnable*::

    ```{code-block} python
    :name: example-schedule-delay

    task = schedule(order_cancel, delay=900, args=[42])
    assert task.status == "scheduled"
    ```

Each runnable block is executed on its own, in a fresh namespace, against an
empty database (``django_db(transaction=True)``, so ``on_commit`` callbacks
run as they do in production) and an empty Redis. A block imports what it
uses, except the quickstart's model and tasks, which this test injects from
``tests.testapp``: ``Order``, ``order_cancel`` (queue ``orders``, 4 shards,
``max_attempts=5``) and ``send_reminder`` (registered as
``"reminders.send"``). A block states what a user would see with ``assert``.

A block may run the commands to completion in the test's process, as a
user's test would: ``call_command("delayq_dispatch", once=True)``,
``call_command("delayq_worker", once=True)`` and
``call_command("delayq_sweep", once=True)``, and may define its own
``@task`` functions (the in-process worker finds them in the registry). What
that changes for the whole process (the commands' SIGTERM/SIGINT handlers,
the ``django_delayq`` logger's level and handlers, receivers connected to
django-delayq's signals, tasks the block registered) is put back afterwards
by :func:`_process_state_restored`.

A block that needs a situation the user does not create in code (Redis
unreachable, or back after an outage) gets it from its entry in
``PRECONDITIONS``.

Every other ``python`` block of the docs is an illustration: it is only
compiled, so that it stays valid Python.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_delayq import registry
from django_delayq import signals as delayq_signals
from django_delayq.recurring import declared
from django_delayq.recurring.declared import forget
from django_delayq.store import connection
from tests.testapp.models import Order
from tests.testapp.tasks import order_cancel, send_reminder

DOCS = Path(__file__).resolve().parents[2] / "docs"

# A MyST directive fence: ```{code-block} python, then ":option: value" lines,
# an optional blank line, the code, and the closing fence.
_DIRECTIVE = re.compile(
    r"^```\{code-block\} python\n"
    r"(?P<options>(?::[\w-]+:[^\n]*\n)*)"
    r"\n?(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
_PLAIN = re.compile(r"^```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
_OPTION = re.compile(r"^:(?P<name>[\w-]+):\s*(?P<value>.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # line of the block's first code line in its file
    name: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(DOCS.parent)}:{self.line}"

    def compiled(self) -> Any:
        # Pad with newlines so tracebacks give the line in the Markdown file.
        source = "\n" * (self.line - 1) + self.code
        return compile(source, str(self.path), "exec")


def _blocks() -> list[Block]:
    blocks = []
    for path in sorted(DOCS.rglob("*.md")):
        if "_build" in path.parts:
            continue
        text = path.read_text()
        for match in _DIRECTIVE.finditer(text):
            options = dict(_OPTION.findall(match.group("options")))
            line = text.count("\n", 0, match.start("code")) + 1
            blocks.append(Block(path, line, options.get("name"), match["code"]))
        for match in _PLAIN.finditer(text):
            line = text.count("\n", 0, match.start("code")) + 1
            blocks.append(Block(path, line, None, match["code"]))
    return blocks


BLOCKS = _blocks()
EXAMPLES = {
    block.name: block
    for block in BLOCKS
    if block.name is not None and block.name.startswith("example-")
}


def _redis_unreachable(request: pytest.FixtureRequest) -> None:
    """Point DELAYQ at a Redis of the test's own, then stop it."""
    request.getfixturevalue("private_redis").stop()


def _outbox_filled_redis_back(request: pytest.FixtureRequest) -> None:
    """Schedule two tasks while Redis is down, then bring Redis back."""
    server = request.getfixturevalue("private_redis")
    server.stop()
    order_cancel.schedule(args=[1], delay=900)
    send_reminder.schedule(args=[7], delay=60)
    server.start()
    connection.reset()  # drop the connections to the stopped server


PRECONDITIONS: dict[str, Callable[[pytest.FixtureRequest], None]] = {
    "example-redis-down-outbox": _redis_unreachable,
    "example-replay-outbox": _outbox_filled_redis_back,
    "example-sweep-outbox": _outbox_filled_redis_back,
}


_DELAYQ_SIGNALS = [
    value
    for value in vars(delayq_signals).values()
    if isinstance(value, delayq_signals.Signal)
]


@contextlib.contextmanager
def _process_state_restored() -> Iterator[None]:
    """Undo what running a command or connecting a receiver leaves behind."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    logger = logging.getLogger("django_delayq")
    level, log_handlers = logger.level, list(logger.handlers)
    receivers = {sig: list(sig.receivers) for sig in _DELAYQ_SIGNALS}
    tasks = set(registry.all_tasks())
    schedules = {schedule.name for schedule in declared()[0]}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        logger.setLevel(level)
        logger.handlers[:] = log_handlers
        for sig, saved in receivers.items():
            with sig.lock:
                sig.receivers = saved
                sig.sender_receivers_cache.clear()
        # Only the example's own tasks: those of an installed app's tasks
        # module that a worker autodiscovered stay registered, as the module
        # stays imported (unregistered, nothing would register them again).
        for name in set(registry.all_tasks()) - tasks:
            if registry.get(name).func.__module__.startswith("docs_"):
                registry.unregister(name)
        for schedule in declared()[0]:
            if schedule.name not in schedules:
                forget(schedule.name)


def test_the_docs_have_runnable_examples_with_unique_names():
    named = [block.name for block in BLOCKS if block.name is not None]
    assert len(named) == len(set(named)), "a code-block :name: is used twice"
    assert len(EXAMPLES) >= 20
    pages = {block.path.relative_to(DOCS).as_posix() for block in EXAMPLES.values()}
    assert {
        "guide/scheduling.md",
        "guide/arguments.md",
        "guide/transactions.md",
        "guide/dedupe.md",
        "guide/cancel-reschedule.md",
        "guide/execution.md",
        "guide/retries.md",
        "guide/running.md",
        "howto/run-locally.md",
        "reference/logging.md",
        "reference/api.md",
        "reference/signals.md",
    } <= pages
    assert set(PRECONDITIONS) <= set(EXAMPLES), "a precondition names no example"


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.name not in EXAMPLES], ids=lambda b: b.where
)
def test_illustrations_are_valid_python(block):
    block.compiled()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name, redis_client, request):
    block = EXAMPLES[name]
    precondition = PRECONDITIONS.get(name)
    if precondition is not None:
        precondition(request)
    namespace = {
        "__name__": f"docs_{name.replace('-', '_')}",
        "Order": Order,
        "order_cancel": order_cancel,
        "send_reminder": send_reminder,
    }
    with _process_state_restored():
        exec(block.compiled(), namespace)
