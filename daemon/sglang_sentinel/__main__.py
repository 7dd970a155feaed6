import sys

from sglang_sentinel.cli import main

sys.exit(main())
