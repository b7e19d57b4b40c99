"""install() and DS_ACCELERATOR=emulated, each in a fresh process (PrivateUse1 is named once)."""

from __future__ import annotations

import textwrap

from .worker import run_python


def _run(code: str, env: dict[str, str] | None = None) -> str:
    done = run_python(textwrap.dedent(code), env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_importing_anyaccel_builds_and_registers_nothing() -> None:
    out = _run(
        """
        import sys, torch, anyaccel
        anyaccel.get_accelerator()
        native = {"anyaccel.emulated.runtime", "anyaccel.emulated.native_builders"}
        loaded = native & set(sys.modules)
        print(torch._C._get_privateuse1_backend_name(), sorted(loaded), hasattr(torch, "emu"))
        """
    )
    assert out.split() == ["privateuseone", "[]", "False"]


def test_install_is_idempotent_for_the_same_arguments() -> None:
    out = _run(
        """
        import torch
        from anyaccel.testing.emulated import install
        first = install("emu", 2, "64MiB")
        again = install("emu", 2, 64 * 2**20)
        print(first.device_name(1), again.device_count(), torch.emu.mem_get_info(0)[1])
        """
    )
    assert out.split() == ["emu:1", "2", str(64 * 2**20)]


def test_install_refuses_other_arguments_in_the_same_process() -> None:
    out = _run(
        """
        from anyaccel.testing.emulated import EmulatedDeviceError, install
        install("emu", 2)
        try:
            install("emu", 3)
        except EmulatedDeviceError as error:
            print(error)
        """
    )
    assert "already installed the emulated device" in out and "device_count=3" in out


def test_install_refuses_a_privateuse1_named_by_another_runtime() -> None:
    out = _run(
        """
        import torch
        torch.utils.rename_privateuse1_backend("vendorx")
        from anyaccel.testing.emulated import EmulatedDeviceError, install
        try:
            install("emu")
        except EmulatedDeviceError as error:
            print(error)
        """
    )
    assert "already belongs to 'vendorx'" in out


def test_install_refuses_a_torch_older_than_the_minimum_naming_it() -> None:
    out = _run(
        """
        import torch
        torch.__version__ = "2.3.1"
        from anyaccel.testing.emulated import MINIMUM_TORCH, EmulatedDeviceError, install
        try:
            install()
        except EmulatedDeviceError as error:
            print(error)
            print("needs torch >= {}.{}".format(*MINIMUM_TORCH) in str(error))
        print(torch._C._get_privateuse1_backend_name())
        """
    )
    assert "this is torch 2.3.1" in out and out.split()[-2:] == ["True", "privateuseone"]
    assert out.split()[-1] == "privateuseone"


def test_bad_install_arguments_name_the_value() -> None:
    out = _run(
        """
        from anyaccel.testing.emulated import install
        bad = ({"device_type": "cuda"}, {"device_count": 0}, {"memory_capacity": "2 parsecs"})
        for kwargs in bad:
            try:
                install(**kwargs)
            except ValueError as error:
                print(error)
        """
    )
    assert "'cuda' is torch's own" in out
    assert "device count 0 must be an int from 1 to 64" in out
    assert "'2 parsecs' is not a size" in out


def test_a_vendor_name_takes_the_vendors_collectives_backend() -> None:
    out = _run(
        """
        import torch
        from anyaccel.testing.emulated import install
        accelerator = install("npu", 1)
        print(accelerator.communication_backend_name(), accelerator.device_name(0),
              torch.ones(2, device="npu:0").device, accelerator.visible_devices_envs()[0])
        """
    )
    assert out.split() == ["hccl", "npu:0", "npu:0", "ASCEND_RT_VISIBLE_DEVICES"]


def test_ds_accelerator_emulated_reads_anyaccel_emulated() -> None:
    out = _run(
        """
        import torch, anyaccel
        accelerator = anyaccel.get_accelerator()
        print(type(accelerator).__name__, accelerator.device_count(), accelerator.device_name(2),
              accelerator.communication_backend_name(), torch.mlu.mem_get_info(2)[1])
        """,
        {"DS_ACCELERATOR": "emulated", "ANYACCEL_EMULATED": "mlu:3:2GiB"},
    )
    assert out.split() == ["EmulatedAccelerator", "3", "mlu:2", "cncl", str(2 * 2**30)]


def test_a_bad_anyaccel_emulated_names_the_variable_value_and_format() -> None:
    done = run_python(
        "import anyaccel; anyaccel.get_accelerator()",
        {"DS_ACCELERATOR": "emulated", "ANYACCEL_EMULATED": "emu:two"},
    )
    assert done.returncode != 0
    assert "ANYACCEL_EMULATED='emu:two' is not valid" in done.stderr
    assert "<type>:<count>[:<capacity>]" in done.stderr


def test_detection_never_chooses_the_emulated_device_on_its_own() -> None:
    out = _run(
        """
        import anyaccel
        print(anyaccel.get_accelerator()._name)
        """,
        {"ANYACCEL_EMULATED": "emu:2"},
    )
    assert out.split()[-1] == "cpu"


def test_after_install_get_accelerator_chooses_the_emulated_accelerator() -> None:
    out = _run(
        """
        import anyaccel
        from anyaccel.testing.emulated import install
        install("emu", 2)
        accelerator = anyaccel.get_accelerator()
        print(type(accelerator).__name__, accelerator.communication_backend_name())
        """
    )
    assert out.split() == ["EmulatedAccelerator", "emuccl"]


def test_a_bad_count_is_a_bad_setting_naming_the_count_not_a_broken_runtime() -> None:
    done = run_python(
        "import anyaccel; anyaccel.get_accelerator()",
        {"DS_ACCELERATOR": "emulated", "ANYACCEL_EMULATED": "npu:two"},
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("anyaccel.errors.InvalidSettingError: ANYACCEL_EMULATED='npu:two'")
    assert "the count (second part) 'two' is not a whole number of devices, 1 to 64" in last
    assert "installed but broken" not in done.stderr
    assert "runtime installation" not in done.stderr


def test_reset_accelerator_keeps_installed_devices_unless_another_backend_is_named() -> None:
    out = _run(
        """
        import os, torch, anyaccel
        from anyaccel.testing.emulated import install
        first = install("emu", 2)
        anyaccel.reset_accelerator()
        again = anyaccel.get_accelerator()
        os.environ["DS_ACCELERATOR"] = "cpu"
        anyaccel.reset_accelerator()
        named = anyaccel.get_accelerator()._name
        print(type(again).__name__, again is first, again.spec == first.spec, named,
              torch.ones(1, device="emu:1").device)
        """
    )
    assert out.split()[-5:] == ["EmulatedAccelerator", "False", "True", "cpu", "emu:1"]
