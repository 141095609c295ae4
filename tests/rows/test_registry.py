from __future__ import annotations

import pytest

from django_delayq import registry, task
from django_delayq.exceptions import InvalidTaskDefinition, TaskNotRegistered
from tests.testapp import tasks as testapp_tasks


def test_task_registers_under_its_dotted_path_and_stays_callable():
    assert testapp_tasks.add.name == "tests.testapp.tasks.add"
    assert registry.get("tests.testapp.tasks.add") is testapp_tasks.add
    assert testapp_tasks.add(2, 3) == 5
    assert testapp_tasks.order_cancel.__name__ == "order_cancel"


def test_decorator_options_are_kept():
    assert testapp_tasks.order_cancel.queue == "orders"
    assert testapp_tasks.order_cancel.max_attempts == 5
    assert registry.get("reminders.send") is testapp_tasks.send_reminder


def test_lambdas_and_nested_functions_cannot_be_tasks():
    with pytest.raises(InvalidTaskDefinition, match="module level"):
        task(lambda: None)

    def nested() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match="module level"):
        task(nested)


def test_a_taken_name_cannot_be_given_to_another_function():
    def other() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match="already registered"):
        task(name="tests.testapp.tasks.add")(other)


@pytest.mark.parametrize(
    ("name", "message"),
    [("shop.cancel\x00", "a NUL"), ("shop.\udc80", "a lone surrogate")],
)
def test_a_name_no_database_can_store_is_refused(name, message):
    def other() -> None: ...

    with pytest.raises(
        InvalidTaskDefinition, match=rf"@task\(name=...\) contains {message}"
    ):
        task(name=name)(other)
    with pytest.raises(TaskNotRegistered):
        registry.get(name)


def test_a_task_cannot_be_decorated_twice():
    with pytest.raises(InvalidTaskDefinition, match="apply @task once"):
        task(testapp_tasks.add)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, 1001])
def test_max_attempts_must_be_an_integer_from_1_to_1000(value):
    def fn() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match=r"max_attempts.*1 \(no retries\)"):
        task(name="x.y", max_attempts=value)(fn)


def test_unregistered_names_are_refused_with_the_fix():
    with pytest.raises(TaskNotRegistered, match=r"os\.system.*@django_delayq\.task"):
        registry.resolve("os.system")


def test_plain_functions_are_refused():
    def plain() -> None: ...

    with pytest.raises(TaskNotRegistered, match="not a registered task"):
        registry.resolve(plain)


def test_other_objects_are_a_type_error():
    with pytest.raises(TypeError, match="first argument"):
        registry.resolve(42)


@pytest.mark.parametrize("value", [101, -101, 1.5, True, "1", None])
def test_task_priority_must_be_an_integer_from_minus_100_to_100(value):
    def fn() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match=r"priority=.*-100 to 100"):
        task(name="x.prio", priority=value)(fn)


def test_calls_are_checked_against_the_signature_read_once_per_task():
    reminder = testapp_tasks.send_reminder
    assert reminder.signature is reminder.signature  # read once, then kept
    assert reminder.argument_problem([7], {"text": "hi"}) is None
    assert reminder.argument_problem([7, "hi"], {}) == (
        "send_reminder() takes 1 positional argument but 2 were given; "
        "it is send_reminder(user_id, *, text='')"
    )


def test_a_function_whose_signature_cannot_be_read_takes_any_call():
    builtin = registry.Task(max, "builtins.max")  # no signature to read
    assert builtin.signature is None
    assert builtin.argument_problem([1, 2, 3], {"key": None}) is None
