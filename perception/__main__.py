from __future__ import annotations

import sys

from perception.cli import main

sys.exit(main())
