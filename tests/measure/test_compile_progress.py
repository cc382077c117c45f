"""Lines while torch.compile compiles (issue 58: `fxprof generate --compile` sat 118 s with no word):
a line when a graph starts compiling, one while it lasts, one when it ends; nothing left behind."""

from __future__ import annotations

import threading
import time

import torch

from fxprof.measure.compiled.progress import compile_progress


def _slow_backend(gm, example_inputs):  # noqa: ANN001 - dynamo's backend signature
    time.sleep(0.3)
    return gm.forward


def _slower_backend(gm, example_inputs):  # noqa: ANN001
    time.sleep(1.1)
    return gm.forward


def test_a_compile_says_when_it_starts_lasts_and_ends_and_leaves_nothing_behind():
    from torch._dynamo.callback import callback_handler

    starts, ends = list(callback_handler.start_callbacks), list(callback_handler.end_callbacks)
    lines: list[str] = []
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sin(x) + 1, backend=_slow_backend)
    with compile_progress(lines.append, every_s=0.1):
        x = torch.randn(4)
        assert torch.equal(fn(x), torch.sin(x) + 1)
        fn(x)  # compiled: no second compile, no line
    assert lines[0].startswith("compiling graph 0/0"), lines
    assert any(line.startswith("still compiling graph 0/0: ") for line in lines[1:-1]), lines
    # a graph under a second gets no line of its own; the summary counts it
    assert not any(line.startswith("compiled graph") for line in lines), lines
    assert lines[-1].startswith("1 graph(s) compiled, ") and float(lines[-1].split(", ")[1].split()[0]) >= 0.3
    assert sum(line.startswith("compiling graph") for line in lines) == 1
    # the callbacks are removed and the heartbeat thread has ended
    assert callback_handler.start_callbacks == starts and callback_handler.end_callbacks == ends
    assert not any(t.name == "fxprof-compile-progress" for t in threading.enumerate())
    torch._dynamo.reset()


def test_without_a_say_nothing_is_registered():
    from torch._dynamo.callback import callback_handler

    before = list(callback_handler.start_callbacks)
    with compile_progress(None):
        assert callback_handler.start_callbacks == before


def test_a_graph_of_a_second_or_more_gets_its_own_line():
    lines: list[str] = []
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.cos(x) * 2, backend=_slower_backend)
    with compile_progress(lines.append, every_s=60):
        fn(torch.randn(3))
    assert [line.split(" in ")[0] for line in lines[1:2]] == ["compiled graph 0/0"], lines
    torch._dynamo.reset()
