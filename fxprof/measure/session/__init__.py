"""The machinery of ``fxprof.session`` (the public function is ``fxprof/session.py``): profiling
inside the user's own loop (the schedule, ``step()``, one profile per cycle) and the memory of
its warm-up steps."""
