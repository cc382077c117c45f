"""Issue 69 (1): a session changes nothing the program can observe, on every step, in every capture.

Each case runs one training loop twice, from the same seeds: once plain (the twin) and once inside
``fxprof.session``. The models keep state in forward (an attribute the loss reads, a counter, a
dict they return), draw random numbers from torch, Python and numpy, print, write module-level
state and raise on their first call. Everything the loop can see is recorded at every step and
must be equal: outputs, losses, attribute types, call counts, the returned object's identity,
prints, exceptions (step and type), and at the end the weights, the optimizer's state and every
random generator."""

from __future__ import annotations

import logging
import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import fxprof
from fxprof.errors import TraceError

torch._logging.set_logs(dynamo=logging.ERROR)

#: module-level state a forward writes (a global counter)
GLOBAL_CALLS = [0]
COUNTED = 0


class Stateful(nn.Module):
    """Keeps an intermediate for an auxiliary loss, counts its calls, prints, draws noise from torch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        print(f"forward call {self.calls}")
        h = torch.relu(self.fc1(x))
        self.last_h = h
        return self.fc2(h + torch.rand(2, 16))


class OwnDict(nn.Module):
    """Returns a dict it holds, written in forward, and scales by Python's and numpy's draws."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.cache: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        scale = 1.0 + random.random() + float(np.random.rand())
        self.cache["out"] = self.fc(x) * scale
        return self.cache


