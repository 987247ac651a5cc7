"""The fault suite: backends and brokers that go away, come back empty, or are attacked mid-flow.

Each test breaks a real server (Redis, Neo4j, Elasticsearch, the embedded broker, Apache Kafka)
while the bus runs, and shows what must hold: work pauses in place and finishes as it would
have, nothing is dead-lettered, a store that lost its data is noticed, a redrive stays inside
its sandbox.
"""
