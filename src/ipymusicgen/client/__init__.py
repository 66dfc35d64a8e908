"""The client layer: `MusicClient` / `AsyncMusicClient` and what they are made of.

Imports nothing above itself (no storage, archive, session, sandbox or UI): journals, archivers and
batches plug in from the composition root (`ipymusicgen.workspace.workspace`) through `client.wiring`.

- `faces`: the two faces (sync, async) over one sans-IO core (`core`);
- `flows`: the vocabulary of flows (Send, Sleep) and the journal protocol;
- `responses`: reading, classifying and parsing answers; `retry`: the one retry policy;
- `waiting`: wait, poll, resume; `transport`: bounded sync transport; `downloads`: files.
"""
