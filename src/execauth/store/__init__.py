"""Storage adapters: tables, migrations, repositories and the batching receipt writer.

All SQL lives here; the core (policy, receipts, ledger) never imports this package.
"""
