"""Every system check id of django-delayq, in one place.

What each means and how to fix it: docs/reference/checks.md. The settings
checks (``conf``), the task and framework checks (``checks.config``), the
Tasks backend's own (``contrib.tasks.backend``) and the deployment checks
(``checks.deploy``) all take their ids from here; a test keeps this list and
the docs equal.
"""

from __future__ import annotations

NOT_A_DICT = "delayq.E001"  # DELAYQ is not a dict
CONNECTION = "delayq.E002"  # not exactly one of REDIS_URL, CACHE_ALIAS, REDIS_SENTINEL
REDIS_URL = "delayq.E003"  # REDIS_URL is not a usable Redis URL
CACHE_ALIAS = "delayq.E004"  # CACHE_ALIAS does not name a Redis cache
QUEUES = "delayq.E005"  # QUEUES is invalid
NUMBER = "delayq.E006"  # a number is out of range
KEY_PREFIX = "delayq.E007"  # KEY_PREFIX is invalid
TASK_QUEUE = "delayq.E008"  # a task uses a queue that is not configured
BACKEND_OPTIONS = "delayq.E009"  # a DelayQueueBackend alias's OPTIONS
BACKEND_QUEUES = "delayq.E010"  # a DelayQueueBackend alias's QUEUES
NO_TASKS_FRAMEWORK = "delayq.E011"  # the backend without Django's Tasks framework
SENTINEL = "delayq.E012"  # REDIS_SENTINEL is invalid
CLUSTER = "delayq.E013"  # REDIS_CLUSTER cannot be used as set
KEY_PREFIX_IN_USE = "delayq.E014"  # another project's tasks under KEY_PREFIX
PERIODIC = "delayq.E015"  # a DELAYQ["PERIODIC"] entry is invalid
TEST_MODE = "delayq.E016"  # TEST_MODE is not None, a mode or a dotted path
TEST_MODE_DEPLOYED = "delayq.E017"  # deploy: TEST_MODE set with DEBUG off
DATABASES_APART = "delayq.E018"  # the router splits the app's models
DATABASE_UNSUPPORTED = "delayq.E019"  # the task rows' database is not supported
DATABASE_CHARSET = "delayq.E020"  # MySQL/MariaDB connection not in utf8mb4
MIDDLEWARE = "delayq.E021"  # MIDDLEWARE is not a list of importable middleware
UNKNOWN_SETTING = "delayq.W001"  # an unknown key in DELAYQ
REDIS_EVICTS = "delayq.W002"  # deploy: maxmemory-policy is not noeviction
REDIS_NOT_PERSISTENT = "delayq.W003"  # deploy: no RDB, no AOF
REDIS_PLAINTEXT = "delayq.W004"  # deploy: no TLS to another host, or TLS unverified
REDIS_NO_PASSWORD = "delayq.W005"  # deploy: no password
VISIBILITY_BELOW_TIME_LIMIT = "delayq.W006"  # deploy: a time limit > VISIBILITY_TIMEOUT
REDIS_NOT_CHECKED = "delayq.W007"  # deploy: W002/W003 could not ask Redis
CELERY_EAGER = "delayq.W008"  # CELERY_TASK_ALWAYS_EAGER, which our tasks ignore

ALL = (
    NOT_A_DICT,
    CONNECTION,
    REDIS_URL,
    CACHE_ALIAS,
    QUEUES,
    NUMBER,
    KEY_PREFIX,
    TASK_QUEUE,
    BACKEND_OPTIONS,
    BACKEND_QUEUES,
    NO_TASKS_FRAMEWORK,
    SENTINEL,
    CLUSTER,
    KEY_PREFIX_IN_USE,
    PERIODIC,
    TEST_MODE,
    TEST_MODE_DEPLOYED,
    DATABASES_APART,
    DATABASE_UNSUPPORTED,
    DATABASE_CHARSET,
    MIDDLEWARE,
    UNKNOWN_SETTING,
    REDIS_EVICTS,
    REDIS_NOT_PERSISTENT,
    REDIS_PLAINTEXT,
    REDIS_NO_PASSWORD,
    VISIBILITY_BELOW_TIME_LIMIT,
    REDIS_NOT_CHECKED,
    CELERY_EAGER,
)
