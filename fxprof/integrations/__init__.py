"""fxprof inside the training frameworks people use: a callback for Hugging Face's ``Trainer``
(:mod:`fxprof.integrations.transformers`) and one for Lightning's (:mod:`fxprof.integrations.lightning`).

A layer above every other but the command line: the callbacks drive :func:`fxprof.session` through
the steps the framework runs, and use only fxprof's public functions and the ``Profile`` they make.
Each imports its framework when it is used, never when ``fxprof`` is imported; a missing framework
is one line naming the extra that installs it (``pip install 'fxprof[hf]'``, ``'fxprof[lightning]'``).
What both share (the schedule they default to, where profiles are saved, the figures they log,
rank 0 under ``torch.distributed``) is :mod:`fxprof.integrations.common`.
"""
