"""torch.compile with inductor on the emulated device: the CPU's compiled results, its refusals.

Compiling is slow (a C++ build per graph), so the tests are few and small, and share one
inductor cache directory per worker process (the CPU's and the device's kernels are the same
C++, built once).
"""

from __future__ import annotations

import atexit
import copy
import os
import shutil
import tempfile
import textwrap

import pytest
import torch

from anyaccel.emulated.inductor import inductor_unsupported_reason
from anyaccel.emulated.state import torch_problem

from .worker import on_emulated, run_python

REASON = inductor_unsupported_reason()
PROBLEM = torch_problem()
needs_device = pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM))
needs_inductor = pytest.mark.skipif(
    PROBLEM is not None or REASON is not None, reason=f"{PROBLEM or ''} {REASON or ''}".strip()
)
#: A C++ build per graph, on a loaded host 30-90 s each.
COMPILE_TIMEOUT = 900.0


def _share_one_cache() -> None:
    """Point inductor at one cache directory for this worker (removed when it exits)."""
    if "ANYACCEL_TEST_INDUCTOR_CACHE" not in os.environ:
        path = tempfile.mkdtemp(prefix="anyaccel-inductor-")
        atexit.register(shutil.rmtree, path, True)
        os.environ["ANYACCEL_TEST_INDUCTOR_CACHE"] = path
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path


