"""The device against the CPU, driven by torch's OpInfo and ModuleInfo databases.

``opinfo_tests``: each OpInfo's reference inputs run on the device and, moved, on the CPU; the
results must agree (torch's ``TestCommon.test_compare_cpu``, which its own suite runs for CUDA).
``module_tests``: each ModuleInfo's module built on the CPU and copied to the device; forward
outputs, input gradients and parameter gradients must agree. The generic classes carry torch's
class names (``TestCommon``, ``TestModule``), so the skips and expected failures torch's
databases declare for those tests apply here too. Random ops and modules run with the same seed
on both sides: a device whose generator matches the CPU's passes them, another one fails them
with different values (say so, then skip them with ``--skip``).

Importing this module imports torch's test machinery: call ``prepare_device`` first.
"""

from __future__ import annotations

import copy
import difflib
import sys
import unittest
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from anyaccel.errors import AnyaccelError

__all__ = ["DEFAULT_TOLERANCE", "UnknownTestError", "module_tests", "opinfo_tests", "select"]

#: The absolute and relative tolerance of a comparison (torch's test_compare_cpu uses 1e-3).
DEFAULT_TOLERANCE = 1e-3
_SEED = 1234


class UnknownTestError(AnyaccelError, LookupError):
    """A name given to select OpInfos or ModuleInfos is in none of torch's databases."""


def _import_machinery() -> Any:
    """torch.testing._internal's modules, imported with a bare ``sys.argv`` (common_utils parses
    the command line at import, and ours is not its)."""
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        from torch.testing._internal import (
            common_device_type,
            common_methods_invocations,
            common_modules,
            common_utils,
        )
    finally:
        sys.argv = saved
    return common_device_type, common_methods_invocations, common_modules, common_utils


def select(
    entries: Iterable[Any], names: Sequence[str] | None, skip: Sequence[str] = ()
) -> list[Any]:
    """The database entries named in ``names`` (all when ``None``), less those in ``skip``.

    An entry matches by its name, or its name and variant (``"norm.fro"``). Raises
    ``UnknownTestError`` for a name that matches nothing, listing near names.
    """
    entries = list(entries)

    def keys(entry: Any) -> set[str]:
        name = str(getattr(entry, "name", None) or getattr(entry, "formatted_name", ""))
        variant = str(getattr(entry, "variant_test_name", "") or "")
        return {name, f"{name}.{variant}"} if variant else {name}

    every = set().union(*(keys(entry) for entry in entries)) if entries else set()
    for wanted in [*(names or ()), *skip]:
        if wanted not in every:
            near = difflib.get_close_matches(wanted, sorted(every), n=8, cutoff=0.6)
            hint = f"; near: {', '.join(near)}" if near else ""
            raise UnknownTestError(f"{wanted!r} is not in torch's database{hint}")
    chosen = [e for e in entries if names is None or keys(e) & set(names)]
    return [e for e in chosen if not keys(e) & set(skip)]


def _to_cpu(value: Any) -> Any:
    return value.to("cpu") if isinstance(value, torch.Tensor) else value


