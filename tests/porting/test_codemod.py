"""``port_source``: each rewrite, the import it adds, and what it refuses to guess."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyaccel.porting.checker import check_source
from anyaccel.porting.codemod import PortError, port_source

IMPORT = "from anyaccel import get_accelerator\n"

REWRITES = [
    ("torch.cuda.synchronize()", "get_accelerator().synchronize()"),
    ("n = torch.cuda.device_count()", "n = get_accelerator().device_count()"),
    ("s = torch.cuda.Stream()", "s = get_accelerator().Stream()"),
    ("with torch.cuda.stream(s): pass", "with get_accelerator().stream(s): pass"),
    ("torch.cuda.nvtx.range_push('step')", "get_accelerator().range_push('step')"),
    ("i = torch.cuda.current_device()", "i = get_accelerator().current_device()"),
    (
        "d = torch.device(torch.cuda.current_device())",
        "d = torch.device(get_accelerator().current_device_name())",
    ),
    (
        "y = x.to(torch.cuda.current_device())",
        "y = x.to(get_accelerator().current_device_name())",
    ),
    (
        "t = torch.zeros(1, device=torch.cuda.current_device())",
        "t = torch.zeros(1, device=get_accelerator().current_device_name())",
    ),
    (
        "g = torch.cuda.default_generators[i]",
        "g = get_accelerator().default_generator(i)",
    ),
    ("y = x.cuda()", "y = x.to(get_accelerator().current_device_name())"),
    (
        "y = x.cuda(non_blocking=True)",
        "y = x.to(get_accelerator().current_device_name(), non_blocking=True)",
    ),
    ("y = x.cuda(local_rank)", "y = x.to(get_accelerator().device_name(local_rank))"),
    ("y = x.cuda(1)", "y = x.to(get_accelerator().device_name(1))"),
    ("b = x.is_cuda", "b = get_accelerator().on_accelerator(x)"),
    ("p = x.pin_memory()", "p = get_accelerator().pin_memory(x)"),
    (
        "d = torch.utils.data.DataLoader(ds, pin_memory=True)",
        "d = torch.utils.data.DataLoader(ds, pin_memory=get_accelerator().pin_memory_applies())",
    ),
    ("d = torch.device('cuda')", "d = torch.device(get_accelerator().device_name())"),
    ("d = torch.device('cuda', 2)", "d = torch.device(get_accelerator().device_name(), 2)"),
    ("y = x.to('cuda:1')", "y = x.to(get_accelerator().device_name(1))"),
    ("d = f'cuda:{rank}'", "d = get_accelerator().device_name(rank)"),
    (
        "with torch.cuda.amp.autocast(): pass",
        "with torch.autocast(device_type=get_accelerator().device_name(), "
        "dtype=autocast_dtype(torch.float16)): pass",
    ),
    (
        "with torch.cuda.amp.autocast(True, torch.bfloat16): pass",
        "with torch.autocast(device_type=get_accelerator().device_name(), enabled=True, "
        "dtype=autocast_dtype(torch.bfloat16)): pass",
    ),
    (
        "with torch.autocast('cuda'): pass",
        "with torch.autocast(get_accelerator().device_name(), "
        "dtype=autocast_dtype(torch.float16)): pass",
    ),
    (
        "with torch.amp.autocast(device_type='cuda', dtype=torch.float16, enabled=amp): pass",
        "with torch.amp.autocast(device_type=get_accelerator().device_name(), "
        "dtype=autocast_dtype(torch.float16), enabled=amp): pass",
    ),
    (
        "s = torch.amp.GradScaler('cuda', enabled=args.amp)",
        "s = torch.amp.GradScaler(get_accelerator().device_name(), "
        "enabled=grad_scaler_applies() and args.amp)",
    ),
    (
        "s = torch.cuda.amp.GradScaler(2.0**16, 2.0, 0.5, 2000, amp or debug)",
        "s = torch.amp.GradScaler(get_accelerator().device_name(), init_scale=2.0**16, "
        "growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, "
        "enabled=grad_scaler_applies() and (amp or debug))",
    ),
    (
        "s = torch.cuda.amp.GradScaler(init_scale=2.0**10)",
        "s = torch.amp.GradScaler(get_accelerator().device_name(), init_scale=2.0**10, "
        "enabled=grad_scaler_applies())",
    ),
    (
        "dist.init_process_group(backend='nccl')",
        "dist.init_process_group(backend=get_accelerator().communication_backend_name())",
    ),
    (
        "torch.backends.cudnn.benchmark = True",
        'if get_accelerator().device_name() == "cuda":\n    torch.backends.cudnn.benchmark = True',
    ),
    (
        "torch.cuda.reset_accumulated_memory_stats()",
        'if get_accelerator().device_name() == "cuda":\n'
        "    torch.cuda.reset_accumulated_memory_stats()",
    ),
]


@pytest.mark.parametrize(("before", "after"), REWRITES)
def test_each_rewrite(before: str, after: str) -> None:
    result = port_source(f"import torch\n{before}\n")
    helpers = [n for n in ("autocast_dtype", "grad_scaler_applies") if f"{n}(" in after]
    imports = f"from anyaccel import {', '.join(sorted(['get_accelerator', *helpers]))}\n"
    assert result.ported == f"import torch\n{imports}\n{after}\n"
    assert result.left == [] and result.rewrites >= 1
    assert port_source(result.ported).ported == result.ported  # idempotent


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("y = x.cuda(device)", "ACC030"),  # a torch.device or a string? not visible
        ("m = torch.cuda.memory_allocated(device=d)", "ACC001"),  # device= may be a device
        ("p = torch.cuda.get_device_properties(0)", "ACC002"),  # binds a name: not guarded
        ("os.environ['CUDA_VISIBLE_DEVICES'] = '0'", "ACC042"),
        ("def f(s: torch.cuda.Stream): pass", "ACC001"),  # an annotation
        ("g = torch.cuda.default_generators", "ACC004"),  # the list itself
        ("f = torch.cuda.amp.custom_fwd", "ACC012"),
    ],
)
def test_unsafe_rewrites_are_left_and_reported_with_the_line(source: str, code: str) -> None:
    result = port_source(f"import os, torch\n\n{source}\n")
    assert [(f.line, f.code) for f in result.left] == [(3, code)]


def test_import_goes_after_docstring_and_future_imports_once() -> None:
    source = (
        '"""Doc."""\nfrom __future__ import annotations\n\nimport torch\n\n'
        "torch.cuda.synchronize()\ntorch.cuda.synchronize()\n"
    )
    ported = port_source(source).ported
    assert ported.count(IMPORT) == 1
    assert ported.index('"""Doc."""') < ported.index("__future__") < ported.index(IMPORT)
    assert ast.parse(ported)


def test_existing_get_accelerator_import_is_reused() -> None:
    source = "from deepspeed.accelerator import get_accelerator\nimport torch\nx.cuda()\n"
    ported = port_source(source).ported
    assert "from anyaccel" not in ported and ".to(get_accelerator()" in ported


def test_replaced_cuda_imports_are_removed_and_torch_added() -> None:
    source = (
        "from torch.cuda.amp import GradScaler, autocast\n"
        "with autocast():\n    pass\ns = GradScaler()\n"
    )
    ported = port_source(source).ported
    assert "torch.cuda" not in ported and "import torch\n" in ported
    assert (
        "torch.autocast(device_type=get_accelerator().device_name(), "
        "dtype=autocast_dtype(torch.float16))" in ported
    )
    assert "from anyaccel import autocast_dtype, get_accelerator, grad_scaler_applies" in ported


def test_comments_and_formatting_survive() -> None:
    source = "import torch\n\n\nx = (  # keep me\n    y.cuda()   # and me\n)\n"
    ported = port_source(source).ported
    assert "# keep me" in ported and "   # and me" in ported


def test_guarded_code_and_labels_are_left_alone() -> None:
    source = (
        "import torch\nfrom anyaccel import get_accelerator\n"
        "if get_accelerator().device_name() == 'cuda':\n    torch.cuda.synchronize()\n"
        "states = {'cuda': 1}\nv = states['cuda']\n'''A docstring about 'cuda'.'''\n"
    )
    result = port_source(source)
    assert not result.changed and result.left == []


def test_files_without_cuda_are_returned_as_they_are() -> None:
    source = "import torch\nx = torch.zeros(3)\n"
    result = port_source(source)
    assert result.ported is source and result.diff() == ""


def test_unparsable_source_is_refused() -> None:
    with pytest.raises(PortError, match=r"bad\.py:1:7: cannot parse"):
        port_source("def f(:\n    torch.cuda.synchronize()\n", "bad.py")


def test_left_lines_refer_to_the_original_file() -> None:
    source = "import os\nimport torch\n\nx.cuda()\n\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
    result = port_source(source)
    assert [(f.line, f.code) for f in result.left] == [(6, "ACC042")]


SNIPPETS = [before for before, _ in REWRITES] + [
    "y = x.cuda(device)",
    "if torch.cuda.is_available():\n    torch.cuda.empty_cache()",
    "def f(d='cuda:0'):\n    return torch.cuda.current_device()",
    "x = [t.cuda() for t in ts if t.is_cuda]",
    "with torch.cuda.amp.autocast(enabled=False), torch.cuda.stream(s):\n    pass",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=6))
def test_any_mix_ports_to_parsable_idempotent_code_that_check_agrees_with(
    parts: list[str],
) -> None:
    source = "import torch\n" + "\n".join(parts) + "\n"
    result = port_source(source)
    ast.parse(result.ported)
    assert port_source(result.ported).ported == result.ported
    assert len(check_source(result.ported)) == len(result.left)


def _apply(original: str, diff: str) -> str:
    """``diff`` (unified, as ``PortResult.diff`` writes it) applied to ``original``."""
    from anyaccel.porting.codemod import _lines

    source, out, at = _lines(original), [], 0
    for line in _lines(diff)[2:]:
        if line.startswith("@@"):
            start = int(line.split()[1][1:].split(",")[0])
            length = line.split()[1].split(",")
            begin = start if len(length) > 1 and length[1] == "0" else start - 1
            out.extend(source[at:begin])
            at = begin
        elif line.startswith((" ", "-")):
            at += 1
            if line[0] == " ":
                out.append(line[1:])
        else:
            out.append(line[1:])
    return "".join(out + source[at:])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([*SNIPPETS, "A = 1", "# note", "B = 2; C = 3"]), max_size=12),
    st.sampled_from(["\n", "\r\n"]),
)
def test_the_diff_rebuilds_the_port_and_endings_are_kept(parts: list[str], newline: str) -> None:
    """The per-statement port: its diff applies back, CRLF stays CRLF, nothing else moves."""
    source = ("import torch\n" + "\n".join(parts) + "\n").replace("\n", newline)
    result = port_source(source)
    assert _apply(source, result.diff()) == result.ported
    if newline == "\r\n":
        assert result.ported.count("\n") == result.ported.count("\r\n")


def test_statements_sharing_a_line_and_a_header_comment_are_kept() -> None:
    source = "#!/usr/bin/env python\n# licence\nA = 1; x.cuda()\n"
    ported = port_source(source).ported
    assert ported.startswith("#!/usr/bin/env python\n# licence\n" + IMPORT)
    assert ported.endswith("A = 1; x.to(get_accelerator().current_device_name())\n")


def test_left_lines_refer_to_the_original_far_down_a_file() -> None:
    filler = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(50))
    source = f"import torch\n{filler}x.cuda()\n{filler}y = x.cuda(dev)\n"
    result = port_source(source)
    assert [(f.line, f.code) for f in result.left] == [(source.count("\n"), "ACC030")]


def test_an_expression_too_deep_for_libcst_is_refused_quickly() -> None:
    from anyaccel.porting.codemod import MAX_NESTING

    deep = "x = " + " + ".join(["torch.cuda.current_device()"] * (MAX_NESTING + 10)) + "\n"
    with pytest.raises(PortError, match=r"deep\.py:1: an expression nested more than"):
        port_source(deep, "deep.py")


def test_after_a_lone_docstring_the_import_is_followed_by_a_blank_line() -> None:
    ported = port_source('"""Doc."""\nx.cuda()\n').ported
    assert ported.startswith(f'"""Doc."""\n{IMPORT}\nx.to(')


def test_imports_inside_functions_are_not_rewritten_in_place() -> None:
    """``from torch.cuda import synchronize`` in a function crashed libcst (found in torch)."""
    source = "import torch\n\ndef f():\n    from torch.cuda import synchronize\n    synchronize()\n"
    result = port_source(source)
    assert (
        result.ported == f"import torch\n{IMPORT}\ndef f():\n    get_accelerator().synchronize()\n"
    )


def test_an_is_cuda_method_call_is_left_for_the_user() -> None:
    """``meta.is_cuda()`` is some object's method (torch's inductor has one), not the property."""
    result = port_source("import torch\nif meta.is_cuda():\n    pass\n")
    assert not result.changed and [f.code for f in result.left] == ["ACC031"]


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
