from __future__ import annotations

import sys

from perception.camera_training import main

if __name__ == "__main__":
    sys.exit(main())
