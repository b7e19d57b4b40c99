"""The stream sanitizer: a tensor used on two streams with no synchronization between them."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated, run_python


def _side_writes() -> tuple[torch.Stream, torch.Tensor]:
    data = torch.zeros(4, device="emu:0")
    side = torch.emu.Stream(device="emu:0")
    side.wait_stream(torch.emu.current_stream())
    with torch.emu.stream(side):
        data.add_(1)
    return side, data


@on_emulated()
def test_a_side_streams_result_read_without_a_wait_is_refused_naming_both_streams() -> None:
    from anyaccel.emulated.stream_sanitizer import (
        UnsynchronizedStreamAccessError,
        sanitize_streams,
    )

    with sanitize_streams():
        side, data = _side_writes()
        with pytest.raises(UnsynchronizedStreamAccessError) as caught:
            data.mul(2)
    message = str(caught.value)
    assert "aten.mul.Tensor on the default stream of emu:0 reads a tensor that" in message
    assert f"aten.add_.Tensor on stream {side.stream_id} of emu:0 wrote" in message
    assert "wait_stream" in message


@on_emulated()
def test_wait_stream_makes_the_read_safe() -> None:
    from anyaccel.emulated.stream_sanitizer import sanitize_streams

    with sanitize_streams():
        side, data = _side_writes()
        torch.emu.current_stream().wait_stream(side)
        assert data.mul(2).tolist() == [2.0] * 4


@on_emulated()
def test_an_event_recorded_after_the_write_and_waited_makes_the_read_safe() -> None:
    from anyaccel.emulated.stream_sanitizer import sanitize_streams

    with sanitize_streams():
        side, data = _side_writes()
        done = side.record_event()
        torch.emu.current_stream().wait_event(done)
        data.mul(2)


@on_emulated()
def test_a_host_synchronize_makes_later_work_safe() -> None:
    from anyaccel.emulated.stream_sanitizer import sanitize_streams

    with sanitize_streams():
        _, data = _side_writes()
        torch.emu.synchronize()
        data.mul(2)


@on_emulated()
def test_a_write_after_an_unsynchronized_read_on_another_stream_is_refused() -> None:
    from anyaccel.emulated.stream_sanitizer import (
        UnsynchronizedStreamAccessError,
        sanitize_streams,
    )

    with sanitize_streams():
        data = torch.ones(4, device="emu:0")
        side = torch.emu.Stream(device="emu:0")
        side.wait_stream(torch.emu.current_stream())
        with torch.emu.stream(side):
            data.sum()
        with pytest.raises(UnsynchronizedStreamAccessError, match="writes a tensor that"):
            data.zero_()


@on_emulated()
def test_a_training_step_on_one_stream_raises_nothing_and_the_context_turns_it_off() -> None:
    from anyaccel.emulated.stream_sanitizer import is_enabled, sanitize_streams

    model = torch.nn.Linear(8, 2).to("emu:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with sanitize_streams():
        assert is_enabled()
        for _ in range(2):
            loss = model(torch.randn(4, 8, device="emu:0")).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        assert loss.item() >= 0.0
    assert not is_enabled()


def test_the_environment_variable_turns_it_on_at_install() -> None:
    script = (
        "import torch\n"
        "from anyaccel.testing.emulated import install\n"
        "install('emu', 1)\n"
        "from anyaccel.emulated.stream_sanitizer import is_enabled\n"
        "print('enabled', is_enabled())\n"
        "data = torch.zeros(2, device='emu:0')\n"
        "side = torch.emu.Stream(device='emu:0')\n"
        "side.wait_stream(torch.emu.current_stream())\n"
        "with torch.emu.stream(side):\n"
        "    data.add_(1)\n"
        "data.mul(2)\n"
    )
    result = run_python(script, env={"ANYACCEL_EMULATED_SANITIZE_STREAMS": "1"})
    assert "enabled True" in result.stdout, result.stderr[-2000:]
    assert "UnsynchronizedStreamAccessError" in result.stderr
    unset = run_python(script, env={"ANYACCEL_EMULATED_SANITIZE_STREAMS": "0"})
    assert unset.returncode == 0 and "enabled False" in unset.stdout, unset.stderr[-2000:]
    wrong = run_python(script, env={"ANYACCEL_EMULATED_SANITIZE_STREAMS": "maybe"})
    assert "ANYACCEL_EMULATED_SANITIZE_STREAMS='maybe' is not an on/off value" in wrong.stderr


@on_emulated(timeout=300.0)
def test_zero_offloads_side_stream_pipeline_is_clean_and_equals_the_device_reference() -> None:
    # tests/gpu/offload.py: gradients to pinned buffers on a side stream, Adam on the host,
    # weights back with non_blocking copies the next forward waits for (DeepSpeed's pattern).
    import importlib.util
    from pathlib import Path

    from anyaccel import get_accelerator
    from anyaccel.emulated.stream_sanitizer import sanitize_streams

    path = Path(__file__).resolve().parents[2] / "gpu" / "offload.py"
    spec = importlib.util.spec_from_file_location("offload", path)
    assert spec is not None and spec.loader is not None
    offload = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(offload)

    accelerator = get_accelerator()
    for overlap in (False, True):
        torch.manual_seed(3)
        params = [
            torch.nn.Parameter(torch.randn(shape, device="emu:0").bfloat16())
            for shape in [(64, 32), (32,)]
        ]
        reference = [torch.nn.Parameter(p.detach().clone()) for p in params]
        with pytest.MonkeyPatch.context() as patch, sanitize_streams():
            patch.setattr(offload, "CPUAdam", torch.optim.Adam)  # no native build needed
            ours = offload.OffloadedAdam(accelerator, params, 1e-3, overlap)
            on_device = offload.GpuAdam(reference, 1e-3)
            for group, optimizer in ((params, ours), (reference, on_device)):
                generator = torch.Generator(device="emu:0").manual_seed(5)
                for _ in range(3):
                    optimizer.wait_for_parameters()
                    loss = sum(
                        (
                            p.float() * torch.randn(p.shape, device="emu:0", generator=generator)
                        ).sum()
                        for p in group
                    )
                    loss.backward()
                    optimizer.step()
            torch.emu.synchronize()
        for master, expected in zip(ours.master, on_device.master, strict=True):
            assert torch.allclose(master, expected.detach().cpu(), atol=1e-6)
