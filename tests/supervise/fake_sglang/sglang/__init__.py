"""A fake ``sglang`` package: its version comes from the file named by $FAKE_SGLANG_VERSION_FILE."""

import os
from pathlib import Path

__version__ = Path(os.environ["FAKE_SGLANG_VERSION_FILE"]).read_text().strip()
