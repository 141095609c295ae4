"""Integrations of django-delayq with other frameworks."""
