"""Graphs from a model, and the interpreter that runs them: fxprof's tracer (keeps
``record_function`` ranges), the symbolic, dynamo and export captures (``captures``), node facts
(``graph``), the interpreter that marks every node (``interpreter``), which profile a dynamo graph
reports to (``dispatch``), training steps from AOTAutograd (``training``, and a session's backward:
``training_loop``; an FSDP2 model's with FSDP's work as rows: ``fsdp_training``, ``fsdp_loop``; a
DDP model's with its gradient all-reduce as rows: ``ddp_training``, ``ddp_loop``), and SDPA masks that mask
nothing (``sdpa``)."""