class Global(nn.Module):
    """Writes module-level state: a global counter and a list it appends to."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global COUNTED
        COUNTED += 1
        GLOBAL_CALLS.append(1)
        return self.fc(x)


class RaisesFirst(nn.Module):
    """Raises on its first call (a lazily checked configuration), then works."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 1:
            raise ValueError("not ready on the first call")
        return self.fc(x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = x.shape[0]  # a submodule writes its own attribute
        return torch.relu(self.fc(x))


class Nested(nn.Module):
    """The write is in a submodule's forward, and dropout draws from torch inside the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.block(x)))


def _loss(model: nn.Module, out) -> torch.Tensor:
    tensor = out["out"] if isinstance(out, dict) else out
    loss = tensor.square().mean()
    if isinstance(getattr(model, "last_h", None), torch.Tensor):
        loss = loss + 0.1 * model.last_h.mean()  # the auxiliary loss read from the attribute
    return loss


def _state(model: nn.Module) -> dict:
    return {k: (type(v).__name__, v if isinstance(v, (int, float, str)) else None) for k, v in vars(model).items()
            if not k.startswith("_") and k not in ("training", "forward")}  # forward: the session's hook while open


def _loop(cls: type, steps: int, session=None, capsys=None) -> dict:
    """One training loop from fixed seeds; everything the loop can see, per step and at the end."""
    global COUNTED
    # dynamo's verdicts are per code object, for the whole process: a forward that raised while dynamo
    # compiled it in an earlier case is skipped in every later one, whatever the instance
    torch._dynamo.reset()
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    COUNTED = 0
    GLOBAL_CALLS[:] = [0]
    model = cls()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x = torch.randn(2, 8)
    seen: list = []
    context = session(model) if session is not None else None
    s = context.__enter__() if context is not None else None
    try:
        for step in range(steps):
            try:
                out = model(x)
            except ValueError as exc:
                seen.append((step, "raised", type(exc).__name__, str(exc)))
            else:
                loss = _loss(model, out)
                opt.zero_grad()
                loss.backward()
                opt.step()
                returned = out is model.__dict__.get("cache") if isinstance(out, dict) else type(out).__name__
                seen.append((step, "ok", loss.item(), returned, _state(model), COUNTED, len(GLOBAL_CALLS),
                             type(getattr(model.block, "seen", None)).__name__ if hasattr(model, "block") else None))
            if s is not None:
                s.step()
    finally:
        if context is not None:
            context.__exit__(None, None, None)
    printed = capsys.readouterr().out if capsys is not None else ""
    return {
        "steps": seen,
        "printed": printed,
        "params": [p.detach().clone() for p in model.parameters()],
        "opt": {k: [v.clone() if isinstance(v, torch.Tensor) else v for v in st.values()] for k, st in
                enumerate(opt.state.values())},
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state()[1].copy(),
        "sessions": s,
    }


def _same(a: dict, b: dict) -> None:
    assert a["steps"] == b["steps"]
    assert a["printed"] == b["printed"]
    assert all(torch.equal(p, q) for p, q in zip(a["params"], b["params"]))
    for k in a["opt"]:
        assert all(torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q for p, q in zip(a["opt"][k], b["opt"][k]))
    assert torch.equal(a["torch_rng"], b["torch_rng"])
    assert a["python_rng"] == b["python_rng"]
    assert np.array_equal(a["numpy_rng"], b["numpy_rng"])


SCHEDULES = {
    "warmup1_active2": lambda: fxprof.schedule(wait=0, warmup=1, active=2),
    "wait1_repeat2": lambda: fxprof.schedule(wait=1, warmup=1, active=2, repeat=2),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("capture", ["auto", "dynamo"])
@pytest.mark.parametrize("cls", [Stateful, OwnDict, Global, Nested, RaisesFirst])
def test_a_session_changes_nothing_the_loop_can_see(cls, capture, schedule, capsys):
    steps = 8
    twin = _loop(cls, steps, capsys=capsys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cycle that could time nothing says so; compared below
        profiled = _loop(cls, steps, lambda m: fxprof.session(m, schedule=SCHEDULES[schedule](), capture=capture),
                         capsys=capsys)
    _same(twin, profiled)
    session = profiled["sessions"]
    untimed = cls is OwnDict or (cls is RaisesFirst and schedule == "warmup1_active2")  # its first call instrumented
    if not untimed:  # timed: the captured steps are the profile, not eager runs
        assert session.profiles and session.profiles[0].meta["run_steps"]
    else:  # dynamo skips these forwards for good: their steps ran as the model's own, and no profile says otherwise
        assert not session.profiles


@pytest.mark.parametrize("cls", [Stateful, Global, Nested])
def test_auto_names_why_it_used_dynamo_in_the_header(cls):
    """One line of the header says which capture and why: what a symbolic graph would change."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = _loop(cls, 4, lambda m: fxprof.session(m, schedule=SCHEDULES["warmup1_active2"]()))["sessions"]
    prof = session.profiles[0]
    assert prof.meta["capture"] == "dynamo"
    words = {Stateful: ["self.last_h", "self.calls", "torch's generator", "prints"],
             Global: ["module-level state", "COUNTED", "GLOBAL_CALLS"],
             Nested: ["self.block.seen"]}[cls]
    line = next(line for line in str(prof).splitlines() if line.startswith("capture: dynamo"))
    for word in words:
        assert word in line, (word, line)


def test_symbolic_capture_refuses_a_forward_it_would_change_in_a_session():
    """capture='symbolic' asked for by name: refused with what it would change, before any step runs
    through a graph, and the model is as it was (the trace's writes undone)."""
    torch.manual_seed(0)
    model = Stateful()
    with pytest.raises(TraceError, match=r"self\.last_h.*capture='auto'"):
        with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=1), capture="symbolic"):
            model(torch.randn(2, 8))
    assert model.calls == 0 and "last_h" not in vars(model)
    assert "forward" not in vars(model)


def test_a_trace_leaves_the_model_and_the_generators_as_they_were():
    """fxprof.profile's symbolic graph (warned about) leaves no Proxy, no fx constant and no
    generator moved behind, and the warning names what the graph leaves out."""
    torch.manual_seed(0)
    model = Stateful()
    x = torch.randn(2, 8)
    before = torch.get_rng_state()
    with pytest.warns(UserWarning, match=r"self\.last_h"):
        fxprof.profile(model, x, capture="symbolic", iters=2, warmup=1, peaks=None, memory=False)
    assert not any(isinstance(v, torch.fx.Proxy) for v in vars(model).values())
    assert not any(k.startswith("_tensor_constant") for k in vars(model))
    assert torch.equal(torch.get_rng_state(), before)


def test_the_words_for_a_forward_that_returns_its_own_dict_and_draws_from_python_and_numpy():
    """What the trace of OwnDict found, named. Its session times nothing: a draw from Python's random
    or numpy is a graph break dynamo cannot resume from (torch 2.14), so dynamo runs the forward as
    plain Python, and so do the session's steps."""
    from fxprof.measure.capture.captures import capture_model

    torch.manual_seed(0)
    model = OwnDict()
    state = random.getstate()
    captured = capture_model(model, (torch.randn(2, 8),), {}, "auto")
    assert captured.kind == "dynamo"
    for word in ["self.cache['out']", "returns an object the model holds (self.cache)", "Python's random module",
                 "numpy's global generator"]:
        assert word in captured.reason, word
    assert model.cache == {} and random.getstate() == state


