"""Every key a profile's ``meta`` carries, declared once: type, writer, meaning, saved, schema rule.

``Profile.meta`` is a free dict that every save writes whole (``fxprof/io/header.py``), so each key
below is saved unless ``saved`` is False (none is today). ``schema`` names the JSON Schema rule
that ``fxprof/io/validate.py`` checks the key against (``None``: not in the schema, kept as it is);
the schema's ``meta`` properties are derived from this table, in its order. ``computed`` marks a
key written through a mapping built elsewhere (``meta.update(captured.notes.meta())``,
``RankSync.meta()``...), which ``tests/core/test_meta_keys.py`` cannot see on a ``meta`` mapping.
Nested keys (``compiled``, ``contention``, ``memory``, ``peaks``...) are described in the modules
named as their writers. Imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MetaKey", "META_KEYS", "BY_NAME", "schema_keys"]


@dataclass(frozen=True)
class MetaKey:
    """One key of a profile's ``meta``."""

    name: str
    #: the Python type of its value, as text (``"str"``, ``"int"``, ``"list[float]"``, ``"dict"``...)
    type: str
    #: the code that writes it (module, function)
    writer: str
    #: what it says
    meaning: str
    #: written to saved files (JSON, .npz header) with the rest of ``meta``
    saved: bool = True
    #: the rule of fxprof/io/validate.py that checks it in a saved file; None: not checked
    schema: str | None = None
    #: written through a computed mapping (``meta.update(notes)``), not by its name on ``meta``
    computed: bool = False


_EAGER = "measure/eager/loop.describe_run"
_SESSION = "measure/session/session.py (a session's cycle)"
_RANKS = "core/rankmerge.py (merge)"

