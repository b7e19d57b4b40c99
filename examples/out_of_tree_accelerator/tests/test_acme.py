"""Acme's own suite: the anyaccel conformance kit, one test per contract check."""

from __future__ import annotations

import os

from anyaccel.testing.pytest_plugin import conformance_tests

os.environ.setdefault("ACME_BOARDS", "2")

test_acme_conformance = conformance_tests("acme_accel:AcmeAccelerator")