def _run_seeded(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` after seeding every generator alike (random ops agree)."""
    torch.manual_seed(_SEED)  # seeds the PrivateUse1 device's generators too
    return function(*args, **kwargs)


def _instantiate(generic: type, device_type: str, machinery: Any) -> unittest.TestSuite:
    """``generic`` instantiated by torch for ``device_type`` only, as a suite."""
    common_device_type = machinery[0]
    scope: dict[str, Any] = {generic.__name__: generic}  # torch removes the generic class
    common_device_type.instantiate_device_type_tests(generic, scope, only_for=(device_type,))
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for value in scope.values():
        if isinstance(value, type) and issubclass(value, unittest.TestCase):
            suite.addTests(loader.loadTestsFromTestCase(value))
    return suite


def opinfo_tests(
    device_type: str,
    ops: Sequence[str] | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    skip: Sequence[str] = (),
    tolerance: float = DEFAULT_TOLERANCE,
) -> unittest.TestSuite:
    """One test per OpInfo and dtype: the device's results against the CPU's.

    ``ops`` names OpInfos (every op in ``op_db`` when ``None``); a dtype the op does not
    support is left out by torch's ``@ops``. Raises ``UnknownTestError`` for an unknown name.
    """
    machinery = _import_machinery()
    common_device_type, common_methods_invocations, _, common_utils = machinery
    selected = select(common_methods_invocations.op_db, ops, skip)

    base: Any = common_utils.TestCase

    class TestCommon(base):  # type: ignore[misc]  # torch's name: its databases' skips apply
        @common_device_type.ops(selected, allowed_dtypes=tuple(dtypes))  # type: ignore[untyped-decorator]
        def test_compare_cpu(self, device: str, dtype: torch.dtype, op: Any) -> None:
            for sample in op.reference_inputs(device, dtype):
                on_cpu = sample.transform(_to_cpu)
                actual = _run_seeded(op, sample.input, *sample.args, **sample.kwargs)
                expected = _run_seeded(op, on_cpu.input, *on_cpu.args, **on_cpu.kwargs)
                actual = sample.output_process_fn_grad(actual)
                expected = on_cpu.output_process_fn_grad(expected)
                self.assertEqual(
                    actual, expected, atol=tolerance, rtol=tolerance, exact_device=False
                )

    return _instantiate(TestCommon, device_type, machinery)


def _moved(value: Any, device: str, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """``value`` with every tensor in it copied to ``device`` as a new leaf.

    A tensor given twice stays one tensor (``memo``), so gradients that meet on the CPU meet on
    the device too (KLDivLoss's scalar inputs pass one tensor as input and target).
    """
    memo = {} if memo is None else memo
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = value.detach().to(device).requires_grad_(value.requires_grad)
        return memo[id(value)]
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(item, device, memo) for item in value)
    if isinstance(value, dict):
        return {key: _moved(item, device, memo) for key, item in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def module_tests(
    device_type: str,
    modules: Sequence[str] | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    skip: Sequence[str] = (),
    tolerance: float = DEFAULT_TOLERANCE,
) -> unittest.TestSuite:
    """One test per ModuleInfo, dtype and train/eval mode: forward and backward on the device
    against the CPU. ``modules`` names them as ``nn.Linear`` (all when ``None``)."""
    machinery = _import_machinery()
    _, _, common_modules, common_utils = machinery
    selected = select(common_modules.module_db, modules, skip)

    base: Any = common_utils.TestCase

    class TestModule(base):  # type: ignore[misc]  # torch's name: its databases' skips apply
        @common_modules.modules(selected, allowed_dtypes=tuple(dtypes))  # type: ignore[untyped-decorator]
        def test_cpu_parity(
            self, device: str, dtype: torch.dtype, module_info: Any, training: bool
        ) -> None:
            inputs = module_info.module_inputs_func(
                module_info, device="cpu", dtype=dtype, requires_grad=True, training=training
            )
            for module_input in inputs:
                if module_input.forward_input is None:
                    continue
                made = module_input.constructor_input
                on_cpu = _run_seeded(module_info.module_cls, *made.args, **made.kwargs).to(dtype)
                on_cpu.train(training)
                on_device = copy.deepcopy(on_cpu).to(device)
                forward = module_input.forward_input
                cpu_args, cpu_kwargs = forward.args, forward.kwargs
                dev_args, dev_kwargs = _moved((cpu_args, cpu_kwargs), device)
                expected = _run_seeded(on_cpu, *cpu_args, **cpu_kwargs)
                actual = _run_seeded(on_device, *dev_args, **dev_kwargs)
                self.assertEqual(
                    actual, expected, atol=tolerance, rtol=tolerance, exact_device=False
                )
                outputs = [t for t in _tensors(expected) if t.requires_grad]
                if not outputs:
                    continue
                grads = [torch.randn_like(t) for t in outputs]
                cpu_leaves = [t for t in _tensors((cpu_args, cpu_kwargs)) if t.requires_grad]
                dev_leaves = [t for t in _tensors((dev_args, dev_kwargs)) if t.requires_grad]
                cpu_leaves += [p for p in on_cpu.parameters() if p.requires_grad]
                dev_leaves += [p for p in on_device.parameters() if p.requires_grad]
                dev_outputs = [t for t in _tensors(actual) if t.requires_grad]
                expected_grads = torch.autograd.grad(outputs, cpu_leaves, grads, allow_unused=True)
                actual_grads = torch.autograd.grad(
                    dev_outputs,
                    dev_leaves,
                    [g.to(device) for g in grads],
                    allow_unused=True,
                )
                self.assertEqual(
                    actual_grads, expected_grads, atol=tolerance, rtol=tolerance, exact_device=False
                )

    return _instantiate(TestModule, device_type, machinery)
