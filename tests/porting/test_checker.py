"""The checker's rules, one construct per case, and what it must leave alone."""

from __future__ import annotations

import ast
import inspect

import pytest

from anyaccel.porting.checker import check_source, could_match, parse_ignores
from anyaccel.porting.rules import RULES, contract_names, portable_cuda_names, rule

FLAGGED = [
    ("torch.cuda.synchronize()", "ACC001"),
    ("torch.cuda.is_available()", "ACC001"),
    ("s = torch.cuda.Stream()", "ACC001"),
    ("e = torch.cuda.Event(enable_timing=True)", "ACC001"),
    ("torch.cuda.nvtx.range_push('x')", "ACC001"),
    ("p = torch.cuda.get_device_properties(0)", "ACC002"),
    ("m = torch.cuda", "ACC002"),
    ("i = torch.cuda.current_device()", "ACC003"),
    ("g = torch.cuda.default_generators[0]", "ACC004"),
    ("with torch.cuda.amp.autocast(): pass", "ACC010"),
    ("s = torch.cuda.amp.GradScaler()", "ACC011"),
    ("f = torch.cuda.amp.custom_fwd", "ACC012"),
    ("torch.backends.cudnn.benchmark = True", "ACC020"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "ACC020"),
    ("y = x.cuda()", "ACC030"),
    ("y = x.cuda(1, non_blocking=True)", "ACC030"),
    ("b = x.is_cuda", "ACC031"),
    ("y = x.pin_memory()", "ACC032"),
    ("d = torch.utils.data.DataLoader(ds, batch_size=8, pin_memory=True)", "ACC033"),
    ("import lightning as L; t = L.Trainer(accelerator='gpu', devices=2)", "ACC046"),
    ("from lightning.fabric import Fabric; f = Fabric(accelerator='cuda')", "ACC046"),
    ("d = torch.device('cuda')", "ACC040"),
    ("d = torch.device('cuda', 1)", "ACC040"),
    ("y = x.to('cuda:3')", "ACC040"),
    ("d = f'cuda:{rank}'", "ACC040"),
    ("dist.init_process_group(backend='nccl')", "ACC041"),
    ("os.environ['CUDA_VISIBLE_DEVICES'] = '0'", "ACC042"),
    ("y = x.to(0)", "ACC043"),
    ("y = x.to(self.gpu_id, non_blocking=True)", "ACC043"),
    ("y = x.to(device=args.gpu)", "ACC043"),
    ("d = torch.device(local_rank)", "ACC043"),
    ("t = torch.zeros(2, device=ddp_local_rank)", "ACC043"),
    ("y = x.to(int(os.environ['LOCAL_RANK']))", "ACC043"),
    ("m = DistributedDataParallel(m, device_ids=[rank])", "ACC044"),
    ("m = torch.nn.parallel.DistributedDataParallel(m, [rank])", "ACC044"),
    ("m = DistributedDataParallel(m, output_device=dev)", "ACC044"),
    ("world_size = torch.cuda.device_count()", "ACC045"),
    ("ngpus_per_node: int = torch.cuda.device_count()", "ACC045"),
    ("mp.spawn(main, nprocs=torch.cuda.device_count())", "ACC045"),
    ("self.world_size = torch.accelerator.device_count()", "ACC045"),
    ("ok = torch.accelerator.is_available()", "ACC050"),
    ("torch.accelerator.set_device_index(rank)", "ACC050"),
    ("with torch.accelerator.device_index(0): pass", "ACC050"),
    ("b = torch.distributed.get_default_backend_for_device(acc)", "ACC051"),
    ("d = 'cuda:{}'.format(args.gpu)", "ACC040"),
    ("d = 'cuda:%d' % i", "ACC040"),
    ("d = 'cuda:%d' % (i,)", "ACC040"),
    ("d = 'cuda:' + str(i)", "ACC040"),
    ("s = torch.load(p, map_location='cuda:{}'.format(args.gpu))", "ACC040"),
]


@pytest.mark.parametrize(("snippet", "code"), FLAGGED)
def test_each_construct_is_found_with_its_code(snippet: str, code: str) -> None:
    findings = check_source("import torch\n" + snippet + "\n")
    assert [f.code for f in findings] == [code]
    assert findings[0].line == 2
    assert could_match(snippet)


