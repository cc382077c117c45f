"""Measurement: everything that runs the model (torch). One package per concern, imports
pointing down (docs/architecture.md; import-linter's ``fxprof.measure`` contract):
``session | eager_mode`` > ``program`` > ``compiled | parallel`` > ``eager`` > ``capture``
> ``passes | timing | whatif`` > ``device | distributed | common``.
``parallel``: the parallel layouts (FSDP2, DDP, tensor parallelism) as plug-ins that the capture entry asks."""