def test_a_forward_that_raised_while_dynamo_compiled_it_runs_as_itself_and_the_cycle_says_so():
    """torch skips a forward for good once it raised while dynamo compiled it: the session's steps
    then run the model's own forward, and the cycle that timed nothing says why."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = RaisesFirst()
    x = torch.randn(2, 8)
    raised = []
    with pytest.warns(UserWarning, match="dynamo ran the model's forward as plain Python"):
        with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=2)) as s:
            for step in range(4):
                try:
                    out = model(x)
                except ValueError:
                    raised.append(step)
                else:
                    assert torch.equal(out, model.fc(x))
                s.step()
    assert raised == [0] and model.calls == 4


class Counter(nn.Module):
    """Counts its calls on itself and uses the count in no shape or print."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x)


def test_a_counter_on_the_model_does_not_exhaust_dynamo_in_a_long_loop():
    """An int attribute the forward increments made dynamo recompile at every call, and past its
    limit (8) the session's capture ran no graph: 20 steps stay timed, every cycle with its rows."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Counter()
    x = torch.randn(2, 8)
    with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=3, repeat=5)) as s:
        for _ in range(20):
            model(x).sum().backward()
            s.step()
    assert model.calls == 20
    assert len(s.profiles) == 5
    for prof in s.profiles:
        assert prof.meta["capture"] == "dynamo" and len(prof.meta["run_steps"]) == 3
        assert (prof.df.loc[prof.df["kind"] == "linear", "calls"] == 3).all()


def test_steps_dynamo_ran_as_plain_python_are_left_out_and_named():
    """A forward that prints the counter it keeps recompiles at every call (the f-string fixes the
    count in the graph's guards); past dynamo's limit its steps run as plain Python. Those steps
    are the model's own, untimed: no cycle holds a run without its nodes, and each says why."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Stateful()
    x = torch.randn(2, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=1, active=3, repeat=5), capture="dynamo") as s:
            for _ in range(20):
                model(x).sum().backward()
                s.step()
    assert model.calls == 20
    for prof in s.profiles:  # every kept run ran the graphs
        assert (prof.df.loc[prof.df["kind"] == "linear", "calls"] == len(prof.meta["run_steps"])).all()
    said = [str(w.message) for w in caught if "plain Python" in str(w.message)]
    said += [n for p in s.profiles for n in p.meta["notes"] if "plain Python" in n]
    assert said, "the cycles whose steps ran no graph say so"


@pytest.mark.parametrize("cls", [Stateful, Global, Nested, Counter])
def test_a_training_session_changes_nothing_the_loop_can_see(cls, capsys):
    """backward=True: the forward and backward graphs come from AOTAutograd through dynamo, which
    runs the forward's Python in every call; the loop sees what the twin sees."""
    twin = _loop(cls, 6, capsys=capsys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profiled = _loop(cls, 6, lambda m: fxprof.session(m, schedule=fxprof.schedule(wait=1, warmup=1, active=2),
                                                          backward=True), capsys=capsys)
    _same(twin, profiled)
    (prof,) = profiled["sessions"].profiles
    assert set(prof.df["phase"]) >= {"forward", "backward"}


def test_a_training_sessions_header_does_not_compare_its_steps_with_a_forward_alone():
    """The eager steps time the model's forward; a training session's runs hold forward and
    backward. The header stated their ratio (9.74x in a Lightning example); it says why none."""
    torch.manual_seed(0)
    model = Counter()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 8)
    with fxprof.session(model, schedule=fxprof.schedule(wait=4, warmup=1, active=3), backward=True) as s:
        for _ in range(8):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            s.step()
    (prof,) = s.profiles
    assert "own_runs_ms" not in prof.meta
    assert any("no fidelity line: a training session's timed runs hold the forward and the backward" in n
               for n in prof.meta["notes"])
    assert not any(line.startswith("fidelity: profiled run") for line in prof.summary().splitlines())
