"""The reference pages say what the code does: every ``DELAYQ`` key with
its default and bounds, every option of every command, and every log line
or message the docs quote.

The runnable examples (tests/docs/test_examples.py) keep the
code blocks true; these keep the prose's facts true. What the commands do
with each documented bound, and which Redis commands the docs say are sent,
need the servers: tests/docs/test_claims_on_servers.py.
"""

from __future__ import annotations

import ast
import functools
import re

import pytest
from django.core.management import load_command_class

from django_delayq.conf.problems import find_problems
from django_delayq.conf.schema import DEFAULTS
from tests.support.docs_text import DOCS, fences, inline_code, pages

PACKAGE = DOCS.parent / "django_delayq"
SETTINGS = DOCS / "reference" / "settings.md"
COMMANDS = DOCS / "reference" / "commands.md"
#: The pages that describe the commands, each command in a section of its own.
COMMAND_PAGES = [COMMANDS, DOCS / "reference" / "task-commands.md"]
COMMAND_NAMES = sorted(
    path.stem for path in (PACKAGE / "management" / "commands").glob("delayq_*.py")
)
#: Django's own options of every management command, documented once at
#: the top of the commands' page.
DJANGO_OPTIONS = {
    "--help",
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


# -- settings -----------------------------------------------------------------


def settings_rows() -> dict[str, list[str]]:
    """The settings table: key -> its cells after the key."""
    rows = {}
    for line in SETTINGS.read_text().splitlines():
        match = re.match(r"^\| \{ref\}`([A-Z_]+) <setting-[\w-]+>` \|(.*)\|$", line)
        if match:
            rows[match[1]] = [cell.strip() for cell in match[2].split("|")]
    return rows


def test_every_setting_has_a_row_and_a_section_with_its_default():
    text = SETTINGS.read_text()
    rows = settings_rows()
    assert set(rows) == set(DEFAULTS)
    sections = set(re.findall(r"^\(setting-[\w-]+\)=\n## `([A-Z_]+)`$", text, re.M))
    # DELAYQ_METRICS_TOKEN is a setting of its own, next to DELAYQ.
    assert sections - {"DELAYQ_METRICS_TOKEN"} == set(DEFAULTS)
    for key, (_, default, _) in rows.items():
        written = re.match(r"^`([^`]+)`", default)
        assert written is not None, key
        assert ast.literal_eval(written[1]) == DEFAULTS[key], key


def _bounds(cell: str) -> tuple[float, float] | None:
    match = re.match(r"^([\d.]+) to (\d+)\b", cell)
    return None if match is None else (float(match[1]), float(match[2]))


def _number_refused(key: str, value: float) -> bool:
    raw = {"REDIS_URL": "redis://127.0.0.1:6379/0", key: value}
    return any(key in problem.msg for problem in find_problems(raw))


def test_the_bounds_in_the_settings_table_are_the_validators():
    bounded = 0
    for key, (kind, _, allowed) in settings_rows().items():
        bounds = _bounds(allowed)
        if bounds is None:
            continue
        bounded += 1
        low, high = bounds
        integer = kind == "`int`"
        cast = int if integer else float
        assert not _number_refused(key, cast(low)), key
        assert not _number_refused(key, cast(high)), key
        assert _number_refused(key, cast(high + 1 if integer else high * 1.001)), key
        below = low - 1 if integer or low == 0 else low / 2
        assert _number_refused(key, cast(below)), key
    assert bounded >= 10


def test_the_settings_example_names_only_real_keys():
    example = next(
        fence for fence in fences(SETTINGS) if "KEY_PREFIX" in fence.body
    ).body
    assert set(re.findall(r'^\s+"([A-Z_]+)":', example, re.M)) <= set(DEFAULTS)


# -- commands -----------------------------------------------------------------


def parser_options(name: str) -> set[str]:
    parser = load_command_class("django_delayq", name).create_parser("manage.py", name)
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    } - DJANGO_OPTIONS


def command_section(name: str) -> str:
    """The section of the command pages that describes ``name``: exactly one."""
    sections = []
    for page in COMMAND_PAGES:
        text = page.read_text()
        start = text.find(f"## `{name}`")
        if start != -1:
            end = text.find("\n## ", start + 1)
            sections.append(text[start : end if end != -1 else len(text)])
    assert len(sections) == 1, f"{name}: {len(sections)} sections in {COMMAND_PAGES}"
    return sections[0]


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_every_option_of_each_command_is_documented(name):
    section = command_section(name)
    synopsis = re.search(r"```console\n\$ python manage\.py (.*?)\n```", section, re.S)
    assert synopsis is not None, name
    in_synopsis = set(re.findall(r"\[(--[\w-]+)", synopsis[1]))
    described = {
        option
        for line in re.findall(r"^(`--.*)$", section, re.M)
        for option in re.findall(r"`(--[\w-]+)", line)
    }
    assert in_synopsis == parser_options(name) - {"--verbosity"}
    assert described == parser_options(name) - {"--verbosity"}


def test_the_commands_page_counts_the_commands():
    number = re.search(
        r"^All (\w+) also take Django's standard", COMMANDS.read_text(), re.M
    )
    words = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
    assert number is not None
    assert words[number[1]] == len(COMMAND_NAMES)


# -- quoted log lines ---------------------------------------------------------------

