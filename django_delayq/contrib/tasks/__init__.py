r"""django-delayq as a backend of Django's Tasks framework (``django.tasks``
on Django 6, the django-tasks backport on 5.2).

Four modules, each importing only the ones before it:

- :mod:`~django_delayq.contrib.tasks.compat`: the framework, from Django or
  the backport, found by feature;
- :mod:`~django_delayq.contrib.tasks.results`: rows read back as
  ``TaskResult``\ s, and the framework's signals;
- :mod:`~django_delayq.contrib.tasks.backend`: ``DelayQueueBackend`` (configured
  as ``django_delayq.backends.DelayQueueBackend``);
- :mod:`~django_delayq.contrib.tasks.bridge`: how workers run the framework's
  tasks.

Nothing is imported here: importing the framework fails when it is not
installed, and ``compat`` says how to install it.
"""
