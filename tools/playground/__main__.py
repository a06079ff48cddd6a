"""`python -m tools.playground`."""

import sys

from tools.playground import main

sys.exit(main())
