"""The serving shell: how requests reach the core and how receipts become durable.

- ``write_path``: the receipt sink (commit, answer once durable) in-process or in the
  writer process, and the log keeping (sequencer, stream dispatcher) that runs where
  records are committed; ``build_write_path`` wires it for every topology.

The process topology (docs/architecture.md, "Process topology"): ``execauth serve``
runs one process (HTTP, writer thread, sequencer) or a supervisor, N gateway workers
(``serving/worker.py``) and one writer process (``writer_process.py``).
"""
