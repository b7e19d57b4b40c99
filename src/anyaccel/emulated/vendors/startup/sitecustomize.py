"""Enter the simulation ``ANYACCEL_SIMULATED`` names when an interpreter starts.

``python -m anyaccel.testing.simulated`` puts this folder first on ``PYTHONPATH`` for the
processes a simulated script starts (a framework asked in a child process, data-loader workers
that spawn), so they see the same vendor devices as the script. Nowhere else is it on the path.
"""

from __future__ import annotations

import os

from anyaccel.settings import SIMULATED_ENV

if os.environ.get(SIMULATED_ENV):
    from anyaccel.emulated.vendors.processes import enter_for_process

    enter_for_process(os.environ[SIMULATED_ENV])
