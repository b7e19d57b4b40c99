"""Run a script on a simulated vendor runtime over emulated devices: a vendor's machine in a CI job.

``python -m anyaccel.testing.simulated npu:2 train.py --epochs 1`` installs two emulated devices
named ``npu`` with the simulated ``torch_npu`` over them, then runs ``train.py`` as ``__main__``
(``-m module`` runs a module instead). Under torchrun each rank does the same::

    torchrun --nproc-per-node 2 -m anyaccel.testing.simulated npu:2 train.py

The script's ``get_accelerator()`` is anyaccel's own vendor backend (``NpuAccelerator``), its
tensors live on ``npu:N`` and its collectives run under the vendor's backend name (``hccl``).
Python processes the script starts enter the same simulation at startup (``ANYACCEL_SIMULATED``
and a ``sitecustomize`` on ``PYTHONPATH``), so a framework asked in a child process sees the
same devices.

A script that cannot be opened or a module that cannot be found is one line on stderr and
exit status 2, said before the simulation is installed where that can be known then.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys

from anyaccel.emulated.vendors.processes import (
    EMULATED_VENDORS,
    enter_for_process,
    parse_simulation,
    propagate_to_children,
)

#: How this runner names itself in its messages, as ``python`` does.
PROGRAM = "python -m anyaccel.testing.simulated"
USAGE = (
    "usage: python -m anyaccel.testing.simulated VENDOR[:COUNT] (SCRIPT | -m MODULE) [ARGS...]\n"
    f"  VENDOR: one of {', '.join(EMULATED_VENDORS)}; COUNT: devices per process (default 2)"
)


def main(argv: list[str]) -> int:
    """Parse ``argv`` (without the program name), install the simulation, run the target."""
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    try:
        parse_simulation(argv[0])  # checks the spec; nothing is installed yet
    except ValueError as error:
        print(f"error: {error}\n{USAGE}", file=sys.stderr)
        return 2
    module = argv[1] == "-m"
    if module and len(argv) < 3:
        print(f"error: -m needs a module name\n{USAGE}", file=sys.stderr)
        return 2
    target, rest = (argv[2], argv[3:]) if module else (argv[1], argv[2:])
    problem = _top_module_problem(target) if module else _script_problem(target)
    if problem is not None:  # known without importing anything: said before installing
        print(f"{PROGRAM}: {problem}", file=sys.stderr)
        return 2
    enter_for_process(argv[0])  # for the rest of the process, as a vendor's import does
    propagate_to_children(argv[0])  # and in every Python process the script starts
    sys.argv = [target, *rest]
    if module:
        problem = _module_problem(target)  # may import its packages: now, as runpy would
        if problem is not None:
            print(f"{PROGRAM}: {problem}", file=sys.stderr)
            return 2
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:  # as `python SCRIPT` does, the script's folder comes first on the path
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
    return 0


def _script_problem(path: str) -> str | None:
    """Why ``path`` cannot be run as a script (python's words), or ``None``."""
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, f"__main__{s}")) for s in (".py", ".pyc")):
            return None
        return f"can't find '__main__' module in {path!r}"
    try:
        with open(path, "rb"):
            return None
    except OSError as error:
        return f"can't open file {path!r}: [Errno {error.errno}] {error.strerror}"


def _top_module_problem(name: str) -> str | None:
    """Why the top-level package of module ``name`` cannot be found, or ``None``.

    Looking up a top-level name imports nothing, so it is safe before the simulation exists.
    """
    if not name or name.startswith("."):
        return f"Relative module names not supported: {name!r}"
    top = name.partition(".")[0]
    if importlib.util.find_spec(top) is None:
        return f"No module named {top}"
    return None


def _module_problem(name: str) -> str | None:
    """Why ``-m name`` cannot run (no such module, or a package without ``__main__``), or ``None``.

    Finds ``name`` as runpy does, importing its parent packages; only a module missing on the
    target's own dotted path is a problem said here: an error raised while a parent package
    runs (a dependency it imports, say) is the program's own and keeps its traceback.
    """
    own_path = {".".join(name.split(".")[: i + 1]) for i in range(name.count(".") + 1)}
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as error:
        if error.name not in own_path:
            raise
        found = f"{type(error).__name__}: {error}"
        return f"Error while finding module specification for {name!r} ({found})"
    if spec is None:
        return f"No module named {name}"
    package = spec.submodule_search_locations is not None  # a package runs its __main__
    if package and importlib.util.find_spec(f"{name}.__main__") is None:
        return (
            f"No module named {name}.__main__; {name!r} is a package and cannot be "
            "directly executed"
        )
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
