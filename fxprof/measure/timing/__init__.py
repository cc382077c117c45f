"""How a node is timed: the timers (``timers``), the recorder that turns marks into samples
(``recorder``), which nodes launch no device work (``launches``), the sample budget (``budget``),
and what each run lost to other processes (``contention``)."""
