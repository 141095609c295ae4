"""All Redis I/O of django-delayq: connections, key names, Lua scripts.

Nothing outside this package talks to Redis: the dispatcher, the workers,
the sweeper and ``schedule()`` call the functions of its modules (``index``
for the due-sets, ``streams`` for the ready streams, ``leases`` and
``wake_lists`` for the dispatchers and the sweeper, ``inspect`` and
``stats`` for reads) with a client from ``connection``, and catch
:class:`~django_delayq.exceptions.RedisUnavailable`, which every failure
of those functions is (see :mod:`.errors`). So the key layout and the wire
format live in one place, and a single Redis, a Sentinel-managed primary
and a Redis Cluster are interchangeable to the rest of the code.
"""
