"""The usage ledger: one row per backend call, written without blocking and never lost.

Tables come from Alembic migrations (`migrations/`); no prompt or completion text is stored.
"""
