"""`python -m tools.reparo`."""

import sys

from tools.reparo import main

sys.exit(main())