def test_a_file_that_only_assigns_ints_to_a_name_makes_it_an_index() -> None:
    source = "device = 0  # shorthand for cuda:0\nmodel.to(device)\n"
    assert [(f.line, f.code) for f in check_source(source)] == [(2, "ACC043")]


def test_a_local_rank_read_makes_its_name_an_index() -> None:
    source = "import os\nself.my_slot = int(os.environ['LOCAL_RANK'])\ny = x.to(self.my_slot)\n"
    assert [(f.line, f.code) for f in check_source(source)] == [(3, "ACC043")]


@pytest.mark.parametrize(
    "source",
    [
        "device = 0\ndevice = 'cpu'\nmodel.to(device)\n",  # not only ints
        "device = 0\ndef f(device):\n    return model.to(device)\n",  # a parameter may be any
        "for device in devices:\n    model.to(device)\ndevice = 0\n",
        "slot = int(os.environ['WORLD_SIZE'])\nmodel.to(slot)\n",  # an int, not a rank
        "x.to(device_from_device_id)\n",  # only a part of the name says index: a device
        "def f(device_id: torch.device | None):\n    return x.to(device_id)\n",  # declared
        "def f(self):\n    self.local_rank: str = 'a'\n    x.to(self.local_rank)\n",
    ],
)
def test_names_bound_to_anything_but_ints_are_not_indexes(source: str) -> None:
    assert check_source(source) == []


@pytest.mark.parametrize(
    "snippet",
    ["n = torch.cuda.device_count() if ok else 0", "count = torch.cuda.device_count()"],
)
def test_a_device_count_not_used_as_a_process_count_stays_a_contract_call(snippet: str) -> None:
    assert [f.code for f in check_source(snippet + "\n")] == ["ACC001"]


def test_a_parameter_declared_int_with_an_index_name_is_an_index() -> None:
    source = "def f(gpu_id: int | None):\n    return x.to(gpu_id)\n"
    assert [(f.line, f.code) for f in check_source(source)] == [(2, "ACC043")]


def test_ddp_with_several_devices_is_reported_without_a_one_line_fix() -> None:
    (finding,) = check_source("m = DistributedDataParallel(m, device_ids=[0, 1])\n")
    assert finding.code == "ACC044" and "ddp_device_ids(i) per process" in finding.suggestion


def test_every_rule_has_a_flagged_example() -> None:
    assert {code for _, code in FLAGGED} == set(RULES)


@pytest.mark.parametrize(
    "snippet",
    [
        "y = x.to(get_accelerator().current_device_name())",
        "y = get_accelerator().pin_memory(x)",
        "y = x.pin_memory(device)",  # an argument: not Tensor.pin_memory()
        "y = x.to(torch.float16)",  # a dtype
        "y = x.to(other)",  # a tensor, a device: not visible here
        "y = x.to(device)",  # a device name, most likely a string or torch.device
        "y = x.to(get_accelerator().device_name(rank))",
        "y = torch.device(rank, 'x')",  # not one index
        "m = DistributedDataParallel(m, device_ids=ddp_device_ids(rank))",
        "m = DistributedDataParallel(m, device_ids=None, output_device=None)",
        "m = DDP(m, output_device=ddp_output_device(rank))",
        "s = torch.load(p, map_location={'cuda:%d' % 0: 'cpu'})",  # a saved location: a label
        "s = 'cuda:{}:{}'.format(a, b)",
        "s = 'cuda:%d' % {'a': 1}",
        "s = 'cuda:' + name",
        "model = accelerator.prepare(model); y = x.to(accelerator.device)",  # HF accelerate
        "n = accelerator.num_processes",
        "name = 'cudart'",
        "'''A docstring that mentions torch.cuda.synchronize() and 'cuda'.'''",
        "# torch.cuda.synchronize()",
        "y = torch.xpu.synchronize()",
        "c = cuda.synchronize()  # a local object called cuda, not torch.cuda",
        "f = x.cuda",  # the bound method, not a move
        "d = torch.utils.data.DataLoader(ds, pin_memory=False)",
        "d = DataLoader(ds, pin_memory=get_accelerator().pin_memory_applies())",
        "import lightning as L; t = L.Trainer(accelerator='cpu', devices=2)",
        "from mylib import Trainer; t = Trainer(accelerator='gpu')",  # not Lightning's
    ],
)
def test_agnostic_or_unrelated_code_is_not_flagged(snippet: str) -> None:
    assert check_source("import torch\n" + snippet + "\n") == []


