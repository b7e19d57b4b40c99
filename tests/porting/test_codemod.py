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
