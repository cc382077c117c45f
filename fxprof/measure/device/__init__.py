"""The bridge to ``torch.profiler``: kernels and device activity (CUPTI), ranges, quiet starts."""
