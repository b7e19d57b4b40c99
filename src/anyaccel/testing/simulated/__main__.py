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
"""

from __future__ import annotations

import os
import runpy
import sys

from anyaccel.emulated.vendors.processes import (
    EMULATED_VENDORS,
    enter_for_process,
    parse_simulation,
    propagate_to_children,
)

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
    enter_for_process(argv[0])  # for the rest of the process, as a vendor's import does
    propagate_to_children(argv[0])  # and in every Python process the script starts
    sys.argv = [target, *rest]
    if module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:  # as `python SCRIPT` does, the script's folder comes first on the path
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
