"""SQLite job store shared by all backends (see store.py)."""
