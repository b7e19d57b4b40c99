"""Ops on the emulated device: CPU kernels over device memory, results where torch puts them."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated


@on_emulated()
def test_a_factory_and_arithmetic_give_the_cpu_result_on_the_device() -> None:
    result = torch.zeros(3, device="emu:0") + 1
    assert result.device == torch.device("emu:0")
    assert torch.equal(result.cpu(), torch.ones(3))


@on_emulated()
def test_a_view_shares_its_base_memory() -> None:
    base = torch.arange(6.0, device="emu:1")
    view = base.view(2, 3).t()
    view.mul_(10)
    assert view.device == torch.device("emu:1")
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert torch.equal(base.cpu(), torch.arange(6.0) * 10)
    assert view._base is base


@on_emulated()
def test_an_in_place_op_returns_its_input() -> None:
    tensor = torch.ones(4, device="emu:0")
    assert tensor.add_(2) is tensor
    assert torch.equal(tensor.cpu(), torch.full((4,), 3.0))


@on_emulated()
def test_out_resizes_the_device_tensor_as_on_the_cpu() -> None:
    out = torch.empty(0, device="emu:0")
    result = torch.mul(torch.arange(5.0, device="emu:0"), 2, out=out)
    assert result is out
    assert out.shape == (5,) and out.device == torch.device("emu:0")
    assert torch.equal(out.cpu(), torch.arange(5.0) * 2)


@on_emulated()
def test_resize_keeps_the_data_and_grows_the_storage() -> None:
    tensor = torch.arange(4.0, device="emu:0")
    tensor.resize_(2, 4)
    assert tensor.shape == (2, 4)
    assert torch.equal(tensor.cpu().flatten()[:4], torch.arange(4.0))
    assert tensor.untyped_storage().nbytes() == 32


@on_emulated()
def test_a_multi_result_op_gives_device_tensors() -> None:
    values, indices = torch.tensor([[3.0, 1.0], [0.0, 5.0]], device="emu:1").max(dim=1)
    assert values.device == indices.device == torch.device("emu:1")
    assert values.tolist() == [3.0, 5.0] and indices.tolist() == [0, 1]


@on_emulated()
def test_an_mlp_trains_with_losses_bit_equal_to_the_cpu() -> None:
    def losses(device: str) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        ).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(1)
        inputs = torch.randn(64, 16, generator=generator).to(device)
        targets = torch.randint(0, 4, (64,), generator=generator).to(device)
        seen = []
        for _ in range(5):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            seen.append(loss.item())
        assert all(p.device == torch.device(device) for p in model.parameters())
        return seen

    assert losses("emu:0") == losses("cpu")


@on_emulated()
def test_autograd_gives_the_cpu_gradients() -> None:
    cpu = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), requires_grad=True)
    device = cpu.detach().to("emu:0").requires_grad_()
    for leaf in (cpu, device):
        (leaf.sin() @ leaf.t()).sum().backward()
    assert device.grad is not None and device.grad.device == torch.device("emu:0")
    assert torch.equal(device.grad.cpu(), cpu.grad)


@on_emulated()
def test_two_device_indices_in_one_op_raise_torchs_message() -> None:
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cat([torch.ones(2, device="emu:0"), torch.ones(2, device="emu:1")])


@on_emulated()
def test_a_device_tensor_with_a_cpu_tensor_raises_torchs_message() -> None:
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, device="emu:0") * torch.ones(2)


@on_emulated()
def test_a_zero_dim_cpu_tensor_joins_a_device_op_as_on_cuda() -> None:
    result = torch.ones(2, device="emu:1") * torch.tensor(3.0)
    assert result.device == torch.device("emu:1")
    assert result.tolist() == [3.0, 3.0]


@on_emulated()
def test_to_and_copy_move_between_the_host_and_devices() -> None:
    source = torch.arange(4.0)
    on_zero = source.to("emu:0")
    on_one = on_zero.to("emu:1", non_blocking=True)
    back = torch.empty(4)
    back.copy_(on_one, non_blocking=True)
    assert on_one.device == torch.device("emu:1")
    assert on_one.data_ptr() != on_zero.data_ptr()
    assert torch.equal(back, source)
    assert torch.equal(on_zero.emu(1).cpu(), source)  # the generated Tensor.<type>() method


@on_emulated()
def test_the_device_context_and_set_device_pick_where_factories_allocate() -> None:
    with torch.emu.device(1):
        assert torch.empty(1, device="emu").device == torch.device("emu:1")
    assert torch.emu.current_device() == 0
    torch.emu.set_device(1)
    try:
        assert torch.zeros(1, device="emu").device == torch.device("emu:1")
    finally:
        torch.emu.set_device(0)


@on_emulated()
def test_an_index_beyond_the_device_count_is_refused() -> None:
    with pytest.raises(RuntimeError, match="Invalid device index 2 for emu"):
        torch.empty(1, device="emu:2")


@on_emulated()
def test_a_structured_op_runs_the_cpus_own_kernel_without_warnings() -> None:
    import warnings

    a, b = torch.randn(4, 3), torch.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the out= path would warn that it resized a non-empty out
        loss = torch.nn.functional.mse_loss(a.to("emu:0"), b.to("emu:0"))
    assert loss.shape == () and loss.item() == torch.nn.functional.mse_loss(a, b).item()


@on_emulated()
def test_convolution_forward_and_backward_give_the_cpus_results() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(3, 4, 3)
    device = torch.nn.Conv2d(3, 4, 3).to("emu:1")
    device.load_state_dict(cpu.state_dict())
    image = torch.randn(2, 3, 8, 8, requires_grad=True)
    image_on_device = image.detach().to("emu:1").requires_grad_()
    cpu(image).square().sum().backward()
    out = device(image_on_device)
    out.square().sum().backward()
    assert out.device == torch.device("emu:1")
    assert torch.equal(out.cpu(), cpu(image).detach())
    assert image_on_device.grad is not None and cpu.weight.grad is not None
    assert torch.equal(image_on_device.grad.cpu(), image.grad)
    assert device.weight.grad is not None and device.bias.grad is not None
    assert torch.equal(device.weight.grad.cpu(), cpu.weight.grad)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell"])
@on_emulated()
def test_the_fused_rnn_cells_a_gpu_runs_give_the_cpus_results_and_gradients(
    cell: str, bias: bool
) -> None:
    # torch's lstm_cell/gru_cell take the fused kernels for accelerator tensors; the CPU has none
    torch.manual_seed(0)
    cpu = getattr(torch.nn, cell)(6, 5, bias=bias)
    device = getattr(torch.nn, cell)(6, 5, bias=bias).to("emu:1")
    device.load_state_dict(cpu.state_dict())
    x = torch.randn(3, 6, requires_grad=True)
    hx = torch.randn(3, 5, requires_grad=True)
    cx = torch.randn(3, 5, requires_grad=True)
    state = (hx, cx) if cell == "LSTMCell" else hx
    twins = [t.detach().to("emu:1").requires_grad_() for t in (x, hx, cx)]
    state_on_device = (twins[1], twins[2]) if cell == "LSTMCell" else twins[1]
    expected, got = cpu(x, state), device(twins[0], state_on_device)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    # the hidden state alone (the cell state's gradient absent) and both, as training does
    sum(e.sum() * (i + 1) for i, e in enumerate(expected)).backward()
    sum(g.sum() * (i + 1) for i, g in enumerate(got)).backward()
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.device == torch.device("emu:1")
        assert torch.allclose(mine.cpu(), theirs.detach(), rtol=1e-5, atol=1e-6)
    used = twins if cell == "LSTMCell" else twins[:2]
    for mine, theirs in zip(used, (x, hx, cx), strict=False):
        assert mine.grad is not None and theirs.grad is not None
        assert torch.allclose(mine.grad.cpu(), theirs.grad, rtol=1e-5, atol=1e-6)
    for (name, mine), theirs in zip(device.named_parameters(), cpu.parameters(), strict=True):
        assert mine.grad is not None and theirs.grad is not None, name
        assert torch.allclose(mine.grad.cpu(), theirs.grad, rtol=1e-5, atol=1e-6), name
    only_hidden = device(twins[0], state_on_device)
    first = only_hidden[0] if isinstance(only_hidden, tuple) else only_hidden
    (grad,) = torch.autograd.grad(first.sum(), twins[0])
    (expected_grad,) = torch.autograd.grad(
        (cpu(x, state)[0] if cell == "LSTMCell" else cpu(x, state)).sum(), x
    )
    assert torch.allclose(grad.cpu(), expected_grad, rtol=1e-5, atol=1e-6)


@on_emulated()
def test_a_fused_cell_with_mismatched_shapes_names_them() -> None:
    gates = torch.zeros(2, 8, device="emu:0")
    with pytest.raises(RuntimeError, match=r"_thnn_fused_lstm_cell: the state must be"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.zeros(2, 3, device="emu:0"))
    with pytest.raises(RuntimeError, match=r"_thnn_fused_gru_cell: input_gates and hidden"):
        torch.ops.aten._thnn_fused_gru_cell(gates, torch.zeros(2, 6, device="emu:0"), gates)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@on_emulated()
def test_attention_takes_the_cpus_fused_kernel_with_its_results_bit_for_bit(
    dtype_name: str,
) -> None:
    # torch asks a PrivateUse1 device for its attention kernel and takes the math form where the
    # device does not answer: the device answers as the CPU, whose kernels it runs
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.randn(16, 16).to(dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for kwargs in ({"is_causal": True}, {"attn_mask": mask}, {"scale": 0.3}):
        on_device = [t.detach().to("emu:1").requires_grad_() for t in (q, k, v)]
        device_kwargs = {
            key: value.to("emu:1") if isinstance(value, torch.Tensor) else value
            for key, value in kwargs.items()
        }
        expected, got = sdpa(q, k, v, **kwargs), sdpa(*on_device, **device_kwargs)
        assert type(got.grad_fn).__name__ == type(expected.grad_fn).__name__, kwargs
        assert got.device == torch.device("emu:1")
        assert torch.equal(got.cpu(), expected), kwargs
        cpu_grads = torch.autograd.grad(expected.sum(), (q, k, v))
        device_grads = torch.autograd.grad(got.sum(), on_device)
        for mine, theirs in zip(device_grads, cpu_grads, strict=True):
            assert torch.equal(mine.cpu(), theirs), kwargs
    choice = torch.ops.aten._fused_sdp_choice
    assert choice(*(t.to("emu:0") for t in (q, k, v))) == choice(q, k, v)


@on_emulated()
def test_an_op_with_a_composite_kernel_runs_the_cpus_kernel_bit_for_bit() -> None:
    x = torch.randn(8, 33, generator=torch.Generator().manual_seed(3))
    on_device = torch.nn.functional.layer_norm(x.to("emu:0"), (33,))
    assert torch.equal(on_device.cpu(), torch.nn.functional.layer_norm(x, (33,)))


@on_emulated()
def test_moving_a_module_keeps_its_parameters_so_an_earlier_optimizer_steps_them() -> None:
    # as on torch's own devices: `param.data = moved`, not a new Parameter (Fabric's pattern
    # builds the optimizer on the CPU parameters, then moves the module)
    module = torch.nn.Linear(3, 2)
    weight = module.weight
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    start = weight.detach().clone()
    module.to("emu:1")
    assert module.weight is weight and weight.device == torch.device("emu:1")
    module(torch.ones(1, 3, device="emu:1")).sum().backward()
    optimizer.step()
    assert torch.equal(weight.detach().cpu(), start - 1.0)
    module.cpu()
    assert module.weight is weight and weight.device.type == "cpu"
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1), torch.zeros(1, device="emu:0"))