#: What stands for any text, in a pattern of the code or of the docs.
ANY = "\0"
_PERCENT = re.compile(r"%(\([^)]*\))?[-#0 +]*\d*(\.\d+)?[sdrgfixX%]")
#: How the docs write a part of a message they do not spell out.
_ELIDED = re.compile(r"\.\.\.|…|<[^<>]+>|\b(?:N|M|S|NAME|PORT|ADDR)\b")
#: A line a process logs or prints: the prefixes of the loops' lines (and
#: not a Procfile's lines, which name a command).
_LOG_LINE = re.compile(
    r"^(?:(?:DEBUG|INFO|WARNING|ERROR)\s+)?"
    r"((?:delayq_\w+|sweep|dispatcher|worker|supervisor)\b[^:`]{0,40}: "
    r"(?!python ).+)$"
)


@functools.cache
def code_messages() -> list[str]:
    """Every string of the package with its placeholders (``%s``, an
    f-string's fields) as :data:`ANY`; those with a few letters of text."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        inside_fstrings = {
            id(value)
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            for value in node.values
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                found.add(
                    "".join(
                        part.value if isinstance(part, ast.Constant) else ANY
                        for part in node.values
                    )
                )
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in inside_fstrings
            ):
                found.add(
                    _PERCENT.sub(lambda m: "%" if m[0] == "%%" else ANY, node.value)
                )
    return [text for text in found if len(re.findall(r"[A-Za-z]", text)) >= 6]


def doc_pattern(quoted: str) -> str:
    """A quote as a pattern: what it elides is :data:`ANY`."""
    return _ELIDED.sub(ANY, re.sub(r"^CommandError: ", "", quoted))


def could_be_the_same(doc: str, code: str) -> bool:
    """Whether some text matches both patterns (:data:`ANY` matching any
    text on either side): a walk over pairs of positions in the two."""
    todo, seen = [(0, 0)], {(0, 0)}
    while todo:
        i, j = todo.pop()
        if i == len(doc) and j == len(code):
            return True
        steps = []
        if i < len(doc) and doc[i] == ANY:
            # Matches nothing more, or one more character of the code.
            steps += [(i + 1, j)] + ([(i, j + 1)] if j < len(code) else [])
        if j < len(code) and code[j] == ANY:
            steps += [(i, j + 1)] + ([(i + 1, j)] if i < len(doc) else [])
        if i < len(doc) and j < len(code) and doc[i] == code[j] != ANY:
            steps.append((i + 1, j + 1))
        for step in steps:
            if step not in seen:
                seen.add(step)
                todo.append(step)
    return False


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z]{5,}", text))


def written_by_the_code(quoted: str) -> bool:
    """Whether a message of the code reads as ``quoted``: both patterns
    match one text, and they share a word of the code's own text (so that
    placeholders and elisions alone do not make a match)."""
    # A command or a loop may write another's message after its own name
    # ("sweep: " + the sweeper's progress line).
    candidates = [quoted, re.sub(r"^[\w ]+: ", "", quoted)]
    for text in candidates:
        pattern = doc_pattern(text)
        words = _words(pattern.replace(ANY, " "))
        for message in code_messages():
            if words & _words(message.replace(ANY, " ")) and could_be_the_same(
                pattern, message
            ):
                return True
    return False


def quoted_lines() -> list[tuple[str, str]]:
    """(where, text) of each whole line the docs quote as logged or printed
    by a process: inline code that starts as such a line does (a logger's
    prefix, a command's name, ``CommandError:``), and each such line of a
    ``text`` block."""
    found = []
    for path in pages():
        where = path.relative_to(DOCS.parent)
        for line, code in inline_code(path):
            if _LOG_LINE.match(code) or code.startswith("CommandError: "):
                found.append((f"{where}:{line}", code))
        # A quote of placeholders only (`CommandError: <the reason>`) says
        # nothing to check.
        for fence in fences(path):
            if fence.language != "text":
                continue
            for offset, text in enumerate(fence.body.splitlines()):
                match = _LOG_LINE.match(text)
                if match:
                    found.append((f"{where}:{fence.line + offset}", match[1]))
    return [
        (where, text)
        for where, text in found
        if _words(doc_pattern(text).replace(ANY, " "))
    ]


def test_the_check_finds_quotes_and_can_fail():
    quotes = quoted_lines()
    assert len(quotes) >= 30
    assert written_by_the_code("sweep: task <id> was missing from Redis; indexed again")
    assert written_by_the_code("sweep: ConnectionError: ...; retrying in 30 s")
    # Wording the code never wrote (the sweeper's line of an earlier release).
    assert not written_by_the_code("sweep: Redis unavailable (...); trying again later")
    assert not written_by_the_code("sweep: task <id> was lost by Redis; indexed again")


def test_every_message_the_docs_quote_is_written_by_the_code():
    missing = [
        f"{where}: {text}"
        for where, text in quoted_lines()
        if not written_by_the_code(text)
    ]
    assert missing == []


API = DOCS / "reference" / "api.md"


def _documented_objects() -> set[str]:
    """What the API reference documents with autodoc: dotted paths."""
    return set(
        re.findall(
            r"^\.\. auto(?:function|class|data|exception)::\s+(\S+)",
            API.read_text(),
            re.M,
        )
    )


def test_the_api_reference_documents_every_public_name():
    """docs/index.md says the reference lists every function: every name the
    package exports is documented there, under the name a user imports."""
    import django_delayq

    documented = _documented_objects()
    missing = [
        name
        for name in django_delayq.__all__
        if f"django_delayq.{name}" not in documented
    ]
    assert not missing, f"not in docs/reference/api.md: {missing}"


def test_the_api_reference_documents_every_model():
    from django.apps import apps

    documented = _documented_objects()
    missing = [
        model.__name__
        for model in apps.get_app_config("django_delayq").get_models()
        if f"django_delayq.models.{model.__name__}" not in documented
    ]
    assert not missing, f"models not in docs/reference/api.md: {missing}"
