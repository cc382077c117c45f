"""``torch.distributed``: a barrier before each timed run, the ranks' samples gathered on one."""
