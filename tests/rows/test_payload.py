from __future__ import annotations

import datetime
import decimal
import enum
import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_delayq.exceptions import (
    InvalidPayload,
    PayloadTooLarge,
    UnsupportedPayloadType,
)
from django_delayq.payload import check_payload, encoded_size


class Color(enum.IntEnum):
    RED = 1


def check(args=(), kwargs=None, max_bytes=65536):
    return check_payload(args, kwargs, max_bytes=max_bytes)


def test_plain_json_values_pass_and_tuples_become_lists():
    args, kwargs = check((1, "a", (2, 3), {"k": None}), {"flag": True, "ratio": 0.5})
    assert args == [1, "a", [2, 3], {"k": None}]
    assert kwargs == {"flag": True, "ratio": 0.5}


def test_int_enums_become_plain_ints():
    args, _ = check([Color.RED])
    assert args == [1]
    assert type(args[0]) is int


@pytest.mark.parametrize(
    ("args", "kwargs", "where", "hint"),
    [
        ([{1, 2}], None, "args[0] is a set", "sorted list"),
        ([datetime.datetime(2026, 1, 1)], None, "args[0] is a datetime", "isoformat"),
        (
            [],
            {"when": datetime.date(2026, 1, 1)},
            "kwargs['when'] is a date",
            "isoformat",
        ),
        ([decimal.Decimal("1.5")], None, "args[0] is a Decimal", "str(value)"),
        ([uuid.uuid4()], None, "args[0] is a UUID", "str(value)"),
        ([object()], None, "args[0] is an object", "plain data"),
        ([[1, [b"x"]]], None, "args[0][1][0] is a bytes", "base64"),
    ],
)
def test_values_json_cannot_hold_are_named_by_position(args, kwargs, where, hint):
    with pytest.raises(InvalidPayload) as caught:
        check(args, kwargs)
    assert where in str(caught.value)
    assert hint in str(caught.value)


def test_a_type_json_cannot_hold_is_said_plainly_first_then_in_djangos_words():
    """What is wrong where opens the message; the words Django's Tasks
    backends raise ("Unsupported type", which code written for them looks
    for) come last, not in the way."""
    with pytest.raises(UnsupportedPayloadType) as caught:
        check([datetime.datetime(2026, 1, 1)])
    assert isinstance(caught.value, TypeError)
    assert str(caught.value) == (
        "args[0] is a datetime, which is not JSON serializable; pass "
        "value.isoformat() and parse it in the task. "
        "(Unsupported type: <class 'datetime.datetime'>)"
    )
    with pytest.raises(UnsupportedPayloadType) as caught:
        check("abc")
    assert str(caught.value).startswith("args= must be a list or tuple")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_rejected(value):
    with pytest.raises(InvalidPayload, match=r"args\[0\]\['x'\] is"):
        check([{"x": value}])


def test_non_string_dict_keys_are_rejected_instead_of_silently_converted():
    with pytest.raises(InvalidPayload, match="JSON object keys must be strings"):
        check([{1: "one"}])


def test_args_must_be_a_list_or_tuple():
    with pytest.raises(
        InvalidPayload, match=r"args= must be a list or tuple.*args=\[value\]"
    ):
        check(42)
    with pytest.raises(InvalidPayload, match="not str"):
        check("abc")


def test_kwargs_must_be_a_dict_with_string_keys():
    with pytest.raises(InvalidPayload, match="kwargs= must be a dict"):
        check([], [("a", 1)])
    with pytest.raises(InvalidPayload, match="keys must be strings"):
        check([], {1: "a"})


def test_oversize_payload_names_the_limit_and_the_setting():
    with pytest.raises(PayloadTooLarge, match=r"MAX_PAYLOAD_BYTES.*limit of 100"):
        check(["x" * 200], max_bytes=100)


def test_deep_nesting_is_rejected_cleanly():
    value: list = []
    for _ in range(100):
        value = [value]
    with pytest.raises(InvalidPayload, match="nested more than"):
        check([value])


def test_an_oversize_payload_is_refused_before_the_rest_is_checked():
    # The object() after the large string is never looked at.
    with pytest.raises(PayloadTooLarge, match="more than 100 bytes of JSON"):
        check(["x" * 200, object()], max_bytes=100)
    with pytest.raises(PayloadTooLarge, match="more than 100 bytes"):
        check([], {"note": "x" * 200, "when": object()}, max_bytes=100)


def test_a_payload_of_exactly_the_limit_passes_and_one_byte_more_does_not():
    args, kwargs = ["ab"], {"n": 1}  # '["ab"]' and '{"n":1}': 13 bytes
    assert check(args, kwargs, max_bytes=13) == (args, kwargs)
    with pytest.raises(PayloadTooLarge, match="encode to 13 bytes of JSON"):
        check(args, kwargs, max_bytes=12)


storable_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text,
    lambda children: st.lists(children) | st.dictionaries(storable_text, children),
    max_leaves=20,
)


@given(args=st.lists(json_values, max_size=4))
def test_the_early_refusal_never_refuses_what_fits(args):
    # The walk counts a lower bound of the encoded size: a limit of exactly
    # the encoded size must pass, whatever the payload holds.
    unlimited = check(args, max_bytes=10**9)
    exact = encoded_size(unlimited[0]) + encoded_size({})
    assert check(args, max_bytes=exact) == unlimited
