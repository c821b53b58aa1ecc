"""The ledger's pure core: RFC 9162 Merkle hashing and proofs, C2SP signed checkpoints.

No database, no HTTP, no clock: the store supplies hashes, the sequencer supplies
signers, and the verifier supplies trusted keys. ``merkle`` is the tree,
``note`` the C2SP signed-note envelope, ``checkpoint`` the tree head inside it.
"""
