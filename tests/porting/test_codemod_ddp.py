"""``port_source`` on real DDP and FSDP scripts' constructs: device indexes, process counts."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyaccel.porting.checker import check_source
from anyaccel.porting.codemod import port_source

IMPORT = "from anyaccel import get_accelerator\n"


# --- issue 25: the constructs of real DDP scripts ----------------------------------------------
DDP_IMPORT = "from torch.nn.parallel import DistributedDataParallel as DDP\n"

DEVICE_REWRITES = [
    ("y = x.to(0)", "y = x.to(get_accelerator().device_name(0))"),
    (
        "y = x.to(self.gpu_id, non_blocking=True)",
        "y = x.to(get_accelerator().device_name(self.gpu_id), non_blocking=True)",
    ),
    ("y = x.to(device=args.gpu)", "y = x.to(device=get_accelerator().device_name(args.gpu))"),
    ("d = torch.device(local_rank)", "d = torch.device(get_accelerator().device_name(local_rank))"),
    (
        "t = torch.zeros(2, device=ddp_local_rank)",
        "t = torch.zeros(2, device=get_accelerator().device_name(ddp_local_rank))",
    ),
    (
        "y = x.to(int(os.environ['LOCAL_RANK']))",
        "y = x.to(get_accelerator().device_name(int(os.environ['LOCAL_RANK'])))",
    ),
    ("d = 'cuda:{}'.format(args.gpu)", "d = get_accelerator().device_name(args.gpu)"),
    ("d = 'cuda:%d' % i", "d = get_accelerator().device_name(i)"),
    ("d = 'cuda:%d' % (i,)", "d = get_accelerator().device_name(i)"),
    ("d = 'cuda:' + str(i)", "d = get_accelerator().device_name(i)"),
    (
        "s = torch.load(p, map_location='cuda:{}'.format(args.gpu))",
        "s = torch.load(p, map_location=get_accelerator().device_name(args.gpu))",
    ),
    (  # the key is where a storage was saved: a label, kept
        "s = torch.load(p, map_location={'cuda:%d' % 0: 'cuda:%d' % rank})",
        "s = torch.load(p, map_location={'cuda:%d' % 0: get_accelerator().device_name(rank)})",
    ),
    (
        "s = torch.load(p, map_location=lambda storage, loc: storage.cuda(args.gpu))",
        "s = torch.load(p, map_location=lambda storage, loc: "
        "storage.to(get_accelerator().device_name(args.gpu)))",
    ),
    ("ok = torch.accelerator.is_available()", "ok = get_accelerator().is_available()"),
    ("n = torch.accelerator.device_count()", "n = get_accelerator().device_count()"),
    ("torch.accelerator.set_device_index(rank)", "get_accelerator().set_device(rank)"),
    ("i = torch.accelerator.current_device_index()", "i = get_accelerator().current_device()"),
    ("torch.accelerator.synchronize()", "get_accelerator().synchronize()"),
    (
        "a = torch.accelerator.current_accelerator()",
        "a = torch.device(get_accelerator().device_name())",
    ),
    (
        "b = torch.distributed.get_default_backend_for_device("
        "torch.accelerator.current_accelerator())",
        "b = get_accelerator().communication_backend_name()",
    ),
    (
        "def setup():\n    acc = torch.accelerator.current_accelerator()\n"
        "    return torch.distributed.get_default_backend_for_device(acc)",
        "def setup():\n    acc = torch.device(get_accelerator().device_name())\n"
        "    return get_accelerator().communication_backend_name()",
    ),
]


@pytest.mark.parametrize(("before", "after"), DEVICE_REWRITES)
def test_each_device_rewrite_ports_idempotently_and_leaves_check_clean(
    before: str, after: str
) -> None:
    result = port_source(f"import os, torch\n{before}\n")
    assert result.ported == f"import os, torch\n{IMPORT}\n{after}\n"
    assert result.left == [] and check_source(result.ported) == []
    assert port_source(result.ported).ported == result.ported


HELPER_REWRITES = [
    (
        "m = DDP(m, device_ids=[rank])",
        "m = DDP(m, device_ids=ddp_device_ids(rank))",
        "ddp_device_ids",
    ),
    (
        "m = DDP(m, [args.gpu], args.gpu)",
        "m = DDP(m, ddp_device_ids(args.gpu), ddp_output_device(args.gpu))",
        "ddp_device_ids, ddp_output_device",
    ),
    (
        "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[local_rank], "
        "output_device=local_rank)",
        "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=ddp_device_ids(local_rank), "
        "output_device=ddp_output_device(local_rank))",
        "ddp_device_ids, ddp_output_device",
    ),
    (
        "world_size = torch.cuda.device_count()\nmp.spawn(main, nprocs=world_size)",
        "world_size = local_process_count()\nmp.spawn(main, nprocs=world_size)",
        "local_process_count",
    ),
    (
        "self.ngpus_per_node = torch.cuda.device_count()",
        "self.ngpus_per_node = local_process_count()",
        "local_process_count",
    ),
    (
        "mp.spawn(main, nprocs=torch.cuda.device_count())",
        "mp.spawn(main, nprocs=local_process_count())",
        "local_process_count",
    ),
    (
        "gpu_count = torch.accelerator.device_count()",
        "gpu_count = local_process_count()",
        "local_process_count",
    ),
]


@pytest.mark.parametrize(("before", "after", "helpers"), HELPER_REWRITES)
def test_ddp_and_process_counts_port_to_the_public_helpers(
    before: str, after: str, helpers: str
) -> None:
    source = f"import torch\n{DDP_IMPORT}{before}\n"
    result = port_source(source)
    assert result.ported == (
        f"import torch\n{DDP_IMPORT}from anyaccel.distributed import {helpers}\n{IMPORT}\n{after}\n"
    )
    assert result.left == [] and check_source(result.ported) == []
    assert port_source(result.ported).ported == result.ported
    namespace: dict[str, object] = {}
    exec(f"from anyaccel.distributed import {helpers}", namespace)  # the names exist
    assert all(name in namespace for name in helpers.split(", "))


def test_a_helper_joins_an_existing_import_of_anyaccel_distributed() -> None:
    source = f"import torch\nfrom anyaccel.distributed import init_distributed\n{DDP_IMPORT}"
    ported = port_source(source + "m = DDP(m, device_ids=[rank])\n").ported
    assert "from anyaccel.distributed import init_distributed, ddp_device_ids\n" in ported


def test_a_device_count_imported_from_torch_cuda_loses_its_import() -> None:
    source = "from torch.cuda import device_count\nngpus_per_node = device_count()\n"
    ported = port_source(source).ported
    assert "torch.cuda" not in ported and "ngpus_per_node = local_process_count()" in ported


def test_a_name_only_ever_bound_to_an_int_is_ported_where_it_is_a_device() -> None:
    source = "import torch\ndevice = 0  # shorthand for cuda:0\nmodel.to(device)\n"
    ported = port_source(source).ported
    assert "device = 0  # shorthand for cuda:0\n" in ported  # the index itself stays
    assert "model.to(get_accelerator().device_name(device))" in ported


@pytest.mark.parametrize(
    "source",
    [
        "y = x.to(torch.float16)",
        "y = x.to(other)",
        "y = x.to(device)",
        "y = x.to(get_accelerator().device_name(rank))",
        "d = torch.device('cpu')",
        "s = 'cuda:{}:{}'.format(a, b)",
        "m = DDP(m, device_ids=None)",
        "m = DDP(m)",
        "n_layers = torch.cuda.device_count() and 0 or 1",  # not a bare process count
    ],
)
def test_what_is_not_visibly_a_device_index_is_not_touched(source: str) -> None:
    text = f"import torch\n{DDP_IMPORT}{source}\n"
    result = port_source(text)
    assert "device_name(" not in result.ported.replace(source, "") or "cuda" in source
    assert "ddp_device_ids" not in result.ported and "local_process_count" not in result.ported
    if "cuda" not in source:
        assert result.ported == text


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("m = DDP(m, device_ids=[0, 1])", "ACC044"),  # several devices: a human decides
        ("b = torch.distributed.get_default_backend_for_device(dev)", "ACC051"),
        ("with torch.accelerator.device_index(0): pass", "ACC050"),
        ("n = torch.accelerator.device_count(kind)", "ACC050"),
        ("import lightning as L; t = L.Trainer(accelerator='cuda')", "ACC046"),  # not a device
    ],
)
def test_what_cannot_be_ported_safely_is_left_and_reported(source: str, code: str) -> None:
    result = port_source(f"import torch\n{DDP_IMPORT}{source}\n")
    assert [(f.line, f.code) for f in result.left] == [(3, code)]
    assert [f.code for f in check_source(result.ported)] == [code]


def test_adjacent_backend_flags_get_one_guard() -> None:
    source = (
        "import torch\n"
        "torch.backends.cuda.matmul.allow_tf32 = True # allow tf32 on matmul\n"
        "# and on cudnn\n"
        "torch.backends.cudnn.allow_tf32 = True\n"
        "x = 1\n"
    )
    ported = port_source(source).ported
    assert ported.endswith(
        'if get_accelerator().device_name() == "cuda":\n'
        "    torch.backends.cuda.matmul.allow_tf32 = True # allow tf32 on matmul\n"
        "    # and on cudnn\n"
        "    torch.backends.cudnn.allow_tf32 = True\n"
        "x = 1\n"
    )
    assert port_source(ported).ported == ported and check_source(ported) == []


def test_adjacent_backend_flags_in_a_block_get_one_guard() -> None:
    source = (
        "import torch.backends.cudnn as cudnn\n"
        "if args.deterministic:\n"
        "    cudnn.deterministic = True\n"
        "    cudnn.benchmark = False\n"
    )
    ported = port_source(source).ported
    assert ported.count("if get_accelerator()") == 1
    assert ported.endswith(
        '    if get_accelerator().device_name() == "cuda":\n'
        "        cudnn.deterministic = True\n"
        "        cudnn.benchmark = False\n"
    )
    assert port_source(ported).ported == ported


def test_backend_flags_apart_by_a_blank_line_keep_their_own_guards() -> None:
    source = (
        "import torch\ntorch.backends.cudnn.benchmark = True\n\n"
        "torch.backends.cudnn.enabled = True\n"
    )
    assert port_source(source).ported.count("if get_accelerator()") == 2


def test_get_accelerator_joins_an_existing_anyaccel_import_with_a_normal_comma() -> None:
    ported = port_source("from anyaccel import init_distributed\nx.cuda()\n").ported
    assert ported.startswith("from anyaccel import init_distributed, get_accelerator\n")


DDP_SNIPPETS = (
    [before for before, _ in DEVICE_REWRITES]
    + [before for before, _, _ in HELPER_REWRITES]
    + [
        "torch.backends.cudnn.benchmark = True",
        "torch.backends.cuda.matmul.allow_tf32 = True # tf32",
        "# a comment",
        "",
        "m = DDP(m, device_ids=[0, 1])",
        "device = 0",
        "model.to(device)",
        "y = x.to(dtype)",
    ]
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(DDP_SNIPPETS), min_size=1, max_size=8))
def test_any_mix_of_ddp_constructs_ports_idempotently_and_check_agrees(parts: list[str]) -> None:
    source = "import os, torch\n" + DDP_IMPORT + "\n".join(parts) + "\n"
    result = port_source(source)
    ast.parse(result.ported)
    assert port_source(result.ported).ported == result.ported
    assert len(check_source(result.ported)) == len(result.left)
    runs, in_run = 0, False  # flags with only comment lines between share one guard
    for part in parts:
        if part.startswith("torch.backends."):
            runs += not in_run
            in_run = True
        elif part != "# a comment":
            in_run = False
    assert result.ported.count('if get_accelerator().device_name() == "cuda":') == runs


def test_a_file_with_classic_mac_line_ends_ports_and_keeps_them() -> None:
    source = "import torch\rx = torch.zeros(3).cuda()\rif True:\r    pass\r"
    result = port_source(source, "cr.py")
    assert result.rewrites == 1 and result.original == source
    assert "\n" not in result.ported and result.ported.endswith("    pass\r")
    assert "x = torch.zeros(3).to(get_accelerator().current_device_name())\r" in result.ported
    assert ast.parse(result.ported) is not None
    assert "+x = torch.zeros(3).to(" in result.diff()


FSDP_IMPORT = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("m = FSDP(m, device_id=torch.cuda.current_device())",
         "m = FSDP(m, device_id=get_accelerator().current_device_name())"),
        ("m = FSDP(m, device_id=local_rank)",
         "m = FSDP(m, device_id=get_accelerator().device_name(local_rank))"),
        ("m = FSDP(m, device_id=0)", "m = FSDP(m, device_id=get_accelerator().device_name(0))"),
        ("m = torch.distributed.fsdp.FullyShardedDataParallel(m, device_id=args.gpu)",
         "m = torch.distributed.fsdp.FullyShardedDataParallel(m, "
         "device_id=get_accelerator().device_name(args.gpu))"),
    ],
)  # fmt: skip
def test_fsdp_device_id_ports_to_a_device_name(before: str, after: str) -> None:
    # FSDP reads device_id with torch.device(): an index raises on a host without CUDA
    source = f"import torch\n{FSDP_IMPORT}{before}\n"
    assert {f.code for f in check_source(source)} <= {"ACC003", "ACC043"}  # reported before
    assert check_source(source)
    result = port_source(source)
    assert result.ported == f"import torch\n{FSDP_IMPORT}{IMPORT}\n{after}\n"
    assert result.left == [] and check_source(result.ported) == []
    assert port_source(result.ported).ported == result.ported


@pytest.mark.parametrize(
    "source",
    [
        "m = FSDP(m, device_id=torch.device('cpu'))",  # already a device
        "m = FSDP(m, device_id=device)",  # a name that holds a device, not an index
        "m = other(m, device_id=0)",  # not FSDP: its device_id may be anything
        "ok = device_id == 0",  # a comparison, not a keyword
    ],
)
def test_fsdp_device_ids_that_are_not_indices_are_left(source: str) -> None:
    text = f"import torch\n{FSDP_IMPORT}{source}\n"
    assert port_source(text).ported == text
    assert check_source(text) == []
