"""The upgrade test's app: one task that notes each of its runs, and a
producer command that schedules it."""
