"""``python -m raftcore`` is the ``raftcore`` command."""

import sys

from raftcore.cli import main

sys.exit(main())
