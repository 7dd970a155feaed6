"""A fake ``sglang`` package: its version comes from the file named by $FAKE_SGLANG_VERSION_FILE.

Not a server: the supervisor reads the *installed* SGLang's version (``python -c "import sglang"``)
to pick its flags, and the simulator is not an installed ``sglang`` distribution, so this package
on PYTHONPATH is what lets a test upgrade "SGLang" between two launches.
"""

import os
from pathlib import Path

__version__ = Path(os.environ["FAKE_SGLANG_VERSION_FILE"]).read_text().strip()