def _train(device: str, steps: int = 3) -> list[torch.Tensor]:
    """A small model compiled with inductor, trained ``steps`` steps on ``device``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )
    model.to(device)
    compiled = torch.compile(model, backend="inductor")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=generator).to(device)
        target = torch.randn(8, 4, generator=generator).to(device)
        loss = torch.nn.functional.mse_loss(compiled(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.device.type == torch.device(device).type
    return [p.detach().cpu() for p in model.parameters()]


@needs_inductor
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_a_compiled_model_trains_on_the_device_with_the_cpus_compiled_results() -> None:
    _share_one_cache()
    on_device = _train("npu:0")
    on_cpu = _train("cpu")
    for device_param, cpu_param in zip(on_device, on_cpu, strict=True):
        # inductor picks a few algorithms by device type (the variance's, for one): rounding
        assert torch.allclose(device_param, cpu_param, rtol=1e-5, atol=1e-6)


@needs_inductor
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_max_autotune_without_cudagraphs_and_fullgraph_compile_as_on_the_cpu() -> None:
    _share_one_cache()

    def step(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b) + a.sum()

    torch.manual_seed(0)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    results = {}
    for device in ("npu:1", "cpu"):
        compiled = torch.compile(step, mode="max-autotune-no-cudagraphs", fullgraph=True)
        results[device] = compiled(a.to(device), b.to(device))
    assert results["npu:1"].device == torch.device("npu:1")
    assert torch.allclose(results["npu:1"].cpu(), results["cpu"])


@needs_inductor
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_a_mask_reduction_and_a_transformer_layer_compile_with_the_cpus_results() -> None:
    # inductor took any device but the CPU for a Triton one in its C++ type propagation: a
    # vectorised mask reduction had no source dtype (InductorError: KeyError: None)
    _share_one_cache()

    def not_all_masked(x: torch.Tensor) -> torch.Tensor:
        return (x == -float("inf")).logical_not().any(-1)

    x = torch.randn(4, 8)
    x[1] = -float("inf")
    masked = torch.compile(not_all_masked, dynamic=True)(x.to("npu:0"))
    assert masked.device == torch.device("npu:0")
    assert torch.equal(masked.cpu(), not_all_masked(x))

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    twin = copy.deepcopy(layer).to("npu:0")
    causal = torch.nn.Transformer.generate_square_subsequent_mask(8)

    def step(model: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model(x, src_mask=mask, is_causal=True)
        out.sum().backward()
        return out

    x = torch.randn(2, 8, 32)
    on_cpu = torch.compile(step)(layer, x, causal)
    on_device = torch.compile(step)(twin, x.to("npu:0"), causal.to("npu:0"))
    assert on_device.device == torch.device("npu:0")
    # inductor picks a few algorithms by device type (the variance's, for one): rounding
    assert torch.allclose(on_device.cpu(), on_cpu, rtol=1e-5, atol=1e-5)
    for ours, cpus in zip(twin.parameters(), layer.parameters(), strict=True):
        assert ours.grad is not None and cpus.grad is not None
        assert torch.allclose(ours.grad.cpu(), cpus.grad, rtol=1e-4, atol=1e-4)


@needs_inductor
def test_other_devices_keep_inductors_backend_answer() -> None:
    from torch._inductor import utils

    from anyaccel.emulated.inductor import _name_the_cpp_backend_for

    before = {kind: utils.get_current_backend(kind) for kind in ("cpu", "cuda", "xpu")}
    _name_the_cpp_backend_for("zzq")
    assert utils.get_current_backend("zzq") == "cpp"
    assert {kind: utils.get_current_backend(kind) for kind in before} == before


@needs_inductor
@pytest.mark.skipif(not hasattr(torch, "cond"), reason="this torch has no torch.cond")
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_a_control_flow_subgraph_compiles_on_the_device() -> None:
    _share_one_cache()

    def branchy(pred: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(pred, lambda x: x.sin() * 2, lambda x: x.cos() + 1, (x,))

    x = torch.randn(8, device="npu:1")
    compiled = torch.compile(branchy, fullgraph=True)
    for flag in (True, False):
        pred = torch.tensor(flag, device="npu:1")
        result = compiled(pred, x)
        assert result.device == torch.device("npu:1")
        assert torch.allclose(result.cpu(), branchy(pred, x).cpu())


@needs_inductor
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_fullgraph_refuses_a_graph_break_as_on_the_cpu() -> None:
    def broken(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x + 1

    errors = {}
    for device in ("npu:0", "cpu"):
        with pytest.raises(Exception) as raised:
            torch.compile(broken, fullgraph=True)(torch.ones(4, device=device))
        errors[device] = type(raised.value)
    assert errors["npu:0"] is errors["cpu"]


@needs_inductor
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_a_tensor_left_on_the_cpu_fails_inside_compiled_code() -> None:
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y

    with pytest.raises(Exception, match="same device") as raised:
        torch.compile(add)(torch.ones(4, device="npu:0"), torch.ones(4))
    assert "npu:0" in str(raised.value) and "cpu" in str(raised.value)


@needs_inductor
@on_emulated(device_type="npu", timeout=COMPILE_TIMEOUT)
def test_the_cpp_wrapper_is_refused_naming_the_python_one() -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + 1

    with pytest.raises(Exception, match=r"cpp_wrapper=True\) is not supported.*'npu'"):
        torch.compile(step, options={"cpp_wrapper": True})(torch.ones(4, device="npu:0"))


@needs_inductor
@on_emulated(device_type="npu")
def test_dynamo_drives_the_device_through_its_interface() -> None:
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device("npu")
    assert interface.is_available() and interface.device_count() == 2
    previous = interface.exchange_device(1)
    assert interface.current_device() == 1 == torch.npu.current_device()
    assert interface.maybe_exchange_device(previous) == 1
    assert interface.current_device() == previous
    interface.synchronize()
    stream = interface.current_stream()
    assert isinstance(stream, interface.Stream) and stream.device.type == "npu"
    assert isinstance(interface.Event(), torch.Event)
    assert isinstance(interface.get_compute_capability(), str)
    assert interface.get_device_properties(0).total_memory > 0
    with interface.device(1):
        assert interface.current_device() == 1


@needs_inductor
@on_emulated(device_type="npu")
def test_the_accelerator_names_inductor_where_it_compiles() -> None:
    from anyaccel.testing.emulated import EmulatedAccelerator

    assert EmulatedAccelerator().get_compile_backend() == "inductor"


@needs_device
def test_a_torch_without_the_hooks_refuses_inductor_naming_aot_eager() -> None:
    script = textwrap.dedent(
        """
        import torch
        from anyaccel.emulated import inductor
        inductor.inductor_unsupported_reason = lambda *strict: "no hook (test)"
        from anyaccel.testing.emulated import EmulatedAccelerator, install
        install(device_type="npu", device_count=1)
        assert EmulatedAccelerator().get_compile_backend() == "aot_eager"
        try:
            torch.compile(lambda x: x.cos() + 1)(torch.ones(4, device="npu:0"))
        except Exception as exc:
            print("REFUSED", exc)
        else:
            print("COMPILED")
        """
    )
    result = run_python(script, timeout=COMPILE_TIMEOUT)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "REFUSED" in result.stdout, result.stdout
    assert "'npu'" in result.stdout and "no hook (test)" in result.stdout
    assert "backend='aot_eager'" in result.stdout


@needs_inductor
@on_emulated(device_type="npu", strict_memory=True)
def test_strict_memory_refuses_inductor_naming_aot_eager_which_still_compiles() -> None:
    # inductor's kernels read device memory through host pointers: under strict memory they
    # would die of SIGSEGV, so the device refuses inductor up front
    from anyaccel.testing.emulated import EmulatedAccelerator

    assert EmulatedAccelerator().get_compile_backend() == "aot_eager"
    x = torch.ones(4, device="npu:0")
    with pytest.raises(Exception, match="strict memory is on") as refused:
        torch.compile(lambda t: t.cos() + 1)(x)
    assert "backend='aot_eager'" in str(refused.value)
    compiled = torch.compile(lambda t: t.cos() + 1, backend="aot_eager")(x)
    assert torch.equal(compiled.cpu(), torch.ones(4).cos() + 1)


def test_the_reason_names_the_missing_hook_or_is_none() -> None:
    from torch._inductor.codegen import wrapper

    codegen = getattr(wrapper, "PythonWrapperCodegen", None)
    has_hook = hasattr(codegen, "_generate_kernel_call_helper")
    assert (REASON is None) == has_hook
    if REASON is not None:
        assert torch.__version__ in REASON
