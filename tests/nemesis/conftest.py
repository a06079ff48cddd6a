"""The nemesis tests need root and network namespaces: without them they skip with the reason, and
under `CI=true` they fail instead (a CI machine must run them)."""

from __future__ import annotations

import os

import pytest

from tests.nemesis.hosts import require_netns


@pytest.fixture
def netns() -> None:
    reason = require_netns()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the nemesis suite cannot run: {reason}")
        pytest.skip(reason)
