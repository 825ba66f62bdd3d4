"""API keys issued over the admin API and the console, stored hashed in the ledger database."""
