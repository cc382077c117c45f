"""The variants ``fxprof.whatif`` times: each usual remedy applied to a copy of the model."""
