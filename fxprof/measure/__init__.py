"""Measurement: everything that runs the model (torch). One package per concern, imports
pointing down (docs/architecture.md; import-linter's ``fxprof.measure`` contract):
``session | eager_mode`` > ``program`` > ``compiled`` > ``eager`` > ``capture``
> ``passes | timing | whatif`` > ``device | distributed | common``."""
