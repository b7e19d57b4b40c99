"""anyaccel reaches accelerate, transformers and torch only through public names, or listed hooks.

Every module under ``src/anyaccel`` is read (its AST, never imported): a name bound to one of
those frameworks (an import, ``importlib.import_module("...")``, or a variable assigned from
one) followed by an attribute, or a ``getattr`` string, that starts with ``_`` is a use of
their private ground; so is a private method of a framework class that a subclass of ours
overrides or calls on ``self``. Only the documented hooks in :data:`HOOKS` may do it; each
names why and what it falls back to: torch's internals (autograd's engine, the PrivateUse1
runtime entry points, Inductor's and Dynamo's tables) are listed there like the frameworks'
ones. (Lightning's hooks are left to the Lightning integration's own checks, as
``integrations/lightning`` is.)
"""

from __future__ import annotations

import ast
import pydoc
from pathlib import Path

import pytest

import anyaccel

SRC = Path(anyaccel.__file__).resolve().parent
FRAMEWORKS = (
    "accelerate",
    "transformers",
    "torch.distributed",
    "torch._C._distributed_c10d",
    "torch",
)
#: Framework modules that are private as a whole (torch.distributed's compiled half).
PRIVATE_MODULES = {"torch._C._distributed_c10d": "_distributed_c10d"}
#: (module path under src/anyaccel, private name) -> why the hook exists.
HOOKS: dict[tuple[str, str], str] = {
    ("integrations/accelerate/installing.py", "_shared_state"): (
        "accelerate has no public test for an existing PartialState; falls back to "
        "accelerate.state.is_initialized()"
    ),
    ("distributed/shm/python_group.py", "_distributed_c10d"): (
        "AllgatherOptions and a finished Work from a future are not re-exported by "
        "torch.distributed (2.4 to 2.14); without them: gloo (ANYACCEL_SHM_BACKEND=0)"
    ),
    ("distributed/shm/python_group.py", "_register_backend"): (
        "a Python ProcessGroup hands every method it does not override to gloo this way; "
        "torch has no public call; without it: gloo (ANYACCEL_SHM_BACKEND=0)"
    ),
    ("distributed/shm/python_group.py", "_set_default_backend"): (
        "newer torch asks every group for its default backend; read with getattr, skipped "
        "where absent (torch 2.4)"
    ),
    ("distributed/shm/python_group.py", "_allgather_base"): (
        "the name torch < 2.10 calls for all_gather_into_tensor on a Python ProcessGroup; "
        "newer torch calls the public all_gather_single"
    ),
    ("distributed/shm/python_group.py", "_reduce_scatter_base"): (
        "the name torch < 2.10 calls for reduce_scatter_tensor on a Python ProcessGroup; "
        "newer torch calls the public reduce_scatter_single"
    ),
    ("distributed/shm/group.py", "_use_count"): (
        "whether gloo's worker thread still holds a tensor: torch has no public count; read "
        "with getattr, absent: the group keeps those tensors for the process's life"
    ),
    # torch's own internals: autograd's engine, the PrivateUse1 runtime entry points, Inductor
    ("emulated/shutdown.py", "_execution_engine"): (
        "autograd's engine entry point (run_backward) for the exit drain's backward without "
        "the contextvars stash; absent: torch.autograd.backward and a short pause"
    ),
    ("emulated/state.py", "_C._get_privateuse1_backend_name"): (
        "whether PrivateUse1 is free for the emulated device before it is installed; "
        "torch has no public getter"
    ),
    ("emulated/checkpoints.py", "_C._get_privateuse1_backend_name"): (
        "whether a checkpoint's device type is installed here (torch restores it then) before "
        "the hint says which setting installs it"
    ),
    ("emulated/torch_module.py", "_C._get_privateuse1_backend_name"): (
        "the device type torch.<type>'s functions answer for (the name PrivateUse1 holds)"
    ),
    ("integrations/accelerate/framework_probe.py", "_C._get_privateuse1_backend_name"): (
        "whether the child process asking accelerate already has the parent's PrivateUse1 "
        "device, before it renames PrivateUse1 so the device string parses"
    ),
    ("emulated/runtime.py", "_C._get_privateuse1_backend_name"): (
        "which device owns PrivateUse1 now: torch has no public getter (rename is public); "
        "torch 2.4 to 2.13 all have it"
    ),
    ("backends/generic.py", "_C._get_privateuse1_backend_name"): (
        "the PrivateUse1 device's name for the generic backend; read with getattr, absent: "
        "torch's default name 'privateuseone'"
    ),
    ("emulated/runtime.py", "_register_device_module"): (
        "how an out-of-tree device attaches torch.<device> (OpenReg and every vendor do it); "
        "torch documents no other way"
    ),
    ("testing/torch_suites/__init__.py", "_C._get_privateuse1_backend_name"): (
        "which device owns PrivateUse1, to refuse running torch's suites on no device; torch "
        "has no public getter (as backends/generic.py)"
    ),
    ("testing/torch_suites/compare_cpu.py", "_internal"): (
        "torch.testing._internal: the OpInfo/ModuleInfo databases and "
        "instantiate_device_type_tests with PrivateUse1TestBase, the machinery torch's own "
        "device-generic suites run on; torch ships it in the wheel but documents it as internal"
    ),
    ("emulated/stream_sanitizer.py", "_python_dispatch"): (
        "TorchDispatchMode, the documented __torch_dispatch__ door that sees every op (torch's "
        "own CUDA sanitizer uses it); torch has no public alias; the sanitizer is opt-in"
    ),
    ("emulated/inductor.py", "_inductor"): (
        "inductor's per-device tables (register_backend_for_device, "
        "register_device_op_overrides), its CPU C++ scheduling, Python wrapper and fusion-pass "
        "config, as PyTorch's OpenReg uses them; where one is missing inductor refuses the "
        "device naming aot_eager (on ImportError of the table itself torch's own error stays); "
        "and get_current_backend (utils and codegen.common), wrapped to say 'cpp' for the "
        "device's type alone (absent: left alone)"
    ),
    ("emulated/inductor.py", "_dynamo"): (
        "register_interface_for_device and DeviceInterface, Dynamo's runtime interface for a "
        "device (OpenReg's door too); missing: inductor refuses the device naming aot_eager"
    ),
    ("emulated/inductor.py", "_generate_kernel_call_helper"): (
        "the Python wrapper's per-call hook, overridden to call the device's C++ kernels as "
        "the CPU's (as OpenReg does); absent (older torch): inductor refuses the device"
    ),
    (
        "emulated/inductor.py",
        "_inductor.codegen.wrapper.PythonWrapperCodegen._generate_kernel_call_helper",
    ): "whether this torch has that hook (hasattr only)",
    ("abstract.py", "_dynamo"): (
        "list_backends() to validate set_compile_backend(); torch.compiler.list_backends() is "
        "the public door to move to"
    ),
    ("testing/conformance/checks.py", "_dynamo"): (
        "list_backends() for the compile-backend check (as set_compile_backend validates)"
    ),
    ("testing/simulated/patching.py", "_dynamo"): (
        "register_backend() for a simulated vendor's compile backend (as habana_frameworks "
        "registers hpu_backend); undone on exit"
    ),
    ("testing/simulated/patching.py", "_dynamo.backends.registry._COMPILER_FNS"): (
        "where torch >= 2.6 keeps registered compile backends, to remove the simulated one"
    ),
    ("testing/simulated/patching.py", "_dynamo.backends.registry._BACKENDS"): (
        "where torch 2.4 keeps registered compile backends (and 2.6 names them), to remove "
        "the simulated one"
    ),
    ("ops/host_optimizer.py", "_foreach_div_"): (
        "one fused unscale of the gradients, as torch's own fused optimizers do; no public "
        "foreach API exists"
    ),
    ("backends/cuda.py", "_grouped_mm"): (
        "whether this torch has the grouped GEMM (hasattr only); absent: Triton's is preferred"
    ),
    ("backends/cpu.py", "_is_mkldnn_fp16_supported"): (
        "oneDNN's float16 check for is_fp16_supported(); on AttributeError: False"
    ),
}


