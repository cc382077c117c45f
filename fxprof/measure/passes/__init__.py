"""The untimed passes: shapes and FLOPs (``anatomy``), the bytes each node touches (``touched``),
memory per node from the allocator (``memory``), the machine's peaks and bandwidth curve
(``peaks``), and the numeric environment (``environment``). None of them runs inside a timed run."""
