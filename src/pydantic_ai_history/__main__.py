"""`python -m pydantic_ai_history`: the same as the `pydantic-ai-history` command."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == '__main__':
    sys.exit(main())
