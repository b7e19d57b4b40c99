"""DeepSpeed's ``set_accelerator`` takes anyaccel's accelerator, whichever was imported first."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from anyaccel import deepspeed_abc
from anyaccel.integrations import deepspeed as ds_integration

from .conftest import run_python


class DeepSpeedEnv(NamedTuple):
    """An interpreter and extra import paths under which ``import deepspeed`` works."""

    python: str
    paths: tuple[str, ...]


@pytest.fixture(params=["simulated", "installed"])
def deepspeed_env(request: pytest.FixtureRequest, simulated_deepspeed: str) -> DeepSpeedEnv:
    """Once with the simulated DeepSpeed (everywhere), once with the installed one (if any)."""
    if request.param == "simulated":
        return DeepSpeedEnv(sys.executable, (simulated_deepspeed,))
    return DeepSpeedEnv(request.getfixturevalue("ds_python"), ())


def test_set_accelerator_takes_anyaccel_when_deepspeed_was_imported_first(
    deepspeed_env: DeepSpeedEnv,
) -> None:
    run_python(
        deepspeed_env.python,
        """
        import deepspeed.accelerator as da
        import anyaccel
        acc = anyaccel.get_accelerator()
        da.set_accelerator(acc)
        assert da.get_accelerator() is acc
        """,
        paths=deepspeed_env.paths,
    )


def test_set_accelerator_takes_anyaccel_when_deepspeed_is_imported_later(
    deepspeed_env: DeepSpeedEnv,
) -> None:
    run_python(
        deepspeed_env.python,
        """
        import sys
        import anyaccel
        acc = anyaccel.get_accelerator()
        assert not any(m.split('.')[0] == 'deepspeed' for m in sys.modules), 'imported DeepSpeed'
        import deepspeed.accelerator as da
        da.set_accelerator(acc)
        assert da.get_accelerator() is acc
        """,
        paths=deepspeed_env.paths,
    )


def test_install_hands_over_before_deepspeed_is_imported(deepspeed_env: DeepSpeedEnv) -> None:
    run_python(
        deepspeed_env.python,
        """
        from anyaccel.integrations.deepspeed import install
        import anyaccel
        acc = install()
        import deepspeed.accelerator as da
        assert acc is anyaccel.get_accelerator() and da.get_accelerator() is acc
        """,
        paths=deepspeed_env.paths,
    )


def test_install_with_an_accelerator_sets_it_in_anyaccel_and_deepspeed(
    deepspeed_env: DeepSpeedEnv,
) -> None:
    run_python(
        deepspeed_env.python,
        """
        import deepspeed.accelerator as da
        import anyaccel
        from anyaccel.backends.cpu import CpuAccelerator
        from anyaccel.integrations.deepspeed import install, registered_abcs
        mine = CpuAccelerator()
        assert install(mine) is mine
        assert anyaccel.get_accelerator() is mine and da.get_accelerator() is mine
        from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator
        assert any(abc is DeepSpeedAccelerator for abc in registered_abcs())
        """,
        paths=deepspeed_env.paths,
    )


def test_import_hook_keeps_the_abc_module_source_readable(simulated_deepspeed: str) -> None:
    result = run_python(
        sys.executable,
        """
        import inspect
        import anyaccel.abstract
        from deepspeed.accelerator import abstract_accelerator as m
        print(inspect.getsource(m.DeepSpeedAccelerator).splitlines()[0])
        print(type(m.__spec__.loader).__name__, m.__loader__.get_filename(m.__name__))
        """,
        paths=(simulated_deepspeed,),
    )
    first_line, loader_line = result.stdout.splitlines()
    assert first_line == "class DeepSpeedAccelerator(abc.ABC):"
    assert loader_line.endswith("abstract_accelerator.py")


def test_install_without_deepspeed_names_the_package_to_install() -> None:
    run_python(
        sys.executable,
        """
        import sys
        sys.modules['deepspeed'] = None  # DeepSpeed not importable, whatever is installed
        from anyaccel.integrations.deepspeed import DeepSpeedNotInstalledError, install
        try:
            install()
        except DeepSpeedNotInstalledError as error:
            assert 'pip install deepspeed' in str(error), error
            assert isinstance(error, ImportError)
        else:
            raise AssertionError('install() succeeded without DeepSpeed')
        """,
    )


def test_install_without_deepspeed_leaves_anyaccels_accelerator_as_it_was() -> None:
    run_python(
        sys.executable,
        """
        import sys
        sys.modules['deepspeed'] = None  # DeepSpeed not importable, whatever is installed
        import anyaccel
        from anyaccel.backends.cpu import CpuAccelerator
        from anyaccel.integrations.deepspeed import DeepSpeedNotInstalledError, install
        before = anyaccel.get_accelerator()
        mine = CpuAccelerator()
        try:
            install(mine)
        except DeepSpeedNotInstalledError as error:
            assert 'pip install deepspeed' in str(error), error
        else:
            raise AssertionError('install() succeeded without DeepSpeed')
        # the old code had already made `mine` anyaccel's accelerator
        assert anyaccel.get_accelerator() is before, anyaccel.detection_report()
        """,
    )


def test_install_refuses_an_object_that_is_no_accelerator(simulated_deepspeed: str) -> None:
    run_python(
        sys.executable,
        """
        import anyaccel
        from anyaccel.integrations.deepspeed import install
        try:
            install(object())
        except anyaccel.InvalidAcceleratorError as error:
            assert 'object object is not an accelerator' in str(error), error
        else:
            raise AssertionError('install() took a plain object')
        import deepspeed.accelerator as da
        assert da.get_accelerator() is None  # nothing was half-applied
        """,
        paths=(simulated_deepspeed,),
    )


def test_the_import_hook_is_installed_once_and_ignores_other_modules() -> None:
    class Extra:
        pass

    ds_integration.register_with_deepspeed(Extra)
    ds_integration.register_with_deepspeed(Extra)
    watchers = [f for f in sys.meta_path if isinstance(f, deepspeed_abc._DeepSpeedABCWatcher)]
    assert len(watchers) == 1
    assert watchers[0].find_spec("json", None) is None
    assert watchers[0].find_spec("deepspeed_not_a_real_module_xyz", None) is None


def test_importing_anyaccel_and_detecting_never_imports_deepspeed(ds_python: str) -> None:
    run_python(
        ds_python,
        """
        import sys
        import anyaccel
        anyaccel.get_accelerator().create_op_builder('CPUAdamBuilder')
        loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'deepspeed')
        assert not loaded, loaded
        """,
    )


def test_install_hands_over_a_backend_deepspeed_does_not_know(ds_python: str) -> None:
    # DeepSpeed 0.19.8's own detection raises ValueError for DS_ACCELERATOR=musa while
    # ``import deepspeed`` runs; install() first makes DeepSpeed take anyaccel's musa.
    run_python(
        ds_python,
        """
        import os
        os.environ["DS_ACCELERATOR"] = "musa"
        from anyaccel.testing.simulated import simulate_musa
        with simulate_musa(2):
            import anyaccel.integrations.deepspeed as ds_integration
            acc = ds_integration.install()
            assert acc._name == "musa", acc._name
            import deepspeed
            from deepspeed.accelerator import get_accelerator
            assert get_accelerator() is acc
            assert deepspeed.accelerator.get_accelerator().device_name(1) == "musa:1"
        """,
    )


def test_install_after_a_failed_import_deepspeed_still_hands_over(ds_python: str) -> None:
    # ``import deepspeed`` failed on DS_ACCELERATOR=musa but left its selector module loaded;
    # install() gives that selector anyaccel's accelerator, and the next import works.
    run_python(
        ds_python,
        """
        import os
        os.environ["DS_ACCELERATOR"] = "musa"
        from anyaccel.testing.simulated import simulate_musa
        with simulate_musa(1):
            try:
                import deepspeed
            except ValueError as error:
                assert "DS_ACCELERATOR" in str(error), error
            else:
                raise AssertionError("DeepSpeed 0.19.8 accepted DS_ACCELERATOR=musa by itself")
            from anyaccel.integrations.deepspeed import install
            acc = install()
            import deepspeed
            from deepspeed.accelerator import get_accelerator
            assert get_accelerator() is acc and deepspeed.get_accelerator() is acc
        """,
    )


def test_deepspeed_failing_to_import_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "deepspeed"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        "raise ValueError(\"DS_ACCELERATOR must be one of ['cuda', 'cpu']\")\n"
    )
    result = run_python(
        sys.executable,
        """
        from anyaccel.integrations.deepspeed import DeepSpeedHandOverError, install
        try:
            install()
        except DeepSpeedHandOverError as error:
            message = str(error)
        else:
            raise AssertionError("no error")
        assert "DS_ACCELERATOR must be one of" in message, message
        assert "'cpu' accelerator" in message and "call install() before" in message, message
        print("ok")
        """,
        paths=(str(tmp_path),),
    )
    assert "ok" in result.stdout


def test_install_before_import_keeps_deepspeeds_own_op_builders(ds_python: str) -> None:
    # For a name DeepSpeed knows, the hand-over waits until DeepSpeed has bound its op-builder
    # classes (its optimizers call their native modules' C++ interface), as before.
    run_python(
        ds_python,
        """
        import os
        os.environ["DS_ACCELERATOR"] = "cpu"
        from anyaccel.integrations.deepspeed import install
        acc = install()
        from deepspeed.accelerator import get_accelerator
        from deepspeed.ops.op_builder import CPUAdamBuilder
        assert get_accelerator() is acc
        assert CPUAdamBuilder.__module__.startswith("deepspeed."), CPUAdamBuilder.__module__
        """,
    )
