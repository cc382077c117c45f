"""Compiled mode: a ``torch.compile``d program's kernels timed by ``torch.profiler`` (``mode``;
its profiled and plain runs: ``loop``), their calls read from the profiler's events (``spans``),
graph breaks and overhead (``breaks``), the profiler's own cost (``profiler_cost``), FLOPs on
fake tensors (``flops``), memory per kernel (``memory``), the compile kept for reuse
(``reuse``), and a compiled model inside a session (``in_session``)."""
