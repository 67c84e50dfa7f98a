"""The Kafka client API of a raftcore node, over a narrow
:class:`~raftcore.kafka.partition.Partition` protocol: one module per API (produce, fetch, list
offsets, metadata, describe quorum, delete records, producer ids), producer state and produce
validation. Nothing here imports :mod:`raftcore.node`: the node hands the API a
:class:`~raftcore.kafka.partition.Broker` (its id, bounds, metrics and partitions) and moves the
bytes."""
