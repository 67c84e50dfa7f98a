"""The ``raftcore`` command line: ``main`` is the ``raftcore`` command (and ``python -m
raftcore``), ``build_parser`` its argparse parser.

- :mod:`.app`: the top-level parser, ``main``, and the log and cluster commands (``dump-log``,
  ``verify-log``, ``describe-quorum``, ``produce``, ``consume``, ``demo``, ``storage-demo``);
- :mod:`.node`, :mod:`.quorum`, :mod:`.snapshot`, :mod:`.spark`, :mod:`.users`, :mod:`.certs`:
  the commands of each group, each adding its parsers;
- :mod:`.demo`, :mod:`.storage_demo`, :mod:`.quorum_watch`: what ``demo``, ``storage-demo`` and
  ``describe-quorum --watch`` run;
- :mod:`.args`: the argument types; :mod:`.logging_options`: ``-v``, ``--log-level``,
  ``--log-format``.

The library code a command calls stays beside what it serves (:mod:`raftcore.logtools`, the
client, the node): nothing below this package imports it.
"""

from raftcore.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
