"""Shared by every mode: the input tree (cloning, describing values) and process-wide state (the
profiling lock; buffers, RNG and autocast put back)."""
