"""Run under ``torchrun`` by tests/measure/test_distributed_sharded.py (not a test module itself).

``torchrun --nproc-per-node N sharded_worker.py OUTDIR fsdp``: each rank shards :class:`TwoBlocks`
with FSDP2 (``fully_shard`` on each block, then the root; gloo on the CPU); ``... OUTDIR tp``: each
rank holds a tensor-parallel :class:`Block` (``ColwiseParallel`` then ``RowwiseParallel``). Each
rank profiles its model, gathers on rank 0, and writes what it saw to ``OUTDIR/rankN.json``;
rank 0 also saves the gathered profile.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn


class Block(nn.Module):
    """A residual MLP block: Linear, ReLU, Linear, add."""

    def __init__(self, width: int = 16, hidden: int = 32):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class FourBlocks(nn.Module):
    """Four identical blocks called one after the other (no loop: dynamo compiles the root's frame)."""

    def __init__(self):
        super().__init__()
        self.b0, self.b1, self.b2, self.b3 = Block(), Block(), Block(), Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b3(self.b2(self.b1(self.b0(x))))


def four_blocks_model() -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = FourBlocks()
    for block in (model.b0, model.b1, model.b2, model.b3):
        fully_shard(block)
    fully_shard(model)
    return model


class NappingBlock(Block):
    """A :class:`Block` that first naps ``nap_ms`` (a rank made slow on purpose; one node)."""

    def __init__(self, nap_ms: int):
        super().__init__()
        self.nap_ms = nap_ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from distributed_worker import nap

        return super().forward(nap(x, self.nap_ms))


def sharded_model(nap_ms: int = 0) -> nn.Module:
    """:class:`TwoBlocks` sharded by FSDP2; with ``nap_ms``, its first block naps that long."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = TwoBlocks()
    if nap_ms:
        model.blocks[0] = NappingBlock(nap_ms)
        model.blocks[0].load_state_dict(Block().state_dict())
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


class Outer(nn.Module):
    """A Linear and a parameter of its own, used by its own code."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(16, 16)
        self.w = nn.Parameter(torch.randn(16, 16) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) @ self.w


class Nested(nn.Module):
    """What tracing through FSDP2 modules must get right: a parameter used by the root's own
    code, a sharded Linear traced into (``fully_shard`` on a leaf), a module called twice (its
    parameters gathered and freed twice), an FSDP module inside another."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 16))
        self.a = nn.Linear(16, 16)
        self.shared = nn.Linear(16, 16)
        self.outer = Outer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(self.outer(self.shared(self.a(x * self.scale))))


def nested_model() -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Nested()
    fully_shard(model.a)
    fully_shard(model.shared)
    fully_shard(model.outer.inner)
    fully_shard(model.outer)
    fully_shard(model)
    return model


def tensor_parallel_block() -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    block = Block()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return parallelize_module(block, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


def two_dimensional() -> nn.Module:
    """:class:`TwoBlocks` on a 2x2 mesh: each block tensor parallel over ``tp`` (as
    :func:`tensor_parallel_block`), then FSDP2 over ``dp``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = TwoBlocks()
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def _local(p: torch.Tensor) -> torch.Tensor:
    return (p.to_local() if hasattr(p, "to_local") else p).detach().clone()


def _refusal(call) -> str:
    try:
        call()
    except ValueError as exc:
        return str(exc)
    return ""


def _train_step(model: nn.Module, x: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    """One SGD step on ``model`` (FSDP's own hooks: gathers, reduce-scatters): the loss and the
    local shards after it."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item(), {name: _local(p) for name, p in model.named_parameters()}


class KeepGrads(torch.optim.Optimizer):
    """An optimizer whose step changes nothing and keeps a copy of every local gradient shard it
    sees: what a real optimizer would have stepped with in each profiled training step."""

    def __init__(self, params):
        super().__init__(params, {})
        self.seen: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.seen.append([_local(p.grad) if p.grad is not None else None
                          for group in self.param_groups for p in group["params"]])


def _grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The local gradient shards of one plain forward and backward (FSDP's own), loss = sum of outputs."""
    model(x).sum().backward()
    grads = [_local(p.grad) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def _training_loop(model: nn.Module, xs: list[torch.Tensor], session=None, fail_at: int | None = None) -> dict:
    """The user's own FSDP2 training loop: forward, loss, backward, SGD with momentum, zero_grad
    (and ``session.step()``); each step's loss, local gradient shards and local parameter shards.
    At step 3 a validation pass (eval, no_grad) follows the step. ``fail_at``: the loop raises at
    that step, between its forward and its backward."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen: dict = {"losses": [], "grads": [], "params": []}
    for step, x in enumerate(xs):
        loss = model(x).square().mean()
        if step == fail_at:
            raise RuntimeError(f"the loop's own error at step {step}")
        loss.backward()
        seen["grads"].append([_local(p.grad) for p in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
        seen["losses"].append(loss.detach().clone())
        seen["params"].append([_local(p) for p in model.parameters()])
        if step == 3:
            model.eval()
            with torch.no_grad():
                seen["losses"].append(model(x).square().mean())
            model.train()
        if session is not None:
            session.step()
    return seen


def _skipping_loop(model: nn.Module, xs: list[torch.Tensor], session=None) -> list[torch.Tensor]:
    """A loop that skips a bad batch: at step 3 the model itself raises (a batch of the wrong width)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step, x in enumerate(xs):
        try:
            loss = model(x if step != 3 else x[:, :15]).square().mean()
        except RuntimeError:
            loss = None
        if loss is not None:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach().clone())
        if session is not None:
            session.step()
    return losses


def _two_forward_loop(model: nn.Module, xs: list[torch.Tensor], session=None) -> list[torch.Tensor]:
    """Two forwards feeding one loss in each step (one backward for both)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for first, second in zip(xs[0::2], xs[1::2]):
        loss = model(first).square().mean() + model(second).abs().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().clone())
        if session is not None:
            session.step()
    return losses


def _same(a: dict, b: dict) -> bool:
    """Bit-identical losses, gradient shards and parameter shards, step by step."""
    if len(a["losses"]) != len(b["losses"]) or not a["losses"]:
        return False
    return (all(torch.equal(x, y) for x, y in zip(a["losses"], b["losses"]))
            and all(len(g) == len(h) and all(torch.equal(x, y) for x, y in zip(g, h))
                    for key in ("grads", "params") for g, h in zip(a[key], b[key])))


def _unwrapped(model: nn.Module) -> bool:
    """No timing wrapper left on an FSDP parameter group, no forward left on an instance."""
    from fxprof.measure.distributed.fsdp import TrainingSteps, fsdp_modules, param_groups_by_path

    return (all(not set(TrainingSteps.WRAPPED) & set(vars(group)) for _, group in param_groups_by_path(fsdp_modules(model)))
            and not any("forward" in vars(m) for m in model.modules()))


def in_a_session(outdir: str, rank: int) -> dict:
    """``fxprof.session(model, backward=True)`` over the user's FSDP2 training loop, on each model:
    every rank's loop against a twin's never profiled; rank 0 keeps the gathered profile. Then a
    loop that raises inside the session."""
    import warnings

    import fxprof

    torch.manual_seed(10 + rank)
    xs = [torch.randn(8, 16) for _ in range(6)]
    out: dict = {}
    plan = fxprof.schedule(wait=1, warmup=1, active=3)  # steps 0 eager, 1 warm-up, 2-4 timed, 5 eager again
    for name, make in (("two", sharded_model), ("nested", nested_model), ("four", four_blocks_model)):
        model, twin = make(), make()
        expected = _training_loop(twin, xs)
        ready: list = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with fxprof.session(model, schedule=plan, backward=True, on_ready=ready.append) as s:
                got = _training_loop(model, xs, s)
        record = {"same": _same(got, expected), "unwrapped": _unwrapped(model), "profiles": len(s.profiles),
                  "warnings": [str(w.message) for w in caught if "fxprof" in str(w.message)]}
        if ready:
            prof = ready[0]
            record.update(ranks=prof.ranks, runs=len(prof.runs), note=prof.meta.get("capture_note", ""),
                          nodes=[[n.name, n.kind, n.scope, n.phase] for n in prof.nodes])
            if name == "two":
                per_layer = prof.group_by("scope", depth=2)
                fsdp = prof.df[prof.df.index.str.startswith("fsdp")]
                record.update(comm_nodes=int(prof.group_by("comm").loc["communication", "nodes"]),
                              layer_comm_ms={b: float(per_layer.loc[b, "comm_ms"]) for b in ("blocks.0", "blocks.1")},
                              layer_compute_ms={b: float(per_layer.loc[b, "compute_ms"]) for b in ("blocks.0", "blocks.1")},
                              overlap=[[row["layer"], row["phase"], int(row["gathers"])]
                                       for _, row in fxprof.overlap(prof).reset_index().iterrows()],
                              fsdp_meta=prof.meta.get("fsdp"),
                              backward_note=next((n for n in prof.meta.get("notes", []) if n.startswith("backward=True")), ""),
                              fsdp_rows_on_both_ranks=bool(len(fsdp) and fsdp["rank_max_ms"].notna().all()
                                                           and (fsdp["median_ms"] > 0).all()))
        out[name] = record
    # two forwards before one backward: one run per step, the second call's FSDP rows numbered _1
    model, twin = sharded_model(), sharded_model()
    ready = []
    pairs = xs + [torch.randn(8, 16) for _ in range(6)]
    with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=3), backward=True, gather=False,
                        on_ready=ready.append) as s:
        losses = _two_forward_loop(model, pairs, s)
    expected = _two_forward_loop(twin, pairs)
    out["joined"] = {"same": len(losses) == 6 and all(torch.equal(a, b) for a, b in zip(losses, expected)),
                     "runs": int(ready[0].num_runs), "rows": sorted(n.name for n in ready[0].nodes if n.graph == "fsdp")}
    # the model raises inside a timed step's forward and the loop goes on: the runs after it are whole
    model, twin = sharded_model(), sharded_model()
    ready = []
    with fxprof.session(model, schedule=fxprof.schedule(wait=1, warmup=1, active=5), backward=True, gather=False,
                        on_ready=ready.append) as s:
        losses = _skipping_loop(model, xs, s)
    expected = _skipping_loop(twin, xs)
    samples = ready[0].samples
    last = samples[samples["run"] == samples["run"].max()]
    out["skipped"] = {"same": len(losses) == 5 and all(torch.equal(a, b) for a, b in zip(losses, expected)),
                      "unwrapped": _unwrapped(model), "runs": int(ready[0].num_runs),
                      "last_run_rows": sorted(n for n in last["node"] if n.startswith("fsdp:"))}
    # the loop raises between a timed step's forward and its backward: everything removed, FSDP's state intact
    model, twin = sharded_model(), sharded_model()
    failed = ""
    try:
        with fxprof.session(model, schedule=plan, backward=True, gather=False) as s:
            _training_loop(model, xs, s, fail_at=3)
    except RuntimeError as exc:
        failed = str(exc)
    try:
        _training_loop(twin, xs, fail_at=3)
    except RuntimeError:
        pass
    out["raised"] = {"error": failed, "unwrapped": _unwrapped(model), "incomplete": bool(s.profiles and s.profiles[0].meta.get("incomplete")),
                     "same_after": _same(_training_loop(model, xs[:2]), _training_loop(twin, xs[:2]))}
    return out


def train(outdir: str, rank: int) -> None:
    """``fxprof.profile(backward=True)`` on :class:`TwoBlocks` and on :class:`Nested` (FSDP2), and
    ``fxprof.session(backward=True)`` over a training loop of each (:func:`in_a_session`)."""
    import fxprof
    from fxprof.measure.distributed.fsdp import TrainingSteps, fsdp_modules, param_groups_by_path

    torch.manual_seed(1 + rank)
    x = torch.randn(8, 16)
    record: dict = {"rank": rank}
    for name, make in (("two", sharded_model), ("nested", nested_model), ("four", four_blocks_model)):
        model, twin = make(), make()
        expected = _grads(twin, x)  # a plain training step's gradients (never profiled)
        params = {n: _local(p) for n, p in model.named_parameters()}
        keep = KeepGrads(model.parameters())
        prof = fxprof.profile(model, x, backward=True, optimizer=keep, warmup=1, iters=3, anatomy=False)
        record[name] = {
            "nodes": [[n.name, n.kind, n.scope, n.phase] for n in prof.nodes],
            "capture_note": prof.meta.get("capture_note", ""),
            # every profiled step's gradients are FSDP's reduce-scattered ones
            "steps": len(keep.seen),
            "same_grads": all(len(seen) == len(expected) and all(g is not None and torch.equal(g, e) for g, e in zip(seen, expected))
                              for seen in keep.seen),
            "same_params": all(torch.equal(_local(p), params[n]) for n, p in model.named_parameters()),
            "no_grads_left": all(p.grad is None for p in model.parameters()),
            # FSDP's objects are given back as they were: no timing wrapper left on a parameter group
            "unwrapped": all(not set(TrainingSteps.WRAPPED) & set(vars(group))
                             for _, group in param_groups_by_path(fsdp_modules(model)))
            and not any("forward" in vars(m) for m in model.modules()),
            # FSDP's state is left as it was: a plain step afterwards gives the same gradients again
            "after": all(torch.equal(g, e) for g, e in zip(_grads(model, x), expected)),
        }
        if name == "two":
            merged = fxprof.gather(prof, dst=0)
            if merged is not None:
                merged.save(os.path.join(outdir, "merged.json"))
    record["session"] = in_a_session(outdir, rank)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
        json.dump(record, handle)


def main(outdir: str, kind: str) -> None:
    import fxprof
    from fxprof.measure.capture.captures import capture_model

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        if kind == "train":
            return train(outdir, rank)
        if kind == "slow":  # rank 1 naps in the first block: the others wait in the second block's gather
            from distributed_worker import SLOW_MS

            model = sharded_model(SLOW_MS if rank == 1 else 1)
        else:
            model = {"fsdp": sharded_model, "tp": tensor_parallel_block, "2d": two_dimensional}[kind]()
        # data parallel: each rank its own batch; tensor parallel: every rank of a group the same input
        torch.manual_seed({"fsdp": 1 + rank, "slow": 1 + rank, "tp": 1, "2d": 1 + rank // 2}[kind])
        x = torch.randn(8, 16)
        with torch.no_grad():
            reference = model(x) + 0  # + 0: a collective's result waited for
        params = {name: _local(p) for name, p in model.named_parameters()}
        rng = torch.get_rng_state()

        prof = fxprof.profile(model, x, warmup=1, iters=5, anatomy=kind != "slow")
        merged = fxprof.gather(prof, dst=0)

        with torch.no_grad():
            after = model(x) + 0
            graph_out = capture_model(model, (x,), {}, "auto").gm(x) + 0  # what the timed runs ran
        record = {
            "rank": rank,
            "nodes": [n.name for n in prof.nodes],
            "capture": prof.meta.get("capture"),
            "same_output": bool(torch.equal(after, reference)),
            "graph_output": bool(torch.equal(graph_out, reference)),
            "same_params": all(torch.equal(_local(p), params[name]) for name, p in model.named_parameters()),
            "same_rng": bool(torch.equal(torch.get_rng_state(), rng)),
            "plain_notes": prof.meta.get("notes", []),
        }
        if kind == "fsdp":
            # training after profiling: the same step as on a twin never profiled (FSDP's state intact)
            twin = sharded_model()
            with torch.no_grad():
                twin(x)  # the profiled model has run forward under no_grad too (FSDP keeps the root gathered)
            loss, shards = _train_step(model, x)
            twin_loss, twin_shards = _train_step(twin, x)
            record["train_same"] = loss == twin_loss and all(torch.equal(shards[k], twin_shards[k]) for k in shards)
            record["train_loss"] = loss
            nested = nested_model()
            with torch.no_grad():
                expected = nested(x)
            profiled = fxprof.profile(nested, x, warmup=1, iters=2, anatomy=False)
            with torch.no_grad():
                got = capture_model(nested, (x,), {}, "auto").gm(x)
            record["nested_nodes"] = [[n.name, n.kind, n.scope] for n in profiled.nodes]
            record["nested_output"] = bool(torch.equal(got, expected)) and bool(torch.equal(nested(x), expected))
            model.blocks[0].set_modules_to_forward_prefetch([model.blocks[1]])
            with torch.no_grad():
                trained = model(x)  # the step above changed the parameters
            prefetched = fxprof.profile(model, x, warmup=0, iters=1, anatomy=False)
            record["prefetch_nodes"] = [n.name for n in prefetched.nodes]
            with torch.no_grad():
                record["prefetch_output"] = bool(torch.equal(model(x), trained))
            model.blocks[0].set_modules_to_forward_prefetch([])
            # what FSDP2 cannot yet be profiled with

            def in_a_session() -> None:
                with fxprof.session(model, schedule=fxprof.schedule(wait=0, warmup=0, active=1)) as s:
                    model(x)
                    s.step()

            record["session"] = _refusal(in_a_session)
            record["session_at_once"] = _refusal(lambda: fxprof.session(model))  # at the call, before any step

            def mixed_precision() -> None:
                from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

                torch.manual_seed(0)
                halves = TwoBlocks()
                policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
                for block in halves.blocks:
                    fully_shard(block, mp_policy=policy)
                fully_shard(halves, mp_policy=policy)
                fxprof.profile(halves, x, iters=1)

            record["mixed_precision"] = _refusal(mixed_precision)
            record["leaf"] = _refusal(lambda: fxprof.profile(model, x, iters=1, leaf_modules=["blocks.1"]))
            with torch.no_grad():  # the session gave the model back as it was
                record["after_session"] = "forward" not in model.__dict__ and bool(torch.equal(model(x), trained))
            record["dynamo"] = _refusal(lambda: fxprof.profile(model, x, capture="dynamo", iters=1))
        if merged is not None:
            merged.save(os.path.join(outdir, "merged.json"))
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
            json.dump(record, handle)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
