"""The how-to guides' configurations (docs/howto/): each parses as its tool reads it
(systemd and supervisord as INI, Compose and Kubernetes as YAML), each
``manage.py delayq_*`` command line in them parses with that command's own
option parser, and each stop timeout outlasts the worker's grace period."""

from __future__ import annotations

import configparser
import re
import shlex
from typing import Any

import pytest
import yaml
from django.core.management import load_command_class

from tests.support.docs_text import DOCS, Fence, fences

PAGES = sorted((DOCS / "howto").glob("*.md"))
EXAMPLES = {
    fence.options["name"]: fence
    for page in PAGES
    for fence in fences(page)
    if fence.options.get("name", "").startswith("deploy-")
}
#: What a worker supervisor needs before the process manager's SIGKILL.
DEFAULT_GRACE_PERIOD = 30.0


def ini(fence: Fence) -> configparser.RawConfigParser:
    # No interpolation: systemd's %i and supervisord's %(...)s are theirs.
    parser = configparser.RawConfigParser(strict=False, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(fence.body)
    return parser


def command_lines(node: Any) -> list[list[str]]:
    """Every ``manage.py delayq_*`` command line in a parsed document."""
    found = []
    if isinstance(node, dict):
        command = node.get("command")
        if isinstance(command, list) and "manage.py" in command:
            found.append([*command, *node.get("args", [])])
        for value in node.values():
            found += command_lines(value)
    elif isinstance(node, list):
        for value in node:
            found += command_lines(value)
    elif isinstance(node, str) and re.search(r"manage\.py delayq_", node):
        found.append(shell_command(node))
    return [line for line in found if any(w.startswith("delayq_") for w in line)]


def shell_command(line: str) -> list[str]:
    """The first simple command of a shell line (up to ``>``, ``;``...)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if set(word) <= set("<>;&|()"):
            break
        words.append(word)
    return words


def parsed(words: list[str]) -> tuple[str, Any]:
    """The command's name and its options, as its own parser reads them."""
    index = next(i for i, word in enumerate(words) if word.startswith("delayq_"))
    name = words[index]
    parser = load_command_class("django_delayq", name).create_parser("manage.py", name)
    return name, parser.parse_args(words[index + 1 :])


def grace_period(words: list[str]) -> float:
    name, options = parsed(words)
    assert name == "delayq_worker"
    return options.grace_period or DEFAULT_GRACE_PERIOD


def seconds(value: str | int) -> float:
    match = re.fullmatch(r"(\d+)(s?)", str(value))
    assert match is not None, value
    return float(match[1])


def test_the_page_has_each_kind_of_example():
    assert set(EXAMPLES) == {
        "deploy-systemd-worker",
        "deploy-systemd-dispatcher",
        "deploy-systemd-sweeper",
        "deploy-supervisord",
        "deploy-compose",
        "deploy-kubernetes",
        "deploy-kubernetes-secret",
        "deploy-kubernetes-migrate",
        "deploy-kubernetes-network-policy",
        "deploy-kubernetes-service-monitor",
    }


@pytest.mark.parametrize(
    "name", sorted(n for n in EXAMPLES if n.startswith("deploy-systemd"))
)
def test_a_systemd_unit_parses_and_runs_a_real_command(name):
    unit = ini(EXAMPLES[name])
    assert set(unit.sections()) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    line = shlex.split(service["ExecStart"])
    command, _ = parsed(line)
    assert service["Restart"] == "always"
    if command == "delayq_worker":
        assert seconds(service["TimeoutStopSec"]) > grace_period(line)


def test_the_supervisord_programs_parse_and_run_real_commands():
    config = ini(EXAMPLES["deploy-supervisord"])
    programs = [s for s in config.sections() if s.startswith("program:")]
    commands = {}
    for section in programs:
        program = config[section]
        line = shlex.split(program["command"])
        commands[parsed(line)[0]] = (program, line)
        assert program["stopsignal"] == "TERM"
        assert program["autorestart"] == "true"
    assert set(commands) == {"delayq_dispatch", "delayq_worker", "delayq_sweep"}
    program, line = commands["delayq_worker"]
    assert seconds(program["stopwaitsecs"]) > grace_period(line)


def test_the_compose_file_parses_and_runs_real_commands():
    document = yaml.safe_load(EXAMPLES["deploy-compose"].body)
    commands = {}
    for service in document["services"].values():
        for line in command_lines(service):
            commands[parsed(line)[0]] = (service, line)
    assert set(commands) == {"delayq_dispatch", "delayq_worker", "delayq_sweep"}
    service, line = commands["delayq_worker"]
    assert seconds(service["stop_grace_period"]) > grace_period(line)


def test_the_kubernetes_manifests_parse_and_run_real_commands():
    documents = list(yaml.safe_load_all(EXAMPLES["deploy-kubernetes"].body))
    assert {d["kind"] for d in documents} == {"Deployment"}
    commands = {}
    for document in documents:
        pod = document["spec"]["template"]["spec"]
        for container in pod["containers"]:
            line = [*container["command"], *container.get("args", [])]
            commands[parsed(line)[0]] = (pod, line)
            probe = container.get("readinessProbe", {}).get("exec", {})
            for words in command_lines(probe.get("command", [])):
                parsed(words)
    assert set(commands) == {"delayq_dispatch", "delayq_worker", "delayq_sweep"}
    pod, line = commands["delayq_worker"]
    assert pod["terminationGracePeriodSeconds"] > grace_period(line)


def test_the_migrate_job_migrates_with_the_deployments_image_and_secrets():
    (job,) = yaml.safe_load_all(EXAMPLES["deploy-kubernetes-migrate"].body)
    (secret,) = yaml.safe_load_all(EXAMPLES["deploy-kubernetes-secret"].body)
    assert job["kind"] == "Job"
    assert secret["kind"] == "Secret"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"][1:3] == ["manage.py", "migrate"]
    deployments = list(yaml.safe_load_all(EXAMPLES["deploy-kubernetes"].body))
    for document in deployments:
        (other,) = document["spec"]["template"]["spec"]["containers"]
        assert other["image"] == container["image"]
        assert other["envFrom"] == container["envFrom"]
        assert other["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]


def test_a_misspelt_option_is_caught():
    from django.core.management import CommandError

    with pytest.raises(CommandError):
        parsed(["python", "manage.py", "delayq_worker", "--grace-periods", "30"])
