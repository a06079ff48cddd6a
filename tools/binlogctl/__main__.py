"""`python -m tools.binlogctl`."""

import sys

from tools.binlogctl import main

sys.exit(main())
