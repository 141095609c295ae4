"""The supervisor: delayq_worker --processes as real process trees."""
