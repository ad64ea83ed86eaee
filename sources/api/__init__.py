"""The REST API: event ingestion for the harvester and reads of a set's state."""
