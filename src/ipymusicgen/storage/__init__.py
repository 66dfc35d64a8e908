"""The storage layer: one SQLite file (the journal) and its stores.

- `db`: the one connection helper (WAL, busy timeout, 0600 files, write transactions);
- `migrations`: numbered schema steps, applied once, in order (`PRAGMA user_version`);
- `journal`: paid attempts and tasks; `batches`: batch rows; `library`: songs, favourites, archive;
- `owner`: which process owns an attempt (alive or not).
"""
