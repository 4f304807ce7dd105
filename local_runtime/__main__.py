"""``python -m local_runtime`` (``make run``): see ``local_runtime.runtime``."""

import sys

from local_runtime.runtime import main

sys.exit(main())
