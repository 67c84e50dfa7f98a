"""A Jepsen-style fault harness for raftcore: real node processes, real clients, real faults.

    .venv/bin/python -m tests.faults --seed 1 --duration 40 --nodes 3 [--no-partitions] [--seeds N]
        [--membership]

One run (``harness.run_once``): 3 or 5 ``raftcore node`` processes, each in its own Linux
network namespace joined by a bridge (``network``), or all on loopback where namespaces cannot
be made; writers -- two idempotent confluent-kafka producers and a raftcore.client Producer --
writing unique values and recording every attempt (``writers``, ``history``); a seeded nemesis
killing, pausing and partitioning nodes every 2-5 s (``nemesis``); an epoch monitor; then a
heal, convergence, consumers, and the checks (``checker``). ``scenarios`` holds scripted cases
(issue 9's deposed leader, the pre-vote check of an isolated follower).

Modules:
    network    namespaces, bridge, veths, nftables partitions; the loopback fallback
    nodes      node processes: start on the same data directory, kill, pause, stop, logs
    probe      Metadata and DescribeQuorum to every node in parallel: leaders, epochs, ends
    history    attempts and their outcomes (ok / fail / info)
    writers    the writer threads
    nemesis    the seeded fault schedule
    membership the membership nemesis: replace wiped voters, grow, shrink, transfer (--membership)
    voter_guard which kills, pauses and voter changes the voter sets in force survive
    checker    the checks over history, on-disk logs and consumer reads
    harness    one run, start to figures
    scenarios  scripted scenarios
"""