def test_import_aliases_are_resolved() -> None:
    source = (
        "import torch as th\nimport torch.cuda as tc\nfrom torch.cuda import synchronize\n"
        "from torch.cuda.amp import autocast as ac\n"
        "def f():\n    th.cuda.empty_cache()\n    tc.manual_seed(1)\n    synchronize()\n"
        "    with ac():\n        pass\n"
    )
    found = [(f.line, f.code, f.message.split("`")[1]) for f in check_source(source)]
    assert found == [
        (6, "ACC001", "torch.cuda.empty_cache"),
        (7, "ACC001", "torch.cuda.manual_seed"),
        (8, "ACC001", "torch.cuda.synchronize"),
        (9, "ACC010", "torch.cuda.amp.autocast"),
    ]


def test_decorators_and_nested_blocks_are_checked() -> None:
    source = (
        "import torch\n@register('cuda')\nclass A:\n    def f(self):\n"
        "        try:\n            pass\n        except torch.cuda.OutOfMemoryError:\n"
        "            if x:\n                for i in y:\n"
        "                    torch.cuda.synchronize()\n"
    )
    assert [(f.line, f.code) for f in check_source(source)] == [
        (2, "ACC040"),
        (7, "ACC002"),
        (10, "ACC001"),
    ]


def test_statements_guarded_to_cuda_are_not_flagged() -> None:
    source = (
        "import torch\nfrom anyaccel import get_accelerator\n"
        "if get_accelerator().device_name() == 'cuda':\n"
        "    torch.backends.cudnn.benchmark = True\n    print(torch.cuda.get_device_name(0))\n"
        "else:\n    torch.cuda.synchronize()\n"
    )
    assert [(f.line, f.code) for f in check_source(source)] == [(7, "ACC001")]


def test_position_and_format_follow_file_line_col() -> None:
    (finding,) = check_source("x = 1\ny = 'é' + z.cuda()\n", "pkg/m.py")
    assert (finding.line, finding.column) == (2, 11)
    assert finding.format().startswith("pkg/m.py:2:11: ACC030 ")
    assert finding.format().endswith("(.to(get_accelerator().current_device_name()))")


def test_inline_ignore_silences_named_codes_only() -> None:
    source = (
        "import torch\n"
        "x.cuda(); y.is_cuda  # anyaccel: ignore[ACC030]\n"
        "torch.cuda.synchronize()  # anyaccel: ignore\n"
        "z.cuda()  # anyaccel: ignore[acc031, ACC030]\n"
    )
    assert [(f.line, f.code) for f in check_source(source)] == [(2, "ACC031")]


def test_parse_ignores_reads_codes_and_bare_form() -> None:
    assert parse_ignores("a  # anyaccel: ignore[ACC001,ACC040]\nb\nc # anyaccel:ignore\n") == {
        1: frozenset({"ACC001", "ACC040"}),
        3: None,
    }


def test_syntax_errors_raise() -> None:
    with pytest.raises(SyntaxError):
        check_source("torch.cuda.synchronize(\n")


def test_portable_names_come_from_the_contract() -> None:
    from anyaccel.abstract import Accelerator

    public = {
        name
        for name, value in vars(Accelerator).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }
    assert contract_names() == public
    assert "synchronize" in portable_cuda_names()
    assert "device" not in portable_cuda_names()  # torch.cuda.device is a context manager


def test_rule_lookup_names_unknown_codes() -> None:
    assert rule("ACC001").name == "cuda-contract-api"
    with pytest.raises(KeyError, match=r"ACC999.*known: ACC001"):
        rule("ACC999")


def test_messages_and_suggestions_format_for_every_rule() -> None:
    for code, entry in RULES.items():
        assert entry.message.format(name="x") and entry.suggestion.format(attr="y"), code
        assert code.startswith("ACC") and len(code) == 6
    assert ast.parse("")  # the checker relies on the stdlib parser only
