"""Tensor-parallel modules (``parallelize_module``): their redistributions and collectives as rows.

``parallelize_module`` (``ColwiseParallel``, ``RowwiseParallel``...) shards a module's parameters
as DTensors and wraps its forward in a pre-hook that turns the input into the layout the
sharded matmul needs and a hook that turns the output into the layout the next module takes
(``RowwiseParallel``'s output: an all-reduce of the partial sums). Called as one module node,
the layer's time holds both: the collective has no row.

:func:`split_parallel_modules` replaces each such module's node with three (each a
:class:`TPStep`, which runs the same code ``nn.Module.__call__`` would, in the same order):

``<name>_input``   the module's forward pre-hooks (the input's redistribution)
``<name>``         the module's own ``forward`` (the sharded computation), kind as before
``<name>_output``  the module's forward hooks (the output's redistribution), then the wait
                   for a collective still in flight (an ``AsyncCollectiveTensor``), so that the
                   collective's time is in this row and not in whichever node used it first

The kinds of the input and output rows are set once the capture has run them
(:meth:`TPStep.note_collectives`): the collective each issues (``all_reduce``,
``all_gather_into_tensor``, ``reduce_scatter_tensor``...: communication in
``group_by("comm")``), or ``redistribute`` when it issued none (a local re-labelling, no
communication). Modules with keyword-argument hooks are left whole.
"""

from __future__ import annotations

import sys
from typing import Any

from torch import fx, nn

from ...vocab import MODEL, NO_COLLECTIVE, TP

__all__ = ["is_tensor_parallel", "parallel_modules", "split_parallel_modules", "TPStep", "NO_COLLECTIVE"]



def _dtensor_class() -> type | None:
    if "torch.distributed.tensor" not in sys.modules:  # never imported: no model holds a DTensor
        return None
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without torch.distributed
        return None
    return DTensor


def _is_parallel(module: nn.Module, dtensor: type) -> bool:
    """A module whose own parameters are DTensors and whose forward is wrapped in (plain) hooks."""
    if not any(isinstance(p, dtensor) for p in module.parameters(recurse=False)):
        return False
    if module._forward_pre_hooks_with_kwargs or module._forward_hooks_with_kwargs:
        return False
    return bool(module._forward_pre_hooks or module._forward_hooks)


def is_tensor_parallel(model: nn.Module) -> bool:
    """Whether ``model`` holds tensor-parallel modules (see the module docs)."""
    dtensor = _dtensor_class()
    return dtensor is not None and any(_is_parallel(m, dtensor) for m in model.modules())


def parallel_modules(gm: fx.GraphModule) -> list[fx.Node]:
    """The ``call_module`` nodes of ``gm`` that call a tensor-parallel module (see the module docs)."""
    dtensor = _dtensor_class()
    if dtensor is None:
        return []
    found = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            module = gm.get_submodule(str(node.target))
            if _is_parallel(module, dtensor):
                found.append(node)
    return found


class TPStep:
    """The input hooks, the forward or the output hooks of one tensor-parallel module, as a
    graph node's target; its ``__name__`` is the node's kind."""

    def __init__(self, step: str, module: nn.Module, path: str, kind: str = NO_COLLECTIVE):
        self.step, self.module, self.path = step, module, path
        #: the row's role (fxprof.vocab.ROLES), read by the capture that describes the graph: the
        #: forward is the model's own work, the input and output steps are the redistributions
        self.fxprof_role = MODEL if step == "forward" else TP
        self.__name__ = self.__qualname__ = kind
        self.__module__ = __name__
        #: while the capture probes which collectives each step issues (:meth:`note_collectives`)
        self.probe: Any = None

    def note_collectives(self, ops: list[str]) -> None:
        """Name the step by the collective(s) it issued when run once (none: ``redistribute``)."""
        if self.step != "forward":
            self.__name__ = self.__qualname__ = ops[0] if ops else NO_COLLECTIVE

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.probe is not None:
            return self.probe(self, args, kwargs)
        return self.run(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        module = self.module
        if self.step == "input":  # nn.Module.__call__'s pre-hooks: each may replace the inputs
            inputs = tuple(args)
            for hook in tuple(module._forward_pre_hooks.values()):
                result = hook(module, inputs)
                if result is not None:
                    inputs = result if isinstance(result, tuple) else (result,)
            return inputs
        if self.step == "forward":
            inputs, = args
            return module.forward(*inputs, **kwargs)
        inputs, result = args  # the forward hooks: each may replace the output
        for hook in tuple(module._forward_hooks.values()):
            replaced = hook(module, inputs, result)
            if replaced is not None:
                result = replaced
        wait = getattr(result, "wait", None)
        if wait is not None and type(result).__name__ == "AsyncCollectiveTensor":
            result = wait()  # the collective's time in this row
        return result

    def __repr__(self) -> str:
        return f"tp.{self.step}({self.path})"


def split_parallel_modules(gm: fx.GraphModule, kinds: dict[str, str]) -> list[TPStep]:
    """Replace each tensor-parallel module's node of ``gm`` by its input, forward and output
    steps (see the module docs); ``kinds``: the forward node's kind by node name (what the
    module node's kind was). Returns the input and output steps, for the caller to probe."""
    graph = gm.graph
    steps: list[TPStep] = []
    for node in parallel_modules(gm):
        path = str(node.target)
        module = gm.get_submodule(path)
        with graph.inserting_before(node):
            inputs = graph.create_node("call_function", TPStep("input", module, path), tuple(node.args), {},
                                       name=f"{node.name}_input")
        with graph.inserting_after(node):
            output = graph.create_node("call_function", TPStep("output", module, path), (inputs, node), {},
                                       name=f"{node.name}_output")
        node.replace_all_uses_with(output, delete_user_cb=lambda user: user is not output)
        # the module node itself becomes its forward, past the hooks (its name and meta kept)
        node.op, node.target = "call_function", TPStep("forward", module, path, kinds.get(node.name, "forward"))
        node.args = (inputs,)
        for new in (inputs, output):
            new.meta.update({k: v for k, v in node.meta.items() if k in ("nn_module_stack", "stack_trace")})
        steps += [inputs.target, output.target]
    if steps:
        graph.lint()
        gm.recompile()
    return steps
