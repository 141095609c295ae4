"""The directory the worker processes share their metrics in
(``PROMETHEUS_MULTIPROC_DIR``): made private, emptied without following
symlinks."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from django_delayq.exceptions import MetricsUnavailable
from django_delayq.metrics.server import empty_directory


def test_a_new_directory_is_private(tmp_path: Path) -> None:
    directory = tmp_path / "made" / "metrics"
    empty_directory(directory)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_emptying_removes_a_db_symlink_not_its_target(tmp_path: Path) -> None:
    directory, outside = tmp_path / "metrics", tmp_path / "outside"
    directory.mkdir()
    outside.mkdir()
    target = outside / "precious.db"
    target.write_bytes(b"keep me")
    (directory / "counter_1.db").write_bytes(b"stale")
    (directory / "gauge_2.db").symlink_to(target)
    (directory / "notes.txt").write_text("not metrics")
    empty_directory(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["notes.txt"]
    assert target.read_bytes() == b"keep me"


def test_a_symlinked_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "counter_1.db").write_bytes(b"keep me")
    link = tmp_path / "link"
    link.symlink_to(outside)
    with pytest.raises(MetricsUnavailable, match="is a symlink"):
        empty_directory(link)
    assert (outside / "counter_1.db").read_bytes() == b"keep me"


def test_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("")
    with pytest.raises(MetricsUnavailable, match="is not a directory"):
        empty_directory(path)


@pytest.mark.parametrize(
    ("mode", "who"),
    [(0o777, "every user"), (0o1777, "every user"), (0o770, "its group")],
)
def test_a_directory_others_can_write_to_is_refused_and_left_alone(
    tmp_path: Path, mode: int, who: str
) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    planted = directory / "counter_666.db"
    planted.write_bytes(b"planted")
    directory.chmod(mode)
    with pytest.raises(MetricsUnavailable) as refused:
        empty_directory(directory)
    message = str(refused.value)
    assert message.startswith(f"PROMETHEUS_MULTIPROC_DIR={str(directory)!r} ")
    assert f"is writable by {who} (mode {mode:04o})" in message
    assert f"chmod 700 {str(directory)!r}, or 750" in message
    assert planted.read_bytes() == b"planted"  # nothing done


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o755])
def test_a_directory_only_its_owner_can_write_to_is_accepted(
    tmp_path: Path, mode: int
) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_1.db").write_bytes(b"stale")
    directory.chmod(mode)
    empty_directory(directory)
    assert list(directory.iterdir()) == []


@pytest.mark.django_db
@pytest.mark.parametrize(("mode", "status"), [(0o777, 503), (0o770, 503), (0o700, 200)])
def test_the_web_metrics_view_refuses_a_directory_others_can_write_to(
    tmp_path: Path, client, settings, monkeypatch, mode: int, status: int
) -> None:
    """Under gunicorn the view sums the directory's files on each scrape."""
    settings.ROOT_URLCONF = "tests.support.metrics_urls"
    settings.DELAYQ_METRICS_TOKEN = "scrape-token"
    directory = tmp_path / "metrics"
    directory.mkdir()
    directory.chmod(mode)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    response = client.get(
        "/delayq/metrics", headers={"Authorization": "Bearer scrape-token"}
    )
    assert response.status_code == status
    if status == 503:
        assert response.content.decode().startswith(
            f"PROMETHEUS_MULTIPROC_DIR={str(directory)!r} is writable by "
        )