#: every key, the schema's first and in the schema's order
META_KEYS: tuple[MetaKey, ...] = (
    # -- in the file schema (fxprof/io/validate.py), in its order
    MetaKey("model", "str", f"{_EAGER}; measure/compiled/mode.py; cli/profile.py", "the model's name (its class unless named)", schema="text"),
    MetaKey("timer", "str", f"{_EAGER}; measure/compiled/mode.py ('profiler')", "the timer that measured time_ms (fxprof.vocab's timers)", schema="text"),
    MetaKey("device", "str", _EAGER, "the devices the model's tensors are on ('cuda:0', 'cpu', 'none')", schema="text"),
    MetaKey("capture", "str", f"{_EAGER} (the capture's kind); measure/compiled/mode.py ('compiled')",
            "how the graph was made: symbolic, dynamo, export, graphmodule, training, compiled...; Profile.capture", schema="text"),
    MetaKey("capture_reason", "str", f"{_EAGER}; measure/compiled/in_session.py", "why that capture was used (a fallback's cause)", schema="text"),
    MetaKey("capture_note", "str", "measure/eager/loop.py; measure/timing/budget.py", "what was cut short or changed while capturing or timing", schema="text"),
    MetaKey("torch", "str", _EAGER, "torch.__version__", schema="text"),
    MetaKey("fxprof", "str", _EAGER, "fxprof's version", schema="text"),
    MetaKey("python", "str", _EAGER, "the Python version", schema="text"),
    MetaKey("machine", "str", _EAGER, "platform.machine()", schema="text"),
    MetaKey("created", "str", _EAGER, "when the profile was made, ISO 8601 UTC", schema="text"),
    MetaKey("gpu", "str", _EAGER, "the first CUDA device's name", schema="text"),
    MetaKey("warmup", "int", _EAGER, "warm-up runs asked for", schema="count"),
    MetaKey("iters", "int", f"{_EAGER}; measure/timing/budget.py", "timed runs (those kept when stopped early)", schema="count"),
    MetaKey("requested_iters", "int", "measure/eager/loop.py; measure/timing/budget.py; session", "timed runs asked for, when fewer were kept", schema="count"),
    MetaKey("threads", "int", _EAGER, "torch.get_num_threads() while timing", schema="threads"),
    MetaKey("no_grad", "bool", _EAGER, "timed under torch.no_grad()", schema="flag"),
    MetaKey("training", "bool", _EAGER, "model.training while timing", schema="flag"),
    MetaKey("incomplete", "bool", "measure/eager/loop.py; measure/timing/budget.py; session", "the runs stopped before all were done", schema="flag"),
    MetaKey("inputs", "list[str]", f"{_EAGER}; session", "each input described (shape, dtype, device)", schema="texts"),
    MetaKey("mode", "str", "measure/eager/loop.py ('isolated'); measure/compiled/mode.py ('timed')",
            "'timed' (whole runs) or 'isolated' (each node re-run alone); Profile.isolated", schema="mode"),
    MetaKey("epoch_ns", "int", "measure/eager/loop.py", "Unix time (ns) of the first timed run's start", schema="epoch_ns"),
    MetaKey("peaks", "dict", "measure/passes (the machine's peaks), selfcheck.py",
            "the roofs the roofline columns are against (core/roofline.Peaks as a dict)", schema="peaks"),
    MetaKey("notes", "list[str]", "every writer (capture, loop, memory, compiled, session, generate)", "notes shown under the header", schema="texts"),
    # -- the run and its conditions
    MetaKey("dtype", "str", _EAGER, "the floating dtypes of parameters and buffers ('bfloat16, float32')"),
    MetaKey("env", "dict", "measure/eager_mode.py; measure/compiled/mode.py; session (measure/passes/environment)",
            "the environment that affects timing (allocator, TF32, deterministic...)"),
    MetaKey("warmup_ms", "float", "measure/eager_mode.py", "warm-up asked for in milliseconds (warmup_ms=)"),
    MetaKey("warmup_runs", "int", "measure/eager/loop.py", "warm-up runs actually made"),
    MetaKey("profiler_warmup_runs", "int", "measure/eager/loop.py (timer='kernel')", "torch.profiler's own warm-up runs"),
    MetaKey("no_event_nodes", "list[str]", "measure/eager/loop.py", "nodes that launch no device work (no CUDA event)"),
    MetaKey("dispatch_differences", "list[dict]", "measure/eager/loop.py",
            "aten ops the captured graph dispatched differently from the model (op, model, captured)"),
    MetaKey("contention", "dict", "measure/timing/contention.py (ContentionMeter.describe)",
            "what the runs lost to other processes: source, load, cores, cpus, lost_ms..."),
    MetaKey("timed_wall_ms", "float", "measure/eager/loop.py", "wall time of the timed runs, fxprof's overhead included"),
    MetaKey("own_wall_ms", "float", "measure/eager/loop.py", "wall time of the model's own runs beside them"),
    MetaKey("own_runs_ms", "list[float]", "measure/eager/fidelity.py (describe); measure/compiled/in_session.py",
            "the model's own runs, unprofiled, beside the profiled ones (the fidelity line)"),
    MetaKey("memory", "dict", "measure/passes/memory.py; measure/compiled/memory.py; measure/session/memory.py",
            "the memory pass's summary (core/memory.memory_summary)"),
    MetaKey("memory_steps", "list[dict]", "measure/session/memory.py", "a session's warm-up steps' memory"),
    # -- what the capture found
    MetaKey("backward", "bool", "measure/capture/training.py (describe)", "a training step was timed (backward=True)", computed=True),
    MetaKey("loss", "str", "measure/capture/training.py (describe)", "the loss function's name", computed=True),
    MetaKey("optimizer", "str | None", "measure/capture/training.py (describe)", "the optimizer's class name", computed=True),
    MetaKey("nested_compile", "list[str]", "measure/capture/captures.py (CaptureNotes)",
            "torch.compile'd submodules profiled uncompiled", computed=True),
    MetaKey("nested_compile_note", "str", "measure/capture/captures.py (CaptureNotes)", "the note saying so", computed=True),
    MetaKey("fsdp", "dict", "measure/capture/fsdp.py, measure/parallel (CaptureNotes)", "FSDP2's facts: unshard_async_op (core/overlap)", computed=True),
    MetaKey("compiled", "dict", "measure/compiled/mode.py; measure/compiled/breaks.py; measure/compiled/reuse.py",
            "compiled mode's facts: backend, compile_s, graphs, kernels, unprofiled_ms, breaks...; Profile.is_compiled"),
    # -- a session's cycle (fxprof.session)
    MetaKey("session", "bool", _SESSION, "made inside the user's loop"),
    MetaKey("step", "int", _SESSION, "the loop's step when the cycle ended"),
    MetaKey("cycle", "int", _SESSION, "the schedule's cycle number"),
    MetaKey("first_step", "int", _SESSION, "the cycle's first step"),
    MetaKey("schedule", "dict", _SESSION, "the schedule (wait, warmup, active...)"),
    MetaKey("run_steps", "list[int]", _SESSION, "each timed run's step"),
    MetaKey("run_signatures", "list[int]", _SESSION, "each timed run's input signature"),
    MetaKey("signatures", "list[dict]", _SESSION, "the input signatures the runs had, with their counts"),
    MetaKey("signatures_seen", "int", _SESSION, "input signatures seen so far"),
    MetaKey("captures", "int", _SESSION, "graphs captured or compiled so far, recompiles included"),
    MetaKey("untimed_first_batches", "list[dict]", _SESSION, "active steps run untimed: a new input signature"),
    # -- torch.distributed ranks
    MetaKey("rank", "int", "measure/distributed/ranks.py (RankSync.meta); core/rankmerge.py (rank_profile)", "this rank", computed=True),
    MetaKey("world_size", "int", f"measure/distributed/ranks.py (RankSync.meta); {_RANKS}", "ranks in the job", computed=True),
    MetaKey("backend", "str", "measure/distributed/ranks.py (RankSync.meta)", "the process group's backend", computed=True),
    MetaKey("local_rank", "int", "measure/distributed/ranks.py (RankSync.meta)", "LOCAL_RANK", computed=True),
    MetaKey("hostname", "str", "measure/distributed/ranks.py (RankSync.meta)", "platform.node()", computed=True),
    MetaKey("ranks", "list[int]", _RANKS, "a merged profile's ranks, in order", computed=True),
    MetaKey("per_rank", "list[dict]", _RANKS, "a merged profile: the keys that differ per rank, each rank's", computed=True),
    MetaKey("gathered", "str", _RANKS, "when the ranks were merged, ISO 8601 UTC", computed=True),
    MetaKey("rank_graphs", "str", _RANKS, "set when ranks ran different graphs (node names carry rN:)", computed=True),
)

BY_NAME: dict[str, MetaKey] = {k.name: k for k in META_KEYS}


def schema_keys() -> list[tuple[str, str]]:
    """``(name, rule)`` of every key the file schema checks, in the table's order."""
    return [(k.name, k.schema) for k in META_KEYS if k.schema is not None]