def _framework(dotted: str) -> bool:
    return any(dotted == name or dotted.startswith(name + ".") for name in FRAMEWORKS)


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` with ``a`` resolved through ``aliases``; calls kept as ``()``; else None."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            module = _import_module_call(node)
            if module is not None:
                return ".".join([module, *reversed(parts)])
            parts.append("()")
            node = node.func
        elif isinstance(node, ast.Name):
            root = aliases.get(node.id)
            return None if root is None else ".".join([root, *reversed(parts)])
        else:
            return None


def _import_module_call(node: ast.Call) -> str | None:
    """The module name of ``importlib.import_module("name")``, else None."""
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )
    if named and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Every name in the module bound to something of the frameworks (to a fixed point)."""
    aliases: dict[str, str] = {}
    for _ in range(4):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                dotted = _dotted(node.value, aliases)
                if dotted is None or not _framework(dotted):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        aliases[target.id] = dotted
    return aliases


def _private(dotted: str) -> str | None:
    """The private part of ``dotted`` after the framework's own name, else None.

    From its first private component to its last: ``torch._C._get_privateuse1_backend_name``
    is ``_C._get_privateuse1_backend_name``, ``torch._dynamo.list_backends`` is ``_dynamo``.
    """
    for module, private in PRIVATE_MODULES.items():
        if dotted == module or dotted.startswith(module + "."):
            return private
    for name in FRAMEWORKS:
        if dotted == name or dotted.startswith(name + "."):
            parts = dotted[len(name) + 1 :].split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_") and p[:2] != "__"]
            return ".".join(parts[private[0] : private[-1] + 1]) if private else None
    return None


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, private name) for each use of the frameworks' private ground in ``source``."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        dotted: str | None = None
        if isinstance(node, ast.Attribute) and id(node) not in inner:  # whole chains only
            dotted = _dotted(node, aliases)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2:
                owner, name = _dotted(node.args[0], aliases), node.args[1]
                if owner and isinstance(name, ast.Constant) and isinstance(name.value, str):
                    dotted = f"{owner}.{name.value}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                private = _private(f"{node.module}.{alias.name}")
                if private:
                    found.append((node.lineno, private))
        if dotted is not None:
            private = _private(dotted)
            if private:
                found.append((node.lineno, private))  # type: ignore[attr-defined]
    found.extend(_inherited_private_uses(tree, aliases))
    # ``getattr(torch._C, "_x")`` reads ``torch._C`` too: the longer name says it all
    return sorted(
        (line, name)
        for line, name in set(found)
        if not any(o.startswith(name + ".") for at, o in found if at == line)
    )


def _inherited_private_uses(tree: ast.Module, aliases: dict[str, str]) -> list[tuple[int, str]]:
    """Private names of a framework class that a subclass of ours overrides or calls on itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [
            pydoc.locate(dotted)
            for dotted in (_dotted(base, aliases) for base in node.bases)
            if dotted is not None and _framework(dotted)
        ]
        bases = [base for base in bases if base is not None]

        for inner in ast.walk(node) if bases else ():
            if isinstance(inner, ast.FunctionDef) and _inherited(bases, inner.name):
                found.append((inner.lineno, inner.name))  # an override of a private method
            elif isinstance(inner, ast.Attribute) and _is_self(inner.value):
                if _inherited(bases, inner.attr):
                    found.append((inner.lineno, inner.attr))
            elif (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Name)
                and inner.func.id in ("getattr", "hasattr")
                and len(inner.args) >= 2
                and _is_self(inner.args[0])
                and isinstance(inner.args[1], ast.Constant)
                and isinstance(inner.args[1].value, str)
                and _inherited(bases, inner.args[1].value)
            ):
                found.append((inner.lineno, inner.args[1].value))
    return found


def _inherited(bases: list[object], name: str) -> bool:
    """Whether ``name`` is private and one of the framework ``bases`` has it."""
    private = name.startswith("_") and not name.startswith("__")
    return private and any(hasattr(base, name) for base in bases)


def _is_self(node: ast.expr) -> bool:
    """``self`` or ``super()``."""
    return (isinstance(node, ast.Name) and node.id == "self") or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def _modules() -> list[Path]:
    return sorted(
        path
        for path in SRC.rglob("*.py")
        if not path.relative_to(SRC).as_posix().startswith("integrations/lightning")
    )


def test_only_the_documented_hooks_touch_private_names_of_the_frameworks() -> None:
    unexpected = [
        f"{path.relative_to(SRC).as_posix()}:{line}: {name}"
        for path in _modules()
        for line, name in private_uses(path.read_text(encoding="utf-8"))
        if (path.relative_to(SRC).as_posix(), name) not in HOOKS
    ]
    assert unexpected == []


def test_every_documented_hook_is_still_used() -> None:
    """A hook that is gone must leave :data:`HOOKS` too (the list is the report)."""
    gone = [
        f"{module}: {name}"
        for module, name in HOOKS
        if name.rpartition(".")[2] not in (SRC / module).read_text(encoding="utf-8")
    ]
    assert gone == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        # what the accelerate integration and the c10d backend did before
        (
            "import importlib\n"
            "state = importlib.import_module('accelerate.state')\n"
            "partial_state = state.PartialState\n"
            "partial_state._prepare_backend(None, True, False, None)\n",
            [(4, "_prepare_backend")],
        ),
        (
            "import torch.distributed as dist\ngetattr(dist.Backend, '_plugins', {})\n",
            [(2, "_plugins")],
        ),
        ("import torch\nx = torch._C._distributed_c10d\n", [(2, "_distributed_c10d")]),
        # torch's own internals, named from the first private part to the last
        (
            "import torch\ngetattr(torch._C, '_get_privateuse1_backend_name', None)\n",
            [(2, "_C._get_privateuse1_backend_name")],
        ),
        (
            "import torch\ntorch.autograd.Variable._execution_engine.run_backward\n",
            [(2, "_execution_engine")],
        ),
        ("from torch._inductor.codegen.common import f\n", [(1, "_inductor")]),
        ("import torch\ntorch.compiler.list_backends()\n", []),
        (
            "from accelerate.state import PartialState\nPartialState._shared_state\n",
            [(2, "_shared_state")],
        ),
        # public names and anyaccel's own private names are fine
        ("import torch.distributed as dist\ndist.Backend.backend_list\n", []),
        ("import accelerate\n_mine = 1\naccelerate.Accelerator\n", []),
    ],
)
def test_the_scan_finds_private_names_through_aliases(
    source: str, found: list[tuple[int, str]]
) -> None:
    assert private_uses(source) == found
