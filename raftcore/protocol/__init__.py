"""The Kafka binary protocol: message specs (JSON, Kafka's format) interpreted into codecs,
frames and headers, API keys and versions, error codes."""
