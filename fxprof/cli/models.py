"""Resolving a model name or import path and input specs for the command line."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import re
import sys
from typing import Iterator

import torch
from torch import nn

from ..errors import FxprofError
from .input_spec import DTYPE_NAMES, check_specs, parse_spec

__all__ = ["load_model", "parse_input", "make_input", "build_inputs", "resolve_modules", "float_dtype", "device_option",
           "DEFAULT_IMAGE_INPUT"]

DEFAULT_IMAGE_INPUT = "1x3x224x224"

_DTYPES = {name: getattr(torch, canonical) for name, canonical in DTYPE_NAMES.items()}


def load_model(spec: str) -> nn.Module:
    """A torchvision model name (``resnet18``), ``package.module:factory`` or ``file.py:factory``.

    torchvision models are built with ``weights=None`` (nothing is downloaded). For
    ``package.module:factory`` the current folder is importable first (as with ``python -m``).
    A file is loaded under a private module name; its folder (and the current folder) are
    importable *after* the standard library and installed packages, so that a file named
    ``profile.py`` or ``sympy.py`` (or a sibling so named) never hides the module of that name
    from torch or fxprof. The file is also registered under its own name (``mymodel``, so that
    ``--leaf-module mymodel.Block`` names the classes the factory uses) only when no other
    module has that name. While the file is imported and the factory called, ``sys.argv`` holds
    only the file's path (as ``python file.py`` would give it), and a ``sys.exit`` from either
    is an error that says so, not fxprof's exit.
    """
    if ":" not in spec:
        return _torchvision_model(spec)
    where, _, factory_name = spec.rpartition(":")
    if not where or not factory_name.isidentifier():
        raise FxprofError(f"bad model {spec!r}: expected 'package.module:factory' or 'path/to/file.py:factory'")
    if _is_file(where):
        if not os.path.isfile(where):
            raise FxprofError(f"bad model {spec!r}: no such file {where!r}")
        folder = os.path.dirname(os.path.abspath(where))
        _importable(folder, first=False)
        _importable(os.getcwd(), first=False)
        own_name = os.path.splitext(os.path.basename(where))[0]
        module_name = "_fxprof_user_" + re.sub(r"\W", "_", own_name)
        loader_spec = importlib.util.spec_from_file_location(module_name, where)
        if loader_spec is None or loader_spec.loader is None:
            raise FxprofError(f"bad model {spec!r}: cannot import {where!r}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        if _free_module_name(own_name, folder):
            sys.modules[own_name] = module
        try:
            with _as_script(spec, f"importing {where!r}", where):
                loader_spec.loader.exec_module(module)
        except FxprofError:
            raise
        except Exception as exc:  # a syntax error, a failing import inside the file...
            raise FxprofError(f"bad model {spec!r}: importing {where!r} raised {type(exc).__name__}: {exc}") from exc
    else:
        _importable(os.getcwd())
        try:
            with _as_script(spec, f"importing {where!r}", where):
                module = importlib.import_module(where)
        except FxprofError:
            raise
        except ImportError as exc:
            raise FxprofError(f"bad model {spec!r}: cannot import module {where!r} ({exc})") from exc
        except Exception as exc:
            raise FxprofError(f"bad model {spec!r}: importing {where!r} raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise FxprofError(f"bad model {spec!r}: {where!r} has no attribute {factory_name!r}")
    try:
        with _as_script(spec, f"{factory_name}()", where):
            model = factory() if callable(factory) and not isinstance(factory, nn.Module) else factory
    except FxprofError:
        raise
    except Exception as exc:
        raise FxprofError(f"bad model {spec!r}: {factory_name}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise FxprofError(
            f"bad model {spec!r}: {factory_name}() returned {type(model).__name__}, not an nn.Module "
            "or fx.GraphModule"
        )
    return model


@contextlib.contextmanager
def _as_script(spec: str, what: str, where: str) -> Iterator[None]:
    """Run user code with ``sys.argv`` as ``[where]`` (a file that parses its arguments on
    import sees none, not fxprof's), and turn its ``sys.exit`` into an error naming it."""
    saved = sys.argv
    sys.argv = [where]
    try:
        yield
    except SystemExit as exc:
        raise FxprofError(
            f"bad model {spec!r}: {what} called sys.exit({exc.code!r}); a model file must not exit when it is "
            f"imported or its factory called. Put its script part under `if __name__ == \"__main__\":`"
        ) from None
    finally:
        sys.argv = saved


def _free_module_name(name: str, folder: str) -> bool:
    """True if no standard, installed or already imported module is called ``name`` (the
    file's own folder aside). ``PathFinder`` looks without importing anything."""
    from importlib.machinery import PathFinder

    if not name.isidentifier() or name in sys.modules or name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return False
    here = os.path.realpath(folder)
    elsewhere = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    try:
        return PathFinder.find_spec(name, elsewhere) is None
    except (ImportError, ValueError, OSError):
        return False


def _torchvision_model(name: str) -> nn.Module:
    import torchvision

    available = set(torchvision.models.list_models())
    if name not in available:
        close = difflib.get_close_matches(name.lower(), sorted(available), n=4, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise FxprofError(
            f"unknown model {name!r}: not a torchvision model name, nor 'module:factory'.{hint} "
            f"`python -c 'import torchvision; print(torchvision.models.list_models())'` lists them."
        )
    kwargs = {"weights": None}
    if name in set(torchvision.models.list_models(module=torchvision.models.detection)) | set(
        torchvision.models.list_models(module=torchvision.models.segmentation)
    ):
        kwargs["weights_backbone"] = None
    if name.startswith("inception") or name == "googlenet":
        kwargs["aux_logits"] = False
        kwargs["init_weights"] = False
    return torchvision.models.get_model(name, **kwargs)


def parse_input(spec: str) -> tuple[tuple[int, ...], torch.dtype | None]:
    """``1x3x224x224`` -> ((1, 3, 224, 224), None); ``2x128:int64`` -> ((2, 128), torch.int64)."""
    shape, dtype = parse_spec(spec)
    return shape, None if dtype is None else getattr(torch, dtype)


def float_dtype(text: str) -> torch.dtype:
    """``--dtype``: a floating dtype by name, or an error that lists the choices."""
    dtype = _DTYPES.get(text.lower())
    if dtype is None or not dtype.is_floating_point:
        raise FxprofError(f"bad --dtype {text!r}: use float32, float16, bfloat16 or float64")
    return dtype


def device_option(text: str, usable: bool = True) -> torch.device:
    """``--device``: a torch device, or an error; with ``usable``, also one this machine has."""
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise FxprofError(f"bad --device {text!r}: {exc}") from exc
    if usable and device.type == "cuda" and not torch.cuda.is_available():
        raise FxprofError(f"--device {text} asked for, but torch.cuda.is_available() is False on this machine; use --device cpu")
    if usable and device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise FxprofError(f"--device {text}: this machine has {torch.cuda.device_count()} CUDA device(s) (cuda:0...)")
    return device


def make_input(shape: tuple[int, ...], dtype: torch.dtype | None, default_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A random input: normal floats, or integers in [0, 100) (token ids, class indices)."""
    dtype = dtype or default_dtype
    generator = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        value = torch.randn(shape, generator=generator).to(dtype)
    elif dtype == torch.bool:
        value = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        value = torch.randint(0, 100, shape, generator=generator, dtype=torch.int64).to(dtype)
    return value.to(device)


def _importable(folder: str, first: bool = True) -> None:
    """Put ``folder`` on the import path (first, or last), once."""
    folder = os.path.abspath(folder)
    if folder not in (os.path.abspath(p or os.curdir) for p in sys.path):
        if first:
            sys.path.insert(0, folder)
        else:
            sys.path.append(folder)


def build_inputs(specs: list[str] | None, dtype: torch.dtype, device: torch.device,
                 parse_only: bool = False) -> tuple[list, dict]:
    """``--input`` values as (positional inputs, keyword inputs). ``name=2x128:int64`` is a
    keyword input; the others are positional, in order. ``parse_only`` checks the specs
    and returns no tensors."""
    positional: list = []
    keywords: dict = {}
    for spec in check_specs(specs or [DEFAULT_IMAGE_INPUT]):
        dt = None if spec.dtype is None else getattr(torch, spec.dtype)
        value = None if parse_only else make_input(spec.shape, dt, dtype, device)
        if spec.name is not None:
            keywords[spec.name] = value
        else:
            positional.append(value)
    return positional, keywords


def resolve_modules(option: str, items: list[str], model: nn.Module) -> list:
    """``--leaf-module`` / ``--trace-into`` values as classes (``pkg.mod:Class`` or
    ``pkg.mod.Class``, via ``pkgutil.resolve_name``) or submodule paths of ``model``."""
    import pkgutil

    names = {name for name, _ in model.named_modules() if name}
    out: list = []
    for item in items:
        if item in names:
            out.append(item)
            continue
        try:
            value = pkgutil.resolve_name(item)
        except (ImportError, AttributeError, ValueError) as exc:
            classes = sorted({f"{type(m).__module__}.{type(m).__qualname__}" for m in model.modules()})
            close = difflib.get_close_matches(item, sorted(names) + classes, n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise FxprofError(
                f"bad {option} {item!r}: not a submodule path of the model nor an importable class "
                f"({type(exc).__name__}: {exc}).{hint} Give a class as package.module:Class or "
                f"package.module.Class, or a path such as {next(iter(sorted(names)), 'layer1')!r}"
            ) from exc
        if not (isinstance(value, type) and issubclass(value, nn.Module)):
            raise FxprofError(f"bad {option} {item!r}: it names {type(value).__name__} {value!r}, not an nn.Module class")
        out.append(value)
    return out


def _is_file(where: str) -> bool:
    """``where`` (a spec's part before ``:factory``) names a file, not a ``package.module``."""
    return where.endswith(".py") or os.sep in where or "/" in where


def _model_folder(spec: str) -> str | None:
    """The folder a model spec's own code comes from: a file's folder, the current folder for
    ``package.module:factory``; None for a torchvision name."""
    if ":" not in spec:
        return None
    where = spec.rpartition(":")[0]
    if _is_file(where):
        return os.path.dirname(os.path.abspath(where))
    return os.getcwd()


def _own_modules(names: set[str], folder: str) -> list[str]:
    """Of the modules ``names``, those whose file lies in ``folder`` (installed packages in a
    virtual environment inside it excepted)."""
    root = os.path.realpath(folder) + os.sep
    own = []
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if not path:
            continue
        real = os.path.realpath(path)
        if real.startswith(root) and "site-packages" not in real and "dist-packages" not in real:
            own.append(name)
    return own


def load_side_by_side(spec_a: str, spec_b: str) -> tuple[nn.Module, nn.Module]:
    """Two models in one process, each from its own code: ``a`` is loaded, then the modules that
    loading ``a`` imported from its own folder are forgotten and that folder leaves the import
    path while ``b`` loads. So ``base/model.py:build`` and ``model.py:build`` (two checkouts
    whose ``model.py`` both ``import layers``) each get their own ``layers``, not the one that
    was imported first. ``a``'s model keeps the classes it was built from; ``sys.path`` is put
    back after."""
    before = set(sys.modules)
    model_a = load_model(spec_a)
    folder = _model_folder(spec_a)
    if folder is None or spec_a == spec_b:
        return model_a, load_model(spec_b)  # the same spec twice (an A/A pair): two builds, nothing shared
    for name in _own_modules(set(sys.modules) - before, folder):
        sys.modules.pop(name, None)
    saved = list(sys.path)
    other = _model_folder(spec_b)
    here = os.path.realpath(folder)
    if other is None or os.path.realpath(other) != here:
        sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    try:
        return model_a, load_model(spec_b)
    finally:
        sys.path[:] = saved

