from __future__ import annotations

import sys

from pybk.main import main

sys.exit(main())
