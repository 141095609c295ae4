"""The upgrade test: the previous release and the current one side by side."""

#: One line per upgrade run, printed at the end of the session (conftest.py).
SUMMARY: list[str] = []
