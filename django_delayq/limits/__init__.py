"""Flow control: concurrency and rate limits, per task, per queue and per
value of a task's argument, held across every worker process and host.

A limit acts at *admission*, between "due" and "claimed": a task under a
limit is indexed in its queue's *limits shard* (one Redis hash slot,
``{<queue>:limits}``, which also holds the limits' state), and the
dispatcher hands it to the workers only when every one of its limits has
room (``store/lua/limits.lua``). A task waiting there takes no worker
thread and burns no attempt. A concurrency slot is a lease the running
attempt holds and its worker renews; the outcome releases it and admits the
next waiting task in the same script, so the release wakes the workers.

- :mod:`django_delayq.conf.limits`: what ``concurrency_limit=``, ``rate_limit=`` and
  ``limit_by=`` mean, and their validation;
- :mod:`.groups`: which limits a task's row is under, and the table of
  every limit the scripts are given.
"""
