"""``python -m raftcore.cli`` is the ``raftcore`` command, as ``python -m raftcore`` is."""

import sys

from raftcore.cli import main

sys.exit(main())
