"""``python -m anyaccel``: the same as the ``anyaccel`` command."""

from __future__ import annotations

import sys

from anyaccel.cli import main

sys.exit(main())
