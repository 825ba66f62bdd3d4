"""Exactly-once model calls behind an `Idempotency-Key`: the record of each reply (store), its
live recording and the retries that join or replay it (live, recorder, joiner), and the
decision a keyed request gets (service). No HTTP here: replies are a head and byte chunks."""
