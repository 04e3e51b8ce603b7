"""docs/testing.md's example of `tickwork.testing`, run as it is written there.

The page is the helper's user documentation (ADR 0013); running its example keeps the two in
step: a renamed attribute or a broken clean-up fails here, not in a user's project.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable
from tickwork.testing import ServiceUnavailable

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
MARKER = "<!-- This block is run as it is by tests/integration/test_testing_helper.py. -->"


def documented_example() -> str:
    _, found, rest = DOC.read_text(encoding="utf-8").partition(MARKER)
    assert found, f"{DOC} no longer marks the example this test runs"
    block = re.match(r"\s*```python\n(.*?)\n```", rest, re.DOTALL)
    assert block is not None, "the marker must be followed by a ```python block"
    return block.group(1)


def test_the_documented_example_runs_and_leaves_nothing_behind() -> None:
    namespace: dict[str, Any] = {}
    try:
        exec(compile(documented_example(), str(DOC), "exec"), namespace)
    except ServiceUnavailable as exc:
        unavailable("redis", str(exc).splitlines()[0])
    server = namespace["server"]
    assert not server.running
    assert not namespace["files"].exists()
    with pytest.raises(ConnectionRefusedError):  # nothing listens on its port any more
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
