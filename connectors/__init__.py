"""Backends behind small Protocols: kafka, schema registry (and, later, redis, neo4j, ...)."""
