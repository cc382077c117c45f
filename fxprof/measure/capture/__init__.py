"""Graphs from a model, and the interpreter that runs them: fxprof's tracer (keeps
``record_function`` ranges), the symbolic, dynamo and export captures (``captures``), node facts
(``graph``), the interpreter that marks every node (``interpreter``), which profile a dynamo graph
reports to (``dispatch``), training steps from AOTAutograd (``training``, and a session's backward:
``training_loop``), and SDPA masks that mask nothing (``sdpa``)."""
