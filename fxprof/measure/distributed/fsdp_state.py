"""An FSDP2 model's parameters as FSDP owns them, for saving and restoring a training profile's state.

FSDP2 registers on each module either the sharded parameters (``DTensor``, the ones the
optimizer holds and the reduce-scattered gradients land on) or, between an all-gather and the
reshard after it, unsharded ones (plain ``Parameter``, whose storage FSDP frees when it reshards).
After a ``torch.no_grad()`` forward (a validation pass, or fxprof's own forward profile) the root
keeps its unsharded parameters registered until the next forward with grad, whose backward
reshards them. A state saved from ``model.parameters()`` then would hold the unsharded
parameters: their ``.grad`` is not where FSDP puts the gradients, and copying values back into
them after the profile's backward freed their storage writes into freed memory.

:func:`owned_parameters` maps every parameter to the sharded one FSDP owns (the same object for
one FSDP does not manage), and :func:`reshard` registers the sharded parameters again (FSDP's
public ``FSDPModule.reshard``), which a restore does first, so that what it writes is what the
next step reads. Private parts of FSDP2 read (torch 2.11 and later): each parameter group's
``fsdp_params``, each one's ``sharded_param`` and ``_unsharded_param``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .fsdp import param_groups_by_path

__all__ = ["owned_parameters", "reshard", "refuse_unsharded_in_optimizer", "refuse_pending_gradients"]


def _fsdp_params(modules: dict[str, nn.Module]) -> list[tuple[str, Any]]:
    return [(path, fp) for path, group in param_groups_by_path(modules) for fp in getattr(group, "fsdp_params", [])]


def _unsharded_to_sharded(modules: dict[str, nn.Module]) -> dict[int, tuple[str, nn.Parameter]]:
    """``id(unsharded parameter) -> (FSDP module path, its sharded parameter)`` for every FSDP
    parameter that has been all-gathered at least once."""
    out = {}
    for path, fp in _fsdp_params(modules):
        unsharded = vars(fp).get("_unsharded_param")
        if unsharded is not None:
            out[id(unsharded)] = (path, fp.sharded_param)
    return out


def owned_parameters(modules: dict[str, nn.Module], params: list[nn.Parameter]) -> list[nn.Parameter]:
    """``params`` with each unsharded FSDP parameter replaced by its sharded one, in order, each
    parameter once."""
    mapping = _unsharded_to_sharded(modules)
    out, seen = [], set()
    for p in params:
        owned = mapping.get(id(p), (None, p))[1]
        if id(owned) not in seen:
            seen.add(id(owned))
            out.append(owned)
    return out


def refuse_unsharded_in_optimizer(modules: dict[str, nn.Module], optimizer: Any) -> None:
    """ValueError when ``optimizer`` holds an unsharded FSDP parameter (an optimizer built from
    ``model.parameters()`` after a ``torch.no_grad()`` forward): stepping it would write into
    memory FSDP frees, and it never reaches the shards FSDP trains."""
    if optimizer is None:
        return
    mapping = _unsharded_to_sharded(modules)
    held = sorted({mapping[id(p)][0] or "(root)" for g in optimizer.param_groups for p in g["params"] if id(p) in mapping})
    if held:
        raise ValueError(
            f"the optimizer holds unsharded parameters of FSDP module(s) {', '.join(held)} (built from model.parameters() "
            f"while FSDP kept them gathered, as after a torch.no_grad() forward): their step would not reach the sharded "
            f"parameters FSDP trains. Build the optimizer before the model's first forward, as with FSDP2 training.")


def reshard(modules: dict[str, nn.Module]) -> None:
    """Free every FSDP module's gathered parameters and register the sharded ones (a module
    already sharded is left as it is)."""
    for module in modules.values():
        module.reshard()  # type: ignore[operator]


def refuse_pending_gradients(modules: dict[str, nn.Module]) -> None:
    """ValueError when FSDP holds gradients of its own between steps, or would: gradient sync off
    (``set_requires_gradient_sync(False)``, a microbatch of gradient accumulation), or unsharded
    gradients a microbatch left for the next reduce-scatter. A profiled backward would add its
    gradients into them, or reduce-scatter them, and change the training it looks at."""
    off = sorted({path or "(root)" for path, group in param_groups_by_path(modules) if not getattr(group, "reduce_grads", True)})
    pending = sorted({path or "(root)" for path, fp in _fsdp_params(modules)
                      if getattr(fp, "unsharded_accumulated_grad", None) is not None
                      or getattr(vars(fp).get("_unsharded_param"), "grad", None) is not None})
    if off:
        raise ValueError(
            f"gradient sync is off on FSDP module(s) {', '.join(off)} (set_requires_gradient_sync(False)): FSDP would keep "
            f"the profiled steps' gradients for the next reduce-scatter, and the training would take them in. Profile "
            f"with gradient sync on, or profile the accumulation loop itself with fxprof.session(model, backward=True).")
    if pending:
        raise ValueError(
            f"FSDP module(s) {', '.join(pending)} hold gradients accumulated for the next reduce-scatter (a microbatch "
            f"with gradient sync off ran since the last one): a profiled step would reduce-scatter them with its own. "
            f"Profile after the optimizer step, or profile the loop itself with fxprof.session(model, backward=True).")
