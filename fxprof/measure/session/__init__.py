"""``fxprof.session``: profiling inside the user's own loop (the schedule, ``step()``, one profile
per cycle) and the memory of its warm-up steps."""
