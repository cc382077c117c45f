"""``torch.distributed``: a barrier before each timed run, the ranks' samples gathered on one
(``ranks``); FSDP2's steps as nodes and rows (``fsdp``) and its parameters as FSDP owns them
(``fsdp_state``); DDP's gradient all-reduce timed per bucket (``ddp``); tensor parallelism's
redistributions (``tensor_parallel``)."""
