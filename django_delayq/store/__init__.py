"""All Redis I/O of django-delayq: connections, key names, Lua scripts.

Nothing outside this package talks to Redis directly, so the key layout and
the wire format live in one place.
"""
