from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

#: The longest cancel delay the form accepts: 30 days.
MAX_CANCEL_AFTER = 30 * 86400


class OrderForm(forms.Form):
    item = forms.CharField(
        max_length=100,
        initial="T-shirt",
        error_messages={
            "required": "Item must not be empty: name what is ordered, e.g. T-shirt.",
            "max_length": "Item must be at most 100 characters.",
        },
    )
    cancel_after = forms.IntegerField(
        label="Cancel if unpaid after (s)",
        required=False,
        help_text="Empty: SHOP_ORDER_CANCEL_DELAY.",
        min_value=1,
        max_value=MAX_CANCEL_AFTER,
        error_messages={
            "min_value": "Cancel if unpaid after must be at least 1 second.",
            "max_value": (
                f"Cancel if unpaid after must be at most {MAX_CANCEL_AFTER} "
                f"seconds (30 days)."
            ),
            "invalid": "Cancel if unpaid after must be a whole number of seconds.",
        },
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read here, not at import: settings may change (tests, env).
        self.fields["cancel_after"].initial = settings.SHOP_ORDER_CANCEL_DELAY

    def clean_cancel_after(self) -> int:
        value: int | None = self.cleaned_data["cancel_after"]
        return settings.SHOP_ORDER_CANCEL_DELAY if value is None else value
