"""One contract between Python and the kernel: every code is the kernel's, none restated.

The codes are defined once, in ``ops/cpu/csrc/shm_contract.h``; the compiled module exports
them and ``anyaccel.distributed.shm.codes`` reads them. These tests check that the kernel
computes what each exported name says, that Python takes exactly the kernel's tables, and that
no Python source of anyaccel writes a code table of its own.
"""

from __future__ import annotations

import ast
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist

from anyaccel.distributed.shm.codes import codes_of, kernel_codes

SRC = Path(__file__).resolve().parents[3] / "src" / "anyaccel"
SLOT = 64 << 10


@pytest.fixture(scope="module")
def kernel() -> ModuleType:
    from anyaccel.ops.cpu.shm_comm import ShmCommBuilder

    builder = ShmCommBuilder()
    if not builder.is_compatible() or not hasattr(os, "memfd_create"):
        pytest.skip(builder.compatibility().reason or "needs Linux memfd")
    return builder.load()


def test_python_reads_exactly_the_kernels_tables(kernel: ModuleType) -> None:
    codes = kernel_codes()
    assert codes == codes_of(kernel)
    assert {str(dtype).removeprefix("torch.") for dtype in codes.dtypes} == set(kernel.DTYPE_CODES)
    assert set(codes.dtypes.values()) == set(kernel.DTYPE_CODES.values())
    assert {op.name for op in codes.ops} == set(kernel.OP_CODES)
    assert codes.collectives == kernel.COLLECTIVE_CODES


def test_each_code_is_distinct(kernel: ModuleType) -> None:
    for table in (kernel.DTYPE_CODES, kernel.OP_CODES, kernel.COLLECTIVE_CODES):
        assert len(set(table.values())) == len(table), table


def test_the_c_entries_are_the_kernels_collectives(kernel: ModuleType) -> None:
    assert set(kernel.native_entry_addresses()) == set(kernel.COLLECTIVE_CODES)


def _all_reduce_on_two_ranks(
    kernel: ModuleType, inputs: list[torch.Tensor], dtype_code: int, op_code: int
) -> list[torch.Tensor]:
    size = kernel.Communicator.required_bytes(2, SLOT)
    fd = os.memfd_create("anyaccel-test", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        comms = [kernel.Communicator(fd, size, 2, r, SLOT, r == 0) for r in range(2)]
    finally:
        os.close(fd)
    outputs = [t.clone() for t in inputs]
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            out = outputs[rank]
            comms[rank].all_reduce(out.data_ptr(), out.numel(), dtype_code, op_code, 30.0, 1)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return outputs


REFERENCES: dict[str, Any] = {
    "SUM": lambda a, b: a + b,
    "PRODUCT": lambda a, b: a * b,
    "MIN": torch.minimum,
    "MAX": torch.maximum,
    "AVG": lambda a, b: (a.double() + b.double()) / 2,
}


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op_name", sorted(REFERENCES))
def test_each_exported_code_computes_what_its_name_says(
    kernel: ModuleType, dtype_name: str, op_name: str
) -> None:
    # A table that named a code for the wrong dtype or op would reduce wrongly here.
    dtype = getattr(torch, dtype_name)
    a = torch.tensor([1.0, -2.0, 3.0, 0.5]).to(dtype)
    b = torch.tensor([4.0, 2.0, -1.0, 0.25]).to(dtype)
    expected = REFERENCES[op_name](a.float(), b.float()).to(dtype)
    outputs = _all_reduce_on_two_ranks(
        kernel, [a, b], kernel.DTYPE_CODES[dtype_name], kernel.OP_CODES[op_name]
    )
    for out in outputs:
        assert torch.equal(out, expected), (op_name, dtype_name, out, expected)


def test_op_codes_take_reduce_ops_and_their_members() -> None:
    codes = kernel_codes()
    R = dist.ReduceOp
    assert codes.op_code(dist.ReduceOp(R.MAX)) == codes.ops[R.MAX]  # as torch passes options
    assert codes.op_code(R.BAND) is None and codes.op_code(dist._make_nccl_premul_sum(2.0)) is None


def restated_codes(text: str, where: str) -> list[str]:
    """Dict literals in source ``text`` that map a torch dtype or a ReduceOp member to a number."""
    found = []
    for node in ast.walk(ast.parse(text, where)):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            named = ast.unparse(key) if key is not None else ""
            is_code_key = named.startswith("torch.") or "ReduceOp." in named
            if is_code_key and isinstance(value, ast.Constant) and type(value.value) is int:
                found.append(f"{where}:{node.lineno}: {named}")
    return found


def test_no_python_source_restates_a_code() -> None:
    restated = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        for hit in restated_codes(path.read_text(), str(path.relative_to(SRC.parent)))
    ]
    assert restated == [], "read the code from the kernel (anyaccel.distributed.shm.codes)"


def test_the_check_notices_a_restated_code() -> None:
    text = "CODES = {torch.float32: 0, torch.bfloat16: 1}\nOPS = {dist.ReduceOp.SUM: 0}\n"
    assert len(restated_codes(text, "planted.py")) == 3
