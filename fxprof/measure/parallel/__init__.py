"""Parallel layouts as plug-ins the capture entry asks (:mod:`fxprof.measure.program`,
:class:`fxprof.measure.session.session.Session`): what a layout refuses, how its forward graph is
captured, which training captures time its own work as rows, what it notes in the metadata
(``layout``: the :class:`~fxprof.measure.parallel.layout.Layout` interface, :func:`layouts_of`,
the one refusal check :func:`refuse`); one module per layout: FSDP2 (``fsdp``), DDP (``ddp``),
tensor parallelism (``tensor_parallel``)."""
