"""The eager mode's run loop: warm-up, timed runs and the untimed passes (``loop``), isolated
re-runs (``isolated``), and the model's own unprofiled runs beside the profiled ones with the
aten ops each dispatches (``fidelity``)."""
