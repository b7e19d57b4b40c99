"""Sparse tensors (COO and the compressed layouts) on the emulated device: made, moved, computed
with the CPU's sparse kernels, and the CPU's results; mixed devices still refused."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated

DEVICE = "npu:1"


def _coo() -> torch.Tensor:
    """A 2x3 uncoalesced COO tensor on the CPU (two entries at (0, 2))."""
    indices = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])
    return torch.sparse_coo_tensor(indices, torch.tensor([3.0, 4.0, 5.0, 6.0]), (2, 3))


def _same(device_result: torch.Tensor, cpu_result: torch.Tensor) -> bool:
    """Equal values and layout, ``device_result`` on DEVICE."""
    assert device_result.device == torch.device(DEVICE)
    assert device_result.layout == cpu_result.layout
    moved = device_result.cpu()
    if moved.layout != torch.strided:
        moved, cpu_result = moved.to_dense(), cpu_result.to_dense()
    return torch.equal(moved, cpu_result)


@on_emulated(device_type="npu")
def test_a_cpu_coo_tensor_moves_to_the_device_and_back() -> None:
    sparse = _coo()
    on_device = sparse.to(DEVICE)
    assert on_device.is_sparse and on_device.device == torch.device(DEVICE)
    assert on_device._indices().device == on_device._values().device == torch.device(DEVICE)
    assert on_device._nnz() == 4 and not on_device.is_coalesced()
    back = on_device.cpu()
    assert back.is_sparse and torch.equal(back._indices(), sparse._indices())
    assert torch.equal(back._values(), sparse._values())


@on_emulated(device_type="npu")
def test_sparse_factories_make_device_tensors() -> None:
    indices, values = torch.tensor([[0, 1], [2, 0]]), torch.tensor([1.0, 2.0])
    made = torch.sparse_coo_tensor(indices, values, (2, 3), device=DEVICE)
    from_parts = torch.sparse_coo_tensor(indices.to(DEVICE), values.to(DEVICE), (2, 3))
    expected = torch.sparse_coo_tensor(indices, values, (2, 3))
    assert _same(made, expected) and _same(from_parts, expected)
    assert torch.zeros(2, 3, layout=torch.sparse_coo, device=DEVICE)._nnz() == 0
    csr = torch.sparse_csr_tensor(
        torch.tensor([0, 1, 2]), torch.tensor([2, 0]), values, (2, 3), device=DEVICE
    )
    assert _same(csr, expected.to_sparse_csr())


@on_emulated(device_type="npu")
def test_dense_device_tensors_convert_to_each_sparse_layout() -> None:
    dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 4.0, 0.0]])
    on_device = dense.to(DEVICE)
    assert _same(on_device.to_sparse(), dense.to_sparse())
    assert _same(on_device.to_sparse_csr(), dense.to_sparse_csr())
    assert _same(on_device.to_sparse_csc(), dense.to_sparse_csc())
    assert _same(on_device.to_sparse_bsr((2, 1)), dense.to_sparse_bsr((2, 1)))
    assert _same(on_device.to_sparse().to_dense(), dense)


@on_emulated(device_type="npu")
def test_coo_ops_give_the_cpu_results() -> None:
    sparse = _coo()
    dense = torch.randn(3, 4)
    vector = torch.randn(3)
    s, d, v = sparse.to(DEVICE), dense.to(DEVICE), vector.to(DEVICE)
    coalesced = s.coalesce()
    assert coalesced.is_coalesced() and _same(coalesced, sparse.coalesce())
    assert torch.equal(coalesced.indices().cpu(), sparse.coalesce().indices())
    assert _same(s + s, sparse + sparse)
    assert _same(s * s, sparse * sparse)
    assert _same(s * 2.5, sparse * 2.5)
    assert _same(torch.sparse.mm(s, d), torch.sparse.mm(sparse, dense))
    assert _same(s @ d, sparse @ dense)
    ones = torch.ones(2, 4)
    assert _same(torch.addmm(ones.to(DEVICE), s, d), torch.addmm(ones, sparse, dense))
    assert _same(torch.mv(s, v), torch.mv(sparse, vector))
    assert _same(torch.sparse.sum(s), torch.sparse.sum(sparse))
    assert _same(torch.sparse.sum(s, 1), torch.sparse.sum(sparse, 1))
    assert _same(s.t(), sparse.t())
    assert _same(s.transpose(0, 1), sparse.transpose(0, 1))
    assert _same(torch.ones(2, 3, device=DEVICE) + s, torch.ones(2, 3) + sparse)


@on_emulated(device_type="npu")
def test_in_place_ops_change_the_device_sparse_tensor() -> None:
    sparse = _coo()
    target = sparse.to(DEVICE)
    assert target.add_(sparse.to(DEVICE)) is target
    assert _same(target, sparse + sparse)
    target.mul_(3)
    assert _same(target, (sparse + sparse) * 3)
    empty = torch.sparse_coo_tensor(size=(2, 3), device=DEVICE)
    empty.copy_(sparse)  # host to device, as copy_ may
    assert _same(empty, sparse)
    assert target.zero_()._nnz() == 0


@on_emulated(device_type="npu")
def test_csr_ops_give_the_cpu_results() -> None:
    csr = _coo().to_sparse_csr()
    dense, vector = torch.randn(3, 4), torch.randn(3)
    c = csr.to(DEVICE)
    assert c.layout == torch.sparse_csr and c.crow_indices().device == torch.device(DEVICE)
    assert _same(c, csr)
    assert _same(c @ dense.to(DEVICE), csr @ dense)
    assert _same(c @ vector.to(DEVICE), csr @ vector)
    assert _same(c + c, csr + csr)
    assert _same(c.t(), csr.t())
    assert _same(c.to_dense(), csr.to_dense())


@on_emulated(device_type="npu")
def test_gradients_flow_through_sparse_mm_as_on_the_cpu() -> None:
    sparse, dense = _coo().coalesce(), torch.randn(3, 4)
    a, b = sparse.clone().requires_grad_(True), dense.clone().requires_grad_(True)
    torch.sparse.mm(a, b).pow(2).sum().backward()
    ad, bd = sparse.to(DEVICE).requires_grad_(True), dense.to(DEVICE).requires_grad_(True)
    torch.sparse.mm(ad, bd).pow(2).sum().backward()
    assert ad.grad is not None and bd.grad is not None and a.grad is not None
    assert ad.grad.is_sparse and _same(ad.grad, a.grad)
    assert _same(bd.grad, b.grad)  # type: ignore[arg-type]


@on_emulated(device_type="npu")
def test_a_cpu_sparse_tensor_with_a_device_tensor_fails_as_on_a_gpu() -> None:
    sparse, dense = _coo(), torch.randn(3, 4)
    for call in (
        lambda: torch.sparse.mm(sparse, dense.to(DEVICE)),
        lambda: torch.mm(dense.t().to(DEVICE), sparse),
        lambda: sparse.to(DEVICE) + sparse,
        lambda: sparse.to("npu:0") + sparse.to("npu:1"),
    ):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            call()


@on_emulated(device_type="npu")
def test_sparse_memory_is_device_memory() -> None:
    before = torch.npu.memory_allocated(1)
    sparse = _coo().to(DEVICE)
    assert torch.npu.memory_allocated(1) - before == 4 * 2 * 8 + 4 * 4  # indices + values
    del sparse
    assert torch.npu.memory_allocated(1) == before


@on_emulated(device_type="npu")
def test_an_op_the_cpu_has_no_sparse_kernel_for_fails_as_on_a_gpu() -> None:
    with pytest.raises(NotImplementedError, match="'SparseCPU' backend"):
        torch.cumsum(_coo(), 0)
    with pytest.raises(NotImplementedError) as raised:
        torch.cumsum(_coo().to(DEVICE), 0)
    assert "Could not run 'aten::cumsum'" in str(raised.value)
    assert "the CPU has none for this op" in str(raised.value)
