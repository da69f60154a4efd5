from __future__ import annotations

import sys
from pathlib import Path

# tests/ is not a package: put it on the path for the shared history builders (tests/_history.py).
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
